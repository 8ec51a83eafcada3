"""MCP sessions on the official ``mcp`` SDK: ``McpSession``, one connected server.

The SDK is built on anyio: its transports and sessions are async context managers holding task
groups and cancel scopes that must be entered and exited in the same task. The gateway uses one
session from several asyncio tasks at once (parallel tool calls) and closes it from yet another,
so every ``McpSession`` owns its ``mcp.Client`` inside one dedicated background task: the task
enters the client (transport, session, handshake), signals readiness, waits for a close request
and exits the client again. Requests from any task go through the entered session, which
supports concurrent requests. A call also watches that task, so a server that dies (or a close)
while a call is in flight ends the call with an error instead of leaving it hanging.

The transport is chosen and built in ``transport``, on the egress policy a session is opened
with; failures are ``errors.McpError`` (OpenAI ``McpToolCallError`` objects); a call's result is
an ``outcomes.McpCallOutcome``; the operator's servers are kept open in ``pool.McpSessionPool``.

A session that cannot be opened (the egress policy refused the address, the port is closed,
the name does not resolve, the server did not complete the handshake in time) fails with one
message for all (``errors.unreachable``), so a client cannot probe the network through it; the
reason is in the gateway's log.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any, TypeVar

import mcp_types
from mcp import Client
from mcp.shared.exceptions import MCPError

from app.core.redaction import redact_text
from app.net.egress import EgressPolicy
from app.protocol.json_types import JsonObject
from app.tools.mcp.errors import (
    CONNECTION_FAILED,
    HTTP_STATUS,
    HttpStatusBox,
    McpError,
    describe_failure,
    error_from_exception,
    http_error,
    timed_out,
    unreachable,
)
from app.tools.mcp.outcomes import McpCallOutcome, McpToolInfo, outcome_from_result
from app.tools.mcp.spec import McpServerSpec
from app.tools.mcp.transport import sdk_transport

logger = logging.getLogger(__name__)

_T = TypeVar("_T")

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


class McpSession:
    """One connected MCP server, usable from any task; see the module docstring."""

    def __init__(self, spec: McpServerSpec, egress: EgressPolicy) -> None:
        """Use ``await McpSession.open(spec, connect_timeout=..., egress=...)``."""
        self.spec = spec
        self.egress = egress
        self._client: Client | None = None
        self._ready = asyncio.Event()
        self._close_requested = asyncio.Event()
        self._failure: McpError | None = None
        self._broken = False
        self._closing = False
        self._task: asyncio.Task[None] | None = None

    @classmethod
    async def open(
        cls, spec: McpServerSpec, *, connect_timeout: float, egress: EgressPolicy
    ) -> McpSession:
        """Connect (where ``egress`` allows) and complete the MCP handshake; raises McpError."""
        session = cls(spec, egress)
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
            logger.warning(
                "connecting to MCP server %s timed out after %gs",
                self.spec.label,
                connect_timeout,
                extra=self._log_fields,
            )
            await self.aclose()
            raise unreachable(self.spec.label) from None
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
        box = HttpStatusBox()
        HTTP_STATUS.set(box)
        try:
            async with contextlib.AsyncExitStack() as stack:
                transport, resources = sdk_transport(self.spec, connect_timeout, self.egress)
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
            self._failure = error_from_exception(
                exc, label=self.spec.label, what="connection", box=box
            )
            level = logging.DEBUG if self._close_requested.is_set() else logging.WARNING
            logger.log(
                level,
                "MCP session to %s ended: %s (%s)",
                self.spec.label,
                self._failure,
                redact_text(describe_failure(exc)),
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
        box = HttpStatusBox()

        async def guarded() -> _T:
            HTTP_STATUS.set(box)
            return await op(client)

        call = asyncio.create_task(guarded(), name=f"mcp-{what}-{self.spec.label}")
        try:
            async with asyncio.timeout(seconds):
                await asyncio.wait({call, runner}, return_when=asyncio.FIRST_COMPLETED)
        except TimeoutError:
            await _cancel_and_wait(call)
            if box.status is not None:  # an SSE transport's POST failed: the answer never came
                raise http_error(self.spec.label, box.status, box.reason, []) from None
            raise timed_out(what, seconds) from None
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
            raise error_from_exception(exc, label=self.spec.label, what=what, box=box) from exc

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


@contextlib.asynccontextmanager
async def open_session(
    spec: McpServerSpec, *, connect_timeout: float, egress: EgressPolicy
) -> AsyncIterator[McpSession]:
    """``async with open_session(spec, connect_timeout=..., egress=...) as session``: open,
    then close."""
    session = await McpSession.open(spec, connect_timeout=connect_timeout, egress=egress)
    try:
        yield session
    finally:
        await session.aclose()
