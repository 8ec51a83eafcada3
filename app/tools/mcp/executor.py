"""``McpToolExecutor``: one tool of one MCP server, run by the tool loop.

A call appears to the client as an ``mcp_call`` item (events ``response.mcp_call.*``), or
first as an ``mcp_approval_request`` item when the server's ``require_approval`` says so. A
failure (unknown tool, invalid arguments, the server's error) is an error result for the model.
"""

from __future__ import annotations

from typing import Any

import orjson

from app.core.ids import new_id
from app.core.observe import preview_of
from app.core.tools import CallPresentation, GatewayCall, ToolResult, error_kind_of
from app.protocol.items import ItemKind
from app.protocol.json_types import JsonObject
from app.tools.mcp.errors import INVALID_PARAMS, McpError, outcome_error_kind
from app.tools.mcp.outcomes import McpCallOutcome
from app.tools.mcp.servers import RequestServer, ToolServer

NAMESPACE = "mcp"
ITEM_KINDS = (
    ItemKind("mcp_call", "mcp"),
    ItemKind("mcp_list_tools", "mcpl"),
    ItemKind("mcp_approval_request", "mcpr"),
    ItemKind("mcp_approval_response"),
)
ITEM_TYPES = frozenset(kind.type for kind in ITEM_KINDS)

PRESENTATION = CallPresentation(
    opened_events=("response.mcp_call.in_progress",),
    arguments_events=("response.mcp_call_arguments.delta", "response.mcp_call_arguments.done"),
    running_events=(),
    completed_event="response.mcp_call.completed",
    failed_event="response.mcp_call.failed",
)


def _arguments(raw: str) -> JsonObject:
    if not raw.strip():
        return {}
    value = orjson.loads(raw)
    if not isinstance(value, dict):
        raise ValueError("the arguments must be a JSON object")
    return value


def error_text(error: JsonObject) -> str:
    """What the model reads for an ``mcp_call`` error object."""
    content = error.get("content")
    if isinstance(content, list):
        texts = [str(c.get("text")) for c in content if isinstance(c, dict) and c.get("text")]
        if texts:
            return "Error: " + "\n".join(texts)
    return f"Error: {error.get('message') or orjson.dumps(error).decode()}"


def execution_error(message: str) -> JsonObject:
    return {"type": "mcp_tool_execution_error", "content": [{"type": "text", "text": message}]}


class McpToolExecutor:
    """One tool of one MCP server (``core.ports.ToolExecutor``)."""

    presentation = PRESENTATION

    def __init__(self, server: ToolServer | None, label: str, tool: str) -> None:
        self._server = server
        self.label = label
        self.tool = tool
        self.qualified_name = f"{label}::{tool}"

    def _item(self, call: GatewayCall, **fields: Any) -> JsonObject:
        return {
            "id": call.item_id or new_id("mcp"),
            "type": "mcp_call",
            "server_label": self.label,
            "name": self.tool,
            "arguments": call.arguments,
            "approval_request_id": call.approval_request_id,
            "output": None,
            "error": None,
            "status": "in_progress",
        } | fields

    def open_item(self, call: GatewayCall) -> JsonObject:
        return self._item(call, arguments=call.arguments if call.approval_request_id else "")

    def approval_item(self, call: GatewayCall) -> JsonObject | None:
        if call.approval_request_id or self._server is None:
            return None  # approved already, or an unknown tool (answered with an error)
        info = self._server.tools.get(self.tool)
        if info is None or not self._server.approval_required(info, self.tool):
            return None
        return {
            "id": call.item_id or new_id("mcpr"),
            "type": "mcp_approval_request",
            "server_label": self.label,
            "name": self.tool,
            "arguments": call.arguments,
        }

    def error_result(self, call: GatewayCall, message: str, *, status: str) -> ToolResult:
        item = self._item(call, error=execution_error(message), status=status)
        return ToolResult(
            item=item,
            model_output=f"Error: {message}",
            ok=False,
            preview=message,
            error_kind=error_kind_of(status),
        )

    async def run(self, call: GatewayCall, *, timeout: float) -> ToolResult:  # noqa: ASYNC109
        server = self._server
        if not isinstance(server, RequestServer) or self.tool not in server.tools:
            return self.error_result(
                call,
                f"tool '{self.tool}' is not available on MCP server '{self.label}'",
                status="failed",
            ).with_kind("unknown_tool")
        try:
            arguments = _arguments(call.arguments)
        except (orjson.JSONDecodeError, ValueError) as exc:
            error = {
                "type": "mcp_protocol_error",
                "code": INVALID_PARAMS,
                "message": f"Invalid params: {exc}",
            }
            return self._result(call, McpCallOutcome(output=None, error=error))
        try:
            session = await server.session()
        except McpError as exc:
            return self._result(call, McpCallOutcome(output=None, error=exc.error))
        outcome = await session.call_tool(self.tool, arguments, timeout=timeout)
        return self._result(call, outcome)

    def _result(self, call: GatewayCall, outcome: McpCallOutcome) -> ToolResult:
        if outcome.error is not None:
            item = self._item(call, error=outcome.error, status="failed")
            text = error_text(outcome.error)
            return ToolResult(
                item=item,
                model_output=text,
                ok=False,
                preview=preview_of(text),
                error_kind=outcome_error_kind(outcome.error),
            )
        output = outcome.output or ""
        item = self._item(call, output=output, status="completed")
        return ToolResult(item=item, model_output=output, ok=True, preview=preview_of(output))
