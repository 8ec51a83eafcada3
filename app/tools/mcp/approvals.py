"""Approved MCP calls: the client's ``mcp_approval_response`` items, as calls to run."""

from __future__ import annotations

from collections.abc import Callable

from app.core.tools import GatewayCall, ToolExecutor, ToolNames
from app.errors import InvalidRequestError
from app.protocol.json_types import JsonObject
from app.tools.mcp.executor import NAMESPACE


def approved_calls(
    history: list[JsonObject],
    new_input: list[JsonObject],
    executor_for: Callable[[str, str], ToolExecutor],
    names: ToolNames,
) -> list[tuple[GatewayCall, ToolExecutor]]:
    """The calls the client approved in ``new_input`` (``mcp_approval_response`` items with
    ``approve``) that the history has not run yet, each with its executor; raises
    ``InvalidRequestError`` for an answer to no known request."""
    requests = {
        item.get("id"): item for item in history if item.get("type") == "mcp_approval_request"
    }
    done = {item.get("approval_request_id") for item in history if item.get("type") == "mcp_call"}
    approved: list[tuple[GatewayCall, ToolExecutor]] = []
    for index, item in enumerate(new_input):
        if item.get("type") != "mcp_approval_response" or not item.get("approve"):
            continue
        request_id = item.get("approval_request_id")
        request = requests.get(request_id)
        if request is None:
            raise InvalidRequestError(
                f"No MCP approval request found with id '{request_id}'.",
                param=f"input[{index}].approval_request_id",
                code="invalid_value",
            )
        if request_id in done:
            continue
        label, tool = str(request.get("server_label")), str(request.get("name"))
        executor = executor_for(label, tool)
        call = GatewayCall(
            item_id="",
            call_id=str(request_id),
            name=names.name(NAMESPACE, label, tool),
            arguments=str(request.get("arguments") or ""),
            output_index=-1,
            approval_request_id=str(request_id),
        )
        approved.append((call, executor))
    return approved
