"""Configured namespaces as ``mcp`` tools: ``{"type": "mcp", "server_label": "crm"}``.

A request selects a tool set the operator configured (a file of tool specs, an OpenAPI
document, an MCP server: ``core.engines.Namespace``) by its namespace, the way it names a
configured MCP server; the SDKs send that tool as it is. Its tools appear to the model under
``mcp__{namespace}__{tool}`` and to the client as ``mcp_list_tools`` and ``mcp_call`` items
with the namespace as ``server_label``. The calls of one round go to the tool engines as one
batch (``EngineBatch``) for the request's session, through ``core.tool_sessions.ToolSessions``.

The operator's terms are a ceiling: a request may narrow ``allowed_tools`` and require
approval for more tools, never widen them.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence
from typing import Any

from app.core.engines import EngineCall, EngineResult, Namespace, ToolFailure, ToolSpec
from app.core.ids import new_id
from app.core.observe import preview_of
from app.core.tool_sessions import ToolSessions
from app.core.tools import GatewayCall, PreludeItem, ToolContext, ToolResult
from app.protocol.json_types import JsonObject
from app.tools.mcp.executor import McpToolExecutor, execution_error
from app.tools.mcp.listing import previous_listing
from app.tools.mcp.outcomes import McpToolInfo
from app.tools.mcp.servers import approval_required

logger = logging.getLogger(__name__)

_LISTED = ("response.mcp_list_tools.in_progress", "response.mcp_list_tools.completed")
_NOT_LISTED = ("response.mcp_list_tools.in_progress", "response.mcp_list_tools.failed")


class NamespaceServer:
    """One configured namespace as one request uses it: the tools it may call and when a call
    needs the client's approval."""

    def __init__(
        self, namespace: Namespace, *, allowed: list[str] | None, require_approval: Any
    ) -> None:
        self.namespace = namespace
        self.label = namespace.name
        self.description = namespace.description
        ceiling = namespace.allowed_tools
        if ceiling is None:
            self.allowed_tools = allowed
        else:
            # None: the ceiling itself; a list (even an empty one) narrows it
            wanted = ceiling if allowed is None else allowed
            self.allowed_tools = [t for t in wanted if t in ceiling]
        self._request_approval = require_approval
        self.tools: dict[str, McpToolInfo] = {}
        self.specs: dict[str, ToolSpec] = {}

    def allows(self, tool: str) -> bool:
        return self.allowed_tools is None or tool in self.allowed_tools

    def approval_required(self, tool: McpToolInfo | None, name: str) -> bool:
        """The operator's policy, or the request's where it asks for more."""
        if approval_required(self.namespace.require_approval, name, tool):
            return True
        request = self._request_approval
        return request is not None and approval_required(request, name, tool)

    async def aclose(self) -> None:
        return None

    async def list(self, history: list[JsonObject], *, list_timeout: float) -> PreludeItem | None:
        """List the namespace's tools; an ``mcp_list_tools`` item unless the history already
        shows the same listing."""
        opening: JsonObject = {
            "id": new_id("mcpl"),
            "type": "mcp_list_tools",
            "server_label": self.label,
            "tools": [],
        }
        try:
            async with asyncio.timeout(list_timeout):
                specs = await self.namespace.tools.list_tools()
        except Exception as exc:  # the tool set's failure is the client's failed listing
            logger.warning("listing tool set %s failed: %s", self.label, exc)
            failed = opening | {"error": f"Error retrieving tool list from {self.label}: {exc}"}
            return PreludeItem(opening, _NOT_LISTED, failed)
        for spec in specs:
            if self.allows(spec.name):
                self.specs[spec.name] = spec
                self.tools[spec.name] = McpToolInfo(
                    name=spec.name,
                    description=spec.description,
                    input_schema=spec.parameters,
                    annotations=spec.annotations,
                )
        if previous_listing(history, self) is not None:
            return None
        shown = [info.to_item_tool() for info in self.tools.values()]
        return PreludeItem(opening, _LISTED, opening | {"tools": shown})


class EngineBatch:
    """The engine calls of one request (``core.tools.ToolBatch``): a round's calls run as one
    batch of the request's session, simulated when the request is a dry run."""

    def __init__(self, sessions: ToolSessions, context: ToolContext) -> None:
        self._sessions = sessions
        self._context = context
        self._executors: dict[str, EngineToolExecutor] = {}

    def add(self, name: str, executor: EngineToolExecutor) -> None:
        self._executors[name] = executor

    async def run_batch(
        self,
        calls: Sequence[GatewayCall],
        *,
        timeout: float,  # noqa: ASYNC109 - the engines keep their own per-call timeouts
    ) -> list[ToolResult]:
        executors = [self._executors[call.name] for call in calls]
        engine_calls = [
            EngineCall(call_id=call.call_id, tool=executor.spec, arguments=call.arguments)
            for call, executor in zip(calls, executors, strict=True)
        ]
        context = self._context
        results = await self._sessions.run(
            context.session_id, engine_calls, tenant=context.tenant, simulate=context.simulate
        )
        return [
            executor.result(call, result)
            for call, executor, result in zip(calls, executors, results, strict=True)
        ]


class EngineToolExecutor(McpToolExecutor):
    """One tool of a namespace: an ``mcp_call`` whose run is a call of the tool engines."""

    def __init__(self, server: NamespaceServer, spec: ToolSpec, batch: EngineBatch) -> None:
        super().__init__(server, server.label, spec.name)
        self.spec = spec
        self.batch = batch

    async def run(self, call: GatewayCall, *, timeout: float) -> ToolResult:  # noqa: ASYNC109
        (result,) = await self.batch.run_batch([call], timeout=timeout)
        return result

    def result(self, call: GatewayCall, result: EngineResult) -> ToolResult:
        if result.error is None:
            item = self._item(call, output=result.output, status="completed")
            return ToolResult(
                item=item,
                model_output=result.output,
                ok=True,
                preview=preview_of(result.output),
                duration_ms=result.duration_ms,
            )
        text = result.model_text
        return ToolResult(
            item=self._item(call, error=item_error(result.error), status="failed"),
            model_output=text,
            ok=False,
            preview=preview_of(text),
            error_kind=result.error.kind,
            duration_ms=result.duration_ms,
        )


def item_error(failure: ToolFailure) -> JsonObject:
    """The ``mcp_call`` item's ``error`` for a failed engine call, in OpenAI's shapes: an MCP
    server's own error object as it is, an HTTP status as ``http_error``, anything else as
    ``mcp_tool_execution_error`` with the message as text."""
    detail = failure.detail or {}
    if isinstance(detail.get("type"), str):
        return detail
    status = detail.get("status")
    if failure.kind == "http_status" and isinstance(status, int):
        return {"type": "http_error", "code": status, "message": failure.message}
    return execution_error(failure.message)
