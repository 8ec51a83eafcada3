"""The limits a response runs under (``LoopLimits``), and the checks of a request against them
that come before anything is run (``check_request_limits``: tools and MCP servers per request).

The settings' ``[limits]`` group (``app.options.limits``) fills them in (``app.main``); the
kernel sees plain numbers. ``None`` is no limit.
"""

from __future__ import annotations

from dataclasses import dataclass

from app.core.deadline import Deadline
from app.errors import InvalidRequestError
from app.protocol.json_types import JsonObject

# The tool loop's iteration cap is clamped to [MIN_ROUNDS, HARD_MAX_ROUNDS] wherever it is set.
MIN_ROUNDS = 1
HARD_MAX_ROUNDS = 32


def clamp_rounds(value: int) -> int:
    """A round cap within [1, 32]."""
    return max(MIN_ROUNDS, min(value, HARD_MAX_ROUNDS))


@dataclass(frozen=True, slots=True)
class LoopLimits:
    max_rounds: int = 10
    call_timeout: float = 60.0
    max_concurrency: int = 5
    round_timeout: float | None = None
    # Gateway calls run in one round (the model is told the others were not run).
    max_calls_per_round: int | None = None
    # One gateway call's result (UTF-8 bytes), for the model and in the item (``core.bounds``).
    max_result_bytes: int | None = None
    # The whole request, in seconds (``core.deadline``); background responses have their own.
    request_timeout: float | None = None
    background_timeout: float | None = None
    # Tools in a request's ``tools`` (a namespace counts its inner tools), and MCP servers.
    max_tools: int | None = None
    max_mcp_servers: int | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "max_rounds", clamp_rounds(self.max_rounds))

    def deadline(self, *, background: bool) -> Deadline | None:
        """A request's deadline, from now (None: none); in a running event loop."""
        return Deadline.after(self.background_timeout if background else self.request_timeout)


def check_request_limits(body: JsonObject, limits: LoopLimits) -> None:
    """A 400 naming ``tools`` when the request offers more tools or MCP servers than allowed
    (OpenAI's shape for an array over its maximum length)."""
    tools = body.get("tools")
    if not isinstance(tools, list):
        return
    if limits.max_tools is not None:
        count = sum(_tool_count(tool) for tool in tools)
        if count > limits.max_tools:
            raise InvalidRequestError(
                f"Invalid 'tools': array too long. Expected an array with maximum length "
                f"{limits.max_tools}, but got an array with length {count} instead (the tools "
                "of a namespace count one each).",
                param="tools",
                code="array_above_max_length",
            )
    if limits.max_mcp_servers is not None:
        servers = {
            str(tool.get("server_label"))
            for tool in tools
            if isinstance(tool, dict) and tool.get("type") == "mcp"
        }
        if len(servers) > limits.max_mcp_servers:
            raise InvalidRequestError(
                f"Invalid 'tools': {len(servers)} MCP servers in one request; this server "
                f"accepts at most {limits.max_mcp_servers}.",
                param="tools",
                code="too_many_mcp_servers",
            )


def _tool_count(tool: object) -> int:
    if isinstance(tool, dict) and tool.get("type") == "namespace":
        inner = tool.get("tools")
        if isinstance(inner, list):
            return max(1, len(inner))
    return 1
