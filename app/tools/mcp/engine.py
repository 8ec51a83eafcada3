"""MCP servers as a tool engine, so that a configured server can sit in a namespace.

``McpToolSet`` is the tool set of one configured server (``core.engines.ToolSet``): its listed
tools as ``ToolSpec``s whose binding names the server; the listing is kept with the pooled
session (a new session lists again). ``McpEngine`` (``core.engines.ToolEngine``) runs calls on
the pooled sessions, all of a batch at once (an MCP server keeps its own state, the session
history is a record); ``simulate`` asks the configured simulator engine (an ``lm`` engine)
with this session's history, and never reaches the server. A failed call keeps the server's
error object (``mcp_protocol_error``, ``mcp_tool_execution_error`` …) as the failure's
``detail``, which the ``mcp_call`` item shows as it did before engines existed.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

from app.core.engines import (
    EngineCall,
    EngineResult,
    ToolArgumentsError,
    ToolEngine,
    ToolSpec,
    simulate_via,
)
from app.core.session_book import DEFAULT_MAX_HISTORY, BookedSessions, SessionBook, timed
from app.tools.mcp.client import McpSession
from app.tools.mcp.errors import McpError
from app.tools.mcp.executor import error_text
from app.tools.mcp.outcomes import McpCallOutcome, McpToolInfo
from app.tools.mcp.pool import McpSessionPool

SERVER_KEY = "mcp_server"
"""The binding key that names a tool's configured server (its label)."""


class McpToolSet:
    """The tools of the configured server ``label``, in ``namespace``."""

    def __init__(
        self, pool: McpSessionPool, label: str, namespace: str, *, list_timeout: float
    ) -> None:
        self._pool = pool
        self._label = label
        self._namespace = namespace
        self._list_timeout = list_timeout
        self._listed: tuple[McpSession, list[McpToolInfo]] | None = None

    async def list_tools(self) -> list[ToolSpec]:
        """Raises ``McpError`` when the server cannot be reached or listed."""
        session = await self._pool.session(self._label)
        if self._listed is None or self._listed[0] is not session or session.closed:
            try:
                listed = await session.list_tools(timeout=self._list_timeout)
            except McpError:
                await self._pool.discard(self._label, session=session)
                raise
            self._listed = (session, listed)
        return [
            ToolSpec(
                namespace=self._namespace,
                name=info.name,
                description=info.description or "",
                parameters=info.input_schema,
                binding={SERVER_KEY: self._label},
                annotations=info.annotations,
            )
            for info in self._listed[1]
        ]


class McpEngine(BookedSessions):
    """Runs calls on the configured MCP servers (``core.engines.ToolEngine``)."""

    def __init__(
        self,
        pool: McpSessionPool,
        *,
        call_timeout: float = 60.0,
        simulator: ToolEngine | None = None,
        max_history: int = DEFAULT_MAX_HISTORY,
    ) -> None:
        self._pool = pool
        self._call_timeout = call_timeout
        self._simulator = simulator
        self.sessions = SessionBook(max_history)

    async def execute(self, session_id: str, calls: Sequence[EngineCall]) -> list[EngineResult]:
        self.sessions.session(session_id)  # must be live
        results = await asyncio.gather(*(self._timed_call(call) for call in calls))
        for call, result in zip(calls, results, strict=True):
            self.sessions.record(session_id, call, result)
        return list(results)

    async def simulate(self, session_id: str, calls: Sequence[EngineCall]) -> list[EngineResult]:
        state = self.sessions.state(session_id)
        if self._simulator is None:
            return [
                EngineResult.failure(
                    call,
                    "simulation_unavailable",
                    "this MCP server has no simulator configured, so its tools cannot be simulated",
                )
                for call in calls
            ]
        return await simulate_via(self._simulator, session_id, state, calls)

    async def _timed_call(self, call: EngineCall) -> EngineResult:
        return await timed(call, lambda: self._call(call))

    async def _call(self, call: EngineCall) -> EngineResult:
        binding = call.tool.binding or {}
        label = binding.get(SERVER_KEY)
        if not isinstance(label, str):
            return EngineResult.failure(
                call, "unknown_tool", f"tool '{call.tool.qualified_name}' names no MCP server"
            )
        try:
            arguments = call.parsed_arguments()
        except ToolArgumentsError as exc:
            error = {
                "type": "mcp_protocol_error",
                "code": -32602,
                "message": f"Invalid params: {exc}",
            }
            return _failure(call, McpCallOutcome.failure(error))
        try:
            session = await self._pool.session(label)
        except McpError as exc:
            return _failure(call, McpCallOutcome.failure(exc.error))
        outcome = await session.call_tool(call.tool.name, arguments, timeout=self._call_timeout)
        if outcome.error is not None:
            if outcome.error.get("type") != "mcp_tool_execution_error":
                await self._pool.discard(label, session=session)
            return _failure(call, outcome)
        return EngineResult(call_id=call.call_id, output=outcome.output or "")


def _failure(call: EngineCall, outcome: McpCallOutcome) -> EngineResult:
    error = outcome.error or {}
    kind = str(error.get("type") or "mcp_error")
    return EngineResult.failure(call, kind, error_text(error).removeprefix("Error: "), detail=error)
