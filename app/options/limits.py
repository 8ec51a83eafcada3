"""``[limits]``: the ceilings every request runs under, each answered in OpenAI's error shape.

The defaults are far above what real clients send (Codex CLI offers about 40 tools, Claude Code
a few more, an MCP-heavy setup a few hundred) and below what hurts the gateway. Rate limits are
off unless configured. Where each limit is enforced:

- ``max_json_depth``: ``app.api.body`` (400 ``invalid_request_error``, every JSON route and
  WebSocket frame);
- ``max_tools``, ``max_mcp_servers``: ``app.core.request_limits`` (400, ``param`` ``tools``);
- ``max_tool_calls_per_round``, ``max_tool_result_bytes``, ``request_timeout``,
  ``background_timeout``: the tool loop (``app.core.loop``, ``app.core.call_runner``,
  ``app.core.deadline``);
- ``max_upstream_event_bytes``: the upstream's SSE reader (``app.upstream.sse``) and its JSON
  answers (``app.upstream.http``);
- ``requests_per_minute``, ``tokens_per_minute``, ``keys``, ``tenants``, ``anonymous``:
  ``app.api.rate_limit`` (429 ``rate_limit_exceeded``).
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

# orjson serialises at most 254 levels; a body is echoed inside a Response a few levels down.
MAX_JSON_DEPTH_CEILING = 200


class RateLimit(BaseModel):
    """A per-key (or per-tenant) rate: ``None`` inherits the ``[limits]`` default, 0 is
    unlimited."""

    model_config = ConfigDict(extra="forbid")

    requests_per_minute: int | None = Field(default=None, ge=0)
    tokens_per_minute: int | None = Field(default=None, ge=0)


class LimitsSettings(BaseModel):
    """Every key is documented, with its default, in config/respgate.example.toml."""

    model_config = ConfigDict(extra="forbid")

    # Tools in one request's ``tools`` (a ``namespace`` tool counts its inner tools).
    max_tools: int = Field(default=512, ge=1)
    # Distinct MCP servers (``type: "mcp"`` tools) in one request.
    max_mcp_servers: int = Field(default=32, ge=1)
    # Gateway tool calls run in one round; the model's further calls are not run and it is
    # told so (as with ``max_tool_calls``).
    max_tool_calls_per_round: int = Field(default=64, ge=1)
    # The result of one gateway tool call (UTF-8 bytes): a longer one is cut, with a note to the
    # model; the item the client sees and the one stored are cut the same way.
    max_tool_result_bytes: int = Field(default=1024 * 1024, ge=1024)
    # One upstream SSE line or event, or one JSON answer (bytes): a larger one fails the
    # response (502 before the stream starts; ``error`` + ``response.failed`` after).
    max_upstream_event_bytes: int = Field(default=32 * 1024 * 1024, ge=64 * 1024)
    # The whole request (every round and tool call, seconds): past it the response ends
    # ``incomplete`` with ``incomplete_details.reason`` ``"request_timeout"``. 0: none.
    request_timeout: float = Field(default=1800.0, ge=0)
    # The same for a ``background: true`` response (counted from when its run starts).
    background_timeout: float = Field(default=4 * 3600.0, ge=0)
    # How deep a JSON body (or WebSocket frame) may nest: deeper is a 400.
    max_json_depth: int = Field(default=128, ge=8, le=MAX_JSON_DEPTH_CEILING)

    # Rate limits per caller (the gateway API key; the tenant for callers without a key id):
    # requests, and tokens (the usage of completed responses), per minute. 0: no limit.
    requests_per_minute: int = Field(default=0, ge=0)
    tokens_per_minute: int = Field(default=0, ge=0)
    # Per-key overrides, by key id (``[limits.keys.key_abc]``), and per tenant.
    keys: dict[str, RateLimit] = Field(default_factory=dict)
    tenants: dict[str, RateLimit] = Field(default_factory=dict)
    # With authentication off (no key, the default tenant): one bucket per client address, or
    # one bucket for everyone.
    anonymous: Literal["client_address", "global"] = "client_address"

    def loop_limits(self) -> dict[str, Any]:
        """The ``app.core.limits.LoopLimits`` fields these settings fill in."""
        return {
            "max_calls_per_round": self.max_tool_calls_per_round,
            "max_result_bytes": self.max_tool_result_bytes,
            "request_timeout": self.request_timeout or None,
            "background_timeout": self.background_timeout or None,
            "max_tools": self.max_tools,
            "max_mcp_servers": self.max_mcp_servers,
        }

    def rate_for(self, key_id: str | None, tenant: str) -> tuple[int, int]:
        """Requests and tokens per minute for a caller (0: no limit): its key's override,
        else its tenant's, else the defaults, field by field."""
        requests, tokens = self.requests_per_minute, self.tokens_per_minute
        for override in (self.tenants.get(tenant), self.keys.get(key_id or "")):
            if override is None:
                continue
            if override.requests_per_minute is not None:
                requests = override.requests_per_minute
            if override.tokens_per_minute is not None:
                tokens = override.tokens_per_minute
        return requests, tokens

    @property
    def rate_limited(self) -> bool:
        """Whether any caller has a rate limit (else the middleware is not installed)."""
        overrides = [*self.keys.values(), *self.tenants.values()]
        return bool(
            self.requests_per_minute
            or self.tokens_per_minute
            or any(o.requests_per_minute or o.tokens_per_minute for o in overrides)
        )
