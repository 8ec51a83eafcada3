"""``[[upstreams]]``: one inference server each, the requests it serves, how the gateway
connects to it, retries requests that never started and stops sending requests while it is down
(``app.upstream.retry``, ``app.upstream.breaker``). The single-upstream ``upstream_*`` keys of
``Settings`` make one ``UpstreamConfig`` named "default" (``Settings.resolved_upstreams``).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from app.options.urls import check_http_url, strip_base_url
from app.tools.hosted import HostedToolPolicy

# The kinds app.upstream.kinds.UPSTREAM_KINDS builds (tests/upstream/test_kinds.py checks that
# both list the same names). A Literal, so an unknown kind fails validation at start-up and the
# settings do not import the adapters.
UpstreamKind = Literal["responses", "chat"]

# The connection pool of an upstream holds at most max_connections connections; a request past
# them waits in the gateway for one to be released (app.upstream.pool). An inference server
# queues the requests past its own batch (vLLM's max_num_seqs: 256, or 1024 on large GPUs in
# recent versions; SGLang's max_running_requests, sized from the KV cache, often more), where
# its scheduler sees them, so the gateway's pool must not be the narrower queue: 1024 is vLLM's
# largest default. It also fits the descriptor budget: a stream holds one client connection
# and one upstream connection, so one process at its default [server] max_connections (2048)
# plus a full pool uses 3,072 descriptors, under the 4,096 the smallest common hard
# open-files limit allows (the gateway raises its soft limit to the hard one,
# app.connections). 0 means no limit (aiohttp's): then 2,048 streams need 4,096 descriptors
# and more, so use it with `ulimit -n` well above twice [server] max_connections.
DEFAULT_MAX_CONNECTIONS = 1024
# A request that waited this long or longer for a pool connection logs a warning (at most one
# line per upstream every 10 s, app.upstream.pool). A wait happens only when the pool is full;
# one second is the time to first token of a loaded GPU server, so such a wait doubles what a
# client sees before its first token, while the brief waits of a pool just filling do not log.
DEFAULT_POOL_WAIT_WARN_SECONDS = 1.0


class UpstreamConfig(BaseModel):
    """One inference server (``[[upstreams]]``), and which requests it serves."""

    model_config = ConfigDict(extra="forbid")

    name: str = Field(pattern=r"^[A-Za-z0-9_.-]{1,64}$")
    url: str
    # "responses": the server has /v1/responses (vLLM, SGLang, OpenAI); "chat": only
    # /v1/chat/completions (Ollama, llama.cpp, TGI, ...), translated by the gateway.
    kind: UpstreamKind = "responses"
    api_key: str | None = None
    # The name of an environment variable holding the API key (keeps secrets out of the file).
    api_key_env: str | None = None
    # Send the client's own credential (a JWT, or with [auth] off its bearer / x-api-key) here
    # instead of api_key; never a gateway key, and never to another upstream.
    forward_client_key: bool = False
    connect_timeout: float = Field(default=10.0, gt=0)
    read_timeout: float = Field(default=600.0, gt=0)
    # The pool's connections at most (0: no limit); see DEFAULT_MAX_CONNECTIONS above.
    max_connections: int = Field(default=DEFAULT_MAX_CONNECTIONS, ge=0)
    # A wait for a pool connection this long or longer (seconds) logs a warning; 0: every wait.
    pool_wait_warn_seconds: float = Field(default=DEFAULT_POOL_WAIT_WARN_SECONDS, ge=0)
    # A request that never reached a working server (connection refused or reset, 502, 503) is
    # sent again up to ``retries`` times, after a random wait of up to retry_backoff_seconds *
    # 2**n (full jitter), or the wait the server's retry-after asks, unless it is longer than
    # retry_max_wait_seconds (app.upstream.retry).
    retries: int = Field(default=2, ge=0, le=10)
    retry_backoff_seconds: float = Field(default=0.5, gt=0)
    retry_max_wait_seconds: float = Field(default=10.0, gt=0)
    # After breaker_threshold failures in a row (unreachable, timed out, 502, 503, 504) the
    # upstream gets no requests for breaker_cooldown_seconds (503 upstream_unavailable at once),
    # then one trial request decides (app.upstream.breaker). 0: no circuit breaker.
    breaker_threshold: int = Field(default=5, ge=0)
    breaker_cooldown_seconds: float = Field(default=30.0, gt=0)
    # Models routed here: exact names, or glob patterns with * ? [...] ("qwen3:*").
    models: list[str] = Field(default_factory=list)
    # Model-name rewrite: the name clients use -> the name sent upstream. Keys route here too.
    model_map: dict[str, str] = Field(default_factory=dict)
    # Requests whose model no upstream claims go to the default upstream (the first one
    # listed when none is marked).
    default: bool = False
    # kind "chat" only: prior reasoning items are dropped, or sent on the next assistant
    # message under this field ("reasoning_content": vLLM, DeepSeek; "reasoning": newer vLLM,
    # Ollama);
    reasoning_history: Literal["drop", "reasoning_content", "reasoning"] = "drop"
    # send reasoning.effort as reasoning_effort (turn off for servers that reject it);
    send_reasoning_effort: bool = True
    # ask for usage in streams (stream_options.include_usage; off for servers that reject it).
    stream_usage: bool = True
    # hosted tools the gateway cannot run, for requests routed here (None: hosted_tools).
    hosted_tools: HostedToolPolicy | None = None
    # The client tool types the server takes as they are; the others ("namespace", "custom",
    # client "tool_search") are lowered to function tools and their calls raised back. None:
    # ["function"], what chat servers and vLLM's and SGLang's /v1/responses run; for OpenAI:
    # ["function", "custom", "namespace", "tool_search"].
    native_tool_types: list[str] | None = None
    # kind "responses" only: the server has its own POST /v1/responses/compact (OpenAI), where
    # compact requests for its models are forwarded as they are; off: the gateway compacts with
    # the model (core.compact).
    native_compact: bool = False
    # The context window (tokens) of the models served here, for ``truncation`` (None: the
    # server's ``max_model_len`` from GET /v1/models, asked when a request wants "auto").
    context_window: int | None = Field(default=None, gt=0)
    # The tool sets (namespaces) every request routed here gets, besides those it names.
    tool_sets: list[str] = Field(default_factory=list)

    def guard_options(self) -> dict[str, Any]:
        """The keyword arguments of ``app.upstream.retry.create_guard``."""
        return {
            "retries": self.retries,
            "backoff": self.retry_backoff_seconds,
            "max_wait": self.retry_max_wait_seconds,
            "threshold": self.breaker_threshold,
            "cooldown": self.breaker_cooldown_seconds,
        }

    @field_validator("url")
    @classmethod
    def _strip_url(cls, value: str) -> str:
        return strip_base_url(check_http_url(value))

    def resolved_api_key(self, environ: Mapping[str, str]) -> str | None:
        """``api_key``, else the environment variable ``api_key_env`` names.

        Raises ValueError naming the variable when it is not set.
        """
        if self.api_key is not None or self.api_key_env is None:
            return self.api_key
        value = environ.get(self.api_key_env)
        if value is None:
            raise ValueError(
                f"upstream {self.name!r}: api_key_env names {self.api_key_env}, which is not set"
            )
        return value
