"""MCP failures as OpenAI ``McpToolCallError`` objects (``McpError``), and the mapping of
whatever the SDK raised onto them.

``http_error`` (with the HTTP status) when the server answered with an HTTP error status,
``mcp_protocol_error`` (with a JSON-RPC code) for JSON-RPC errors, connection failures
(-32000) and timeouts (-32001); ``mcp_tool_execution_error`` (a result with ``isError``) is
an outcome, not an exception (``outcomes``).

A connection that could not be made says only that (``unreachable``): whether the egress policy
refused the address, the port was closed, the connection timed out or the name did not resolve
is for the gateway's log, never for the client (who could otherwise map the network).

The streamable HTTP transport turns an HTTP error status into a synthesized JSON-RPC error
without the status. A response hook on the httpx2 client (``transport``) records the status of
a failed POST into the ``HttpStatusBox`` of the operation that sent it: the SDK runs each
message's POST in the context of the task that sent the message, so a context variable set
around an operation reaches the hook.
"""

from __future__ import annotations

import asyncio
import contextvars
import socket
from dataclasses import dataclass

import httpx2
from mcp.shared.exceptions import MCPError

from app.net.egress import EgressRefused
from app.protocol.json_types import JsonObject

CONNECTION_FAILED = -32000
"""JSON-RPC-style code of a connection that failed or closed (the SDK's CONNECTION_CLOSED)."""
TIMED_OUT = -32001
"""JSON-RPC-style code of an operation that timed out (the SDK's REQUEST_TIMEOUT)."""
INVALID_PARAMS = -32602
"""JSON-RPC code of a call whose arguments the server (or the gateway) rejects."""


class McpError(Exception):
    """A failed MCP operation; ``error`` is an OpenAI McpToolCallError object."""

    def __init__(self, error: JsonObject) -> None:
        super().__init__(str(error.get("message", "MCP error")))
        self.error = error

    @classmethod
    def protocol(cls, code: int, message: str) -> McpError:
        return cls({"type": "mcp_protocol_error", "code": code, "message": message})

    @classmethod
    def http(cls, status: int, message: str) -> McpError:
        return cls({"type": "http_error", "code": status, "message": message})


# --- HTTP status capture --------------------------------------------------------------------------


@dataclass(slots=True)
class HttpStatusBox:
    """The HTTP error status (and reason) of the first failed POST of one operation."""

    status: int | None = None
    reason: str = ""


HTTP_STATUS: contextvars.ContextVar[HttpStatusBox | None] = contextvars.ContextVar(
    "respgate_mcp_http_status", default=None
)


# --- error mapping --------------------------------------------------------------------------------


def _leaf_exceptions(exc: BaseException) -> list[BaseException]:
    if isinstance(exc, BaseExceptionGroup):
        leaves: list[BaseException] = []
        for inner in exc.exceptions:
            leaves.extend(_leaf_exceptions(inner))
        return leaves
    return [exc]


def _describe(exc: BaseException) -> str:
    text = str(exc).strip()
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def describe_failure(exc: BaseException) -> str:
    """Every leaf of ``exc`` described, for the gateway's log."""
    return "; ".join(_describe(leaf) for leaf in _leaf_exceptions(exc))


# Failures to open a connection: they answer with one message, whatever the reason.
_CONNECT_FAILURES = (
    httpx2.ConnectError,
    httpx2.ConnectTimeout,
    EgressRefused,
    ConnectionError,
    socket.gaierror,
)


def unreachable(label: str) -> McpError:
    """The one answer for a connection that could not be made (see the module docstring)."""
    return McpError.protocol(CONNECTION_FAILED, f"cannot connect to MCP server {label}")


def error_from_exception(
    exc: BaseException, *, label: str, what: str, box: HttpStatusBox | None
) -> McpError:
    """Map whatever the SDK raised for ``what`` (e.g. "tools/list") to an McpError."""
    leaves = [
        leaf for leaf in _leaf_exceptions(exc) if not isinstance(leaf, asyncio.CancelledError)
    ] or [exc]
    for leaf in leaves:
        if isinstance(leaf, McpError):
            return leaf
    for leaf in leaves:
        if isinstance(leaf, httpx2.HTTPStatusError):
            response = leaf.response
            return McpError.http(
                response.status_code,
                f"MCP server {label} answered HTTP {response.status_code} "
                f"{response.reason_phrase}".rstrip(),
            )
    if box is not None and box.status is not None:
        return http_error(label, box.status, box.reason, leaves)
    if any(isinstance(leaf, _CONNECT_FAILURES) for leaf in leaves):
        return unreachable(label)
    for leaf in leaves:
        if isinstance(leaf, MCPError):
            return McpError.protocol(leaf.code, leaf.message)
    for leaf in leaves:
        if isinstance(leaf, TimeoutError):
            return McpError.protocol(TIMED_OUT, f"MCP {what} on {label} timed out")
    for leaf in leaves:
        if isinstance(leaf, httpx2.TransportError | OSError):
            return McpError.protocol(
                CONNECTION_FAILED, f"cannot reach MCP server {label}: {_describe(leaf)}"
            )
    return McpError.protocol(
        CONNECTION_FAILED, f"MCP {what} on {label} failed: {_describe(leaves[0])}"
    )


# What the streamable HTTP transport says in place of an HTTP error status without a JSON-RPC body.
_SYNTHESIZED_HTTP_MESSAGES = frozenset(
    {"Server returned an error response", "Not Found", "Session terminated"}
)


def http_error(label: str, status: int, reason: str, leaves: list[BaseException]) -> McpError:
    """An http_error for ``status``, with the server's JSON-RPC message if it sent one."""
    message = f"MCP server {label} answered HTTP {status} {reason}".rstrip()
    for leaf in leaves:
        if isinstance(leaf, MCPError) and leaf.message not in _SYNTHESIZED_HTTP_MESSAGES:
            message = f"{message}: {leaf.message}"
            break
    return McpError.http(status, message)


def timed_out(what: str, timeout: float) -> McpError:
    return McpError.protocol(TIMED_OUT, f"MCP {what} timed out after {timeout:g}s")


def outcome_error_kind(error: JsonObject) -> str:
    """The tool-call event ``error_kind`` of an ``mcp_call`` error object: ``tool_error`` (the
    tool answered with ``isError``), ``http_status``, ``timeout``, ``network_error``,
    ``invalid_arguments`` or ``protocol_error``."""
    kind = error.get("type")
    if kind == "mcp_tool_execution_error":
        return "tool_error"
    if kind == "http_error":
        return "http_status"
    code = error.get("code")
    if code == TIMED_OUT:
        return "timeout"
    if code == CONNECTION_FAILED:
        return "network_error"
    if code == INVALID_PARAMS:
        return "invalid_arguments"
    return "protocol_error"
