"""MCP client layer on the official ``mcp`` SDK: sessions, tool listing and calls, a session pool.

The SDK is built on anyio: its transports and sessions are async context managers holding task
groups and cancel scopes that must be entered and exited in the same task. The gateway uses one
session from several asyncio tasks at once (parallel tool calls) and closes it from yet another,
so every ``McpSession`` owns its ``mcp.Client`` inside one dedicated background task: the task
enters the client (transport, session, handshake), signals readiness, waits for a close request
and exits the client again. Requests from any task go through the entered session, which
supports concurrent requests. A call also watches that task, so a server that dies (or a close)
while a call is in flight ends the call with an error instead of leaving it hanging.

Failures are reported as OpenAI ``McpToolCallError`` objects: ``http_error`` (with the HTTP
status) when the server answered with an HTTP error status, ``mcp_protocol_error`` (with a
JSON-RPC code) for JSON-RPC errors, connection failures (-32000) and timeouts (-32001), and
``mcp_tool_execution_error`` (with the result's content blocks) for a result with ``isError``.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import copy
import functools
import json
import logging
import ssl
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal, TypeVar
from urllib.parse import urlsplit

import certifi
import httpx2
import mcp_types
from mcp import Client, StdioServerParameters
from mcp.client._transport import Transport
from mcp.client.sse import sse_client
from mcp.client.stdio import stdio_client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import MCP_DEFAULT_SSE_READ_TIMEOUT, MCP_DEFAULT_TIMEOUT
from mcp.shared.exceptions import MCPError

from app.protocol.json_types import JsonObject

logger = logging.getLogger(__name__)

McpTransport = Literal["streamable_http", "sse", "stdio"]

_T = TypeVar("_T")

CONNECTION_FAILED = -32000
"""JSON-RPC-style code of a connection that failed or closed (the SDK's CONNECTION_CLOSED)."""
TIMED_OUT = -32001
"""JSON-RPC-style code of an operation that timed out (the SDK's REQUEST_TIMEOUT)."""

# "legacy": the initialize handshake (protocol 2025-11-25 and older), which every server deployed
# today speaks, Python's MCPServer and the TypeScript SDK's servers (server-everything) included.
# "auto" also works against both, but spends a `server/discover` probe on every connection to a
# legacy server (and on a stateful TypeScript server, a server-side transport per probe).
_CONNECT_MODE = "legacy"
_CLIENT_INFO = mcp_types.Implementation(name="respgate", version="0.1.0")
_MAX_LIST_PAGES = 100
_CLOSE_GRACE = 5.0
"""Seconds a closing session may take to leave the SDK's context managers before it is cancelled."""
_CANCEL_GRACE = 2.0
_HTTP_WRITE_TIMEOUT = 30.0


@dataclass(frozen=True, slots=True)
class McpServerSpec:
    """Where and how to reach one MCP server."""

    label: str
    url: str | None = None
    """Streamable HTTP or SSE endpoint."""
    transport: McpTransport = "streamable_http"
    command: tuple[str, ...] = ()
    """stdio: the server's argv."""
    env: Mapping[str, str] = field(default_factory=dict)
    """stdio: environment variables added to the SDK's safe default environment."""
    headers: Mapping[str, str] = field(default_factory=dict)
    """HTTP headers sent on every request to the server (Authorization included)."""


def transport_for_url(url: str) -> Literal["streamable_http", "sse"]:
    """The transport an endpoint URL implies: a path ending in ``/sse`` is SSE."""
    path = urlsplit(url).path.rstrip("/")
    return "sse" if path.endswith("/sse") else "streamable_http"


@dataclass(frozen=True, slots=True)
class McpToolInfo:
    """One tool as the server listed it."""

    name: str
    description: str | None
    input_schema: JsonObject
    annotations: JsonObject | None

    @classmethod
    def from_tool(cls, tool: mcp_types.Tool) -> McpToolInfo:
        annotations = (
            tool.annotations.model_dump(mode="json", by_alias=True, exclude_none=True)
            if tool.annotations is not None
            else None
        )
        return cls(
            name=tool.name,
            description=tool.description,
            input_schema=copy.deepcopy(tool.input_schema),
            annotations=annotations,
        )

    def to_item_tool(self) -> JsonObject:
        """This tool as an entry of OpenAI's ``mcp_list_tools`` item (schema verbatim)."""
        return {
            "name": self.name,
            "input_schema": copy.deepcopy(self.input_schema),
            "description": self.description,
            "annotations": copy.deepcopy(self.annotations),
        }


@dataclass(frozen=True, slots=True)
class McpCallOutcome:
    """The result of one tool call: exactly one of ``output`` and ``error`` is set."""

    output: str | None
    error: JsonObject | None

    @classmethod
    def success(cls, output: str) -> McpCallOutcome:
        return cls(output=output, error=None)

    @classmethod
    def failure(cls, error: JsonObject) -> McpCallOutcome:
        return cls(output=None, error=error)


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
#
# The streamable HTTP transport turns an HTTP error status into a synthesized JSON-RPC error
# without the status. A response hook on the httpx2 client records the status of a failed POST
# into the box of the operation that sent it: the SDK runs each message's POST in the context of
# the task that sent the message, so a context variable set around an operation reaches the hook.


@dataclass(slots=True)
class _HttpStatusBox:
    status: int | None = None
    reason: str = ""


_HTTP_STATUS: contextvars.ContextVar[_HttpStatusBox | None] = contextvars.ContextVar(
    "respgate_mcp_http_status", default=None
)


async def _record_http_status(response: httpx2.Response) -> None:
    if response.status_code < 400 or response.request.method != "POST":
        return
    box = _HTTP_STATUS.get()
    if box is not None and box.status is None:
        box.status = response.status_code
        box.reason = response.reason_phrase


@functools.cache
def _tls_context() -> ssl.SSLContext:
    """One TLS context for every MCP HTTP client of the process.

    The SDK's ``create_mcp_http_client`` lets httpx2 build a context and load the CA bundle
    for each client: ~40 ms of CPU per request that names a ``server_url`` (bench/README.md,
    "Tool loop"); with this shared context a client costs ~0.4 ms.
    """
    return ssl.create_default_context(cafile=certifi.where())


def _new_http_client(
    headers: dict[str, str] | None = None,
    timeout: httpx2.Timeout | None = None,
    auth: httpx2.Auth | None = None,
) -> httpx2.AsyncClient:
    """``create_mcp_http_client``'s client (same defaults), on the shared TLS context, with
    the hook that records HTTP failure statuses."""
    if timeout is None:
        timeout = httpx2.Timeout(MCP_DEFAULT_TIMEOUT, read=MCP_DEFAULT_SSE_READ_TIMEOUT)
    client = httpx2.AsyncClient(headers=headers, timeout=timeout, auth=auth, verify=_tls_context())
    client.event_hooks = {"request": [], "response": [_record_http_status]}
    return client


def _http_client(spec: McpServerSpec, connect_timeout: float) -> httpx2.AsyncClient:
    timeout = httpx2.Timeout(
        _HTTP_WRITE_TIMEOUT, connect=connect_timeout, read=MCP_DEFAULT_SSE_READ_TIMEOUT
    )
    return _new_http_client(headers=dict(spec.headers), timeout=timeout)


def _sse_client_factory(
    headers: dict[str, str] | None = None,
    timeout: httpx2.Timeout | None = None,
    auth: httpx2.Auth | None = None,
) -> httpx2.AsyncClient:
    return _new_http_client(headers=headers, timeout=timeout, auth=auth)


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


def _error_from_exception(
    exc: BaseException, *, label: str, what: str, box: _HttpStatusBox | None
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
        return _http_error(label, box.status, box.reason, leaves)
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


def _http_error(label: str, status: int, reason: str, leaves: list[BaseException]) -> McpError:
    """An http_error for ``status``, with the server's JSON-RPC message if it sent one."""
    message = f"MCP server {label} answered HTTP {status} {reason}".rstrip()
    for leaf in leaves:
        if isinstance(leaf, MCPError) and leaf.message not in _SYNTHESIZED_HTTP_MESSAGES:
            message = f"{message}: {leaf.message}"
            break
    return McpError.http(status, message)


def _timed_out(what: str, timeout: float) -> McpError:
    return McpError.protocol(TIMED_OUT, f"MCP {what} timed out after {timeout:g}s")


# --- results --------------------------------------------------------------------------------------


def _dump(model: Any) -> JsonObject:
    dumped: JsonObject = model.model_dump(mode="json", by_alias=True, exclude_none=True)
    return dumped


def _to_json(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


def outcome_from_result(result: mcp_types.CallToolResult) -> McpCallOutcome:
    """A ``CallToolResult`` as the text output the model sees, or an execution error."""
    if result.is_error:
        return McpCallOutcome.failure(
            {
                "type": "mcp_tool_execution_error",
                "content": [_dump(block) for block in result.content],
            }
        )
    if not result.content and result.structured_content is not None:
        return McpCallOutcome.success(_to_json(result.structured_content))
    lines = [
        block.text if isinstance(block, mcp_types.TextContent) else _to_json(_dump(block))
        for block in result.content
    ]
    return McpCallOutcome.success("\n".join(lines))


# --- sessions -------------------------------------------------------------------------------------


def _transport(spec: McpServerSpec, connect_timeout: float) -> tuple[Transport, list[Any]]:
    """The SDK transport for ``spec`` and the resources to enter around it (an httpx2 client)."""
    if spec.transport == "stdio":
        if not spec.command:
            raise McpError.protocol(CONNECTION_FAILED, f"MCP server {spec.label} has no command")
        params = StdioServerParameters(
            command=spec.command[0], args=list(spec.command[1:]), env=dict(spec.env) or None
        )
        return stdio_client(params), []
    if not spec.url:
        raise McpError.protocol(CONNECTION_FAILED, f"MCP server {spec.label} has no URL")
    if spec.transport == "sse":
        transport = sse_client(
            spec.url,
            headers=dict(spec.headers),
            timeout=connect_timeout,
            sse_read_timeout=MCP_DEFAULT_SSE_READ_TIMEOUT,
            httpx_client_factory=_sse_client_factory,
        )
        return transport, []
    http = _http_client(spec, connect_timeout)
    return streamable_http_client(spec.url, http_client=http), [http]


class McpSession:
    """One connected MCP server, usable from any task; see the module docstring."""

    def __init__(self, spec: McpServerSpec) -> None:
        """Use ``await McpSession.open(spec, connect_timeout=...)``."""
        self.spec = spec
        self._client: Client | None = None
        self._ready = asyncio.Event()
        self._close_requested = asyncio.Event()
        self._failure: McpError | None = None
        self._broken = False
        self._closing = False
        self._task: asyncio.Task[None] | None = None

    @classmethod
    async def open(cls, spec: McpServerSpec, *, connect_timeout: float) -> McpSession:
        """Connect and complete the MCP handshake; raises McpError."""
        session = cls(spec)
        await session._start(connect_timeout)
        return session

    @property
    def _log_fields(self) -> dict[str, str]:
        return {"mcp_server": self.spec.label}

    @property
    def closed(self) -> bool:
        """True once the session cannot serve requests any more (closed, or its connection died)."""
        return self._broken or self._task is None or self._task.done()

    async def _start(self, connect_timeout: float) -> None:
        task = asyncio.create_task(
            self._run(connect_timeout), name=f"mcp-session-{self.spec.label}"
        )
        self._task = task
        ready = asyncio.ensure_future(self._ready.wait())
        try:
            async with asyncio.timeout(connect_timeout):
                await asyncio.wait({ready, task}, return_when=asyncio.FIRST_COMPLETED)
        except TimeoutError:
            await self.aclose()
            raise McpError.protocol(
                TIMED_OUT,
                f"connecting to MCP server {self.spec.label} timed out after {connect_timeout:g}s",
            ) from None
        except BaseException:
            await self.aclose()
            raise
        finally:
            ready.cancel()
        if not self._ready.is_set():
            await self.aclose()
            raise self._failure or McpError.protocol(
                CONNECTION_FAILED, f"cannot connect to MCP server {self.spec.label}"
            )

    async def _run(self, connect_timeout: float) -> None:
        """The task that owns the SDK client: enter, signal ready, wait for close, exit."""
        box = _HttpStatusBox()
        _HTTP_STATUS.set(box)
        try:
            async with contextlib.AsyncExitStack() as stack:
                transport, resources = _transport(self.spec, connect_timeout)
                for resource in resources:
                    await stack.enter_async_context(resource)
                client = Client(transport, mode=_CONNECT_MODE, cache=None, client_info=_CLIENT_INFO)
                await stack.enter_async_context(client)
                self._client = client
                box.status = None
                self._ready.set()
                logger.debug("MCP session to %s open", self.spec.label, extra=self._log_fields)
                await self._close_requested.wait()
        except asyncio.CancelledError:
            if not self._close_requested.is_set():
                self._failure = self._failure or McpError.protocol(
                    CONNECTION_FAILED, f"MCP session to {self.spec.label} was cancelled"
                )
            raise
        except Exception as exc:
            self._failure = _error_from_exception(
                exc, label=self.spec.label, what="connection", box=box
            )
            level = logging.DEBUG if self._close_requested.is_set() else logging.WARNING
            logger.log(
                level,
                "MCP session to %s ended: %s",
                self.spec.label,
                self._failure,
                extra=self._log_fields,
            )
        finally:
            self._client = None

    async def _request(
        self, what: str, seconds: float, op: Callable[[Client], Awaitable[_T]]
    ) -> _T:
        """Run ``op`` on the entered client within ``seconds``; raises McpError on any failure."""
        client = self._client
        runner = self._task
        if client is None or runner is None or runner.done() or self._broken:
            raise self._closed_error()
        box = _HttpStatusBox()

        async def guarded() -> _T:
            _HTTP_STATUS.set(box)
            return await op(client)

        call = asyncio.create_task(guarded(), name=f"mcp-{what}-{self.spec.label}")
        try:
            async with asyncio.timeout(seconds):
                await asyncio.wait({call, runner}, return_when=asyncio.FIRST_COMPLETED)
        except TimeoutError:
            await _cancel_and_wait(call)
            if box.status is not None:  # an SSE transport's POST failed: the answer never came
                raise _http_error(self.spec.label, box.status, box.reason, []) from None
            raise _timed_out(what, seconds) from None
        except BaseException:
            await _cancel_and_wait(call)
            raise
        if not call.done():
            await _cancel_and_wait(call)
            raise self._closed_error()
        try:
            return call.result()
        except asyncio.CancelledError:
            raise self._closed_error() from None
        except Exception as exc:
            if isinstance(exc, MCPError) and exc.code == mcp_types.CONNECTION_CLOSED:
                # The connection is gone: let the owning task finish so its reason is known.
                self._mark_broken()
                await asyncio.wait({runner}, timeout=_CANCEL_GRACE)
                raise self._closed_error() from exc
            raise _error_from_exception(exc, label=self.spec.label, what=what, box=box) from exc

    def _closed_error(self) -> McpError:
        if self._failure is not None:
            return McpError(dict(self._failure.error))
        if self._closing:
            message = f"the MCP session to {self.spec.label} was closed"
        else:
            message = f"the connection to MCP server {self.spec.label} was closed"
        return McpError.protocol(CONNECTION_FAILED, message)

    def _mark_broken(self) -> None:
        """The connection is gone (the SDK said so): let the owning task leave its contexts."""
        self._broken = True
        self._close_requested.set()

    async def list_tools(self, *, timeout: float) -> list[McpToolInfo]:  # noqa: ASYNC109
        """Every tool the server lists (all pages); raises McpError."""

        async def list_all(client: Client) -> list[McpToolInfo]:
            tools: list[McpToolInfo] = []
            cursor: str | None = None
            seen: set[str] = set()
            for _ in range(_MAX_LIST_PAGES):
                page = await client.list_tools(cursor=cursor)
                tools.extend(McpToolInfo.from_tool(tool) for tool in page.tools)
                cursor = page.next_cursor
                if cursor is None or cursor in seen:
                    break
                seen.add(cursor)
            return tools

        return await self._request("tools/list", timeout, list_all)

    async def call_tool(
        self,
        name: str,
        arguments: JsonObject,
        *,
        timeout: float,  # noqa: ASYNC109 - a per-call budget, applied with asyncio.timeout
    ) -> McpCallOutcome:
        """Call one tool. Failures (tool, protocol, HTTP, timeout) come back as ``error``."""

        async def call(client: Client) -> mcp_types.CallToolResult:
            return await client.call_tool(name, arguments)

        try:
            result = await self._request(f"call to {name}", timeout, call)
        except McpError as exc:
            logger.info(
                "MCP call to %s on %s failed: %s",
                name,
                self.spec.label,
                exc,
                extra={"tool": name, "mcp_server": self.spec.label},
            )
            return McpCallOutcome.failure(exc.error)
        return outcome_from_result(result)

    async def aclose(self) -> None:
        """Close the session (idempotent, never raises; cancellation of the caller propagates)."""
        task = self._task
        if task is None or task.done():
            return
        self._closing = True
        self._close_requested.set()
        try:
            if self._ready.is_set():
                await asyncio.wait({task}, timeout=_CLOSE_GRACE)
            for _ in range(3):
                if task.done():
                    break
                task.cancel()
                await asyncio.wait({task}, timeout=_CANCEL_GRACE)
            if not task.done():
                logger.warning(
                    "MCP session to %s did not close", self.spec.label, extra=self._log_fields
                )
        except asyncio.CancelledError:
            task.cancel()
            raise
        except Exception:  # never raises: closing is best effort
            logger.exception("closing the MCP session to %s failed", self.spec.label)


async def _cancel_and_wait(task: asyncio.Task[Any]) -> None:
    """Cancel ``task`` and give it a moment to unwind (a cancellation of the caller propagates)."""
    if not task.done():
        task.cancel()
        await asyncio.wait({task}, timeout=_CANCEL_GRACE)
    if task.done() and not task.cancelled():
        task.exception()  # retrieved, so asyncio does not log it as never retrieved


class McpSessionPool:
    """Long-lived sessions to the servers the operator configured, keyed by label.

    Sessions open lazily, one at a time per label, are reused across requests, and are reopened
    on next use once closed, dead or discarded.
    """

    def __init__(self, specs: Mapping[str, McpServerSpec], *, connect_timeout: float) -> None:
        self._specs = dict(specs)
        self._connect_timeout = connect_timeout
        self._sessions: dict[str, McpSession] = {}
        self._locks: dict[str, asyncio.Lock] = {label: asyncio.Lock() for label in self._specs}
        self._closed = False

    @property
    def labels(self) -> list[str]:
        return list(self._specs)

    async def session(self, label: str) -> McpSession:
        """The open session to ``label``, opening it first if needed; raises McpError."""
        spec = self._specs.get(label)
        if spec is None:
            raise KeyError(f"no MCP server labelled {label!r} is configured")
        async with self._locks[label]:
            if self._closed:
                raise McpError.protocol(CONNECTION_FAILED, "the MCP session pool is closed")
            current = self._sessions.get(label)
            if current is not None and not current.closed:
                return current
            if current is not None:
                del self._sessions[label]
                await current.aclose()
            fresh = await McpSession.open(spec, connect_timeout=self._connect_timeout)
            if self._closed:  # the pool closed while this session was opening
                await fresh.aclose()
                raise McpError.protocol(CONNECTION_FAILED, "the MCP session pool is closed")
            self._sessions[label] = fresh
            return fresh

    async def discard(self, label: str, *, session: McpSession | None = None) -> None:
        """Close the pooled session to ``label`` so the next use reopens it.

        With ``session``, only when that is still the pooled one (another task may already have
        replaced a broken session with a fresh one).
        """
        lock = self._locks.get(label)
        if lock is None:
            return
        async with lock:
            current = self._sessions.get(label)
            if current is None or (session is not None and current is not session):
                return
            del self._sessions[label]
        await current.aclose()

    async def aclose(self) -> None:
        """Close every session; later ``session()`` calls fail."""
        self._closed = True
        sessions = list(self._sessions.values())
        self._sessions.clear()
        await asyncio.gather(*(session.aclose() for session in sessions))


@contextlib.asynccontextmanager
async def open_session(spec: McpServerSpec, *, connect_timeout: float) -> AsyncIterator[McpSession]:
    """``async with open_session(spec, connect_timeout=...) as session``: open, then close."""
    session = await McpSession.open(spec, connect_timeout=connect_timeout)
    try:
        yield session
    finally:
        await session.aclose()
