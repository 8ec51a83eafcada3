"""MCP history items as the upstream reads them (``lower_mcp_items``)."""

from __future__ import annotations

from typing import Any

from app.core.tools import ToolNames
from app.protocol.json_types import JsonObject
from app.tools.mcp.executor import ITEM_TYPES, NAMESPACE, error_text


def _function_call(call_id: str, name: str, arguments: Any) -> JsonObject:
    return {
        "type": "function_call",
        "call_id": call_id,
        "name": name,
        "arguments": arguments if isinstance(arguments, str) else "",
        "status": "completed",
    }


def _function_output(call_id: str, output: str) -> JsonObject:
    return {"type": "function_call_output", "call_id": call_id, "output": output}


def lower_mcp_items(items: list[JsonObject], names: ToolNames) -> list[JsonObject]:
    """MCP items as the upstream reads them: each ``mcp_call`` becomes a ``function_call``
    and its ``function_call_output``; an answered approval request becomes the call, a declined
    one's answer its output; tool listings are dropped (the tools travel as ``tools``)."""
    answered = {
        item.get("approval_request_id")
        for item in items
        if item.get("type") in ("mcp_approval_response", "mcp_call")
        and item.get("approval_request_id")
    }
    emitted: set[Any] = set()
    out: list[JsonObject] = []
    for item in items:
        kind = item.get("type")
        if kind not in ITEM_TYPES:
            out.append(item)
            continue
        if kind == "mcp_approval_request" and item.get("id") in answered:
            name = names.name(NAMESPACE, str(item.get("server_label")), str(item.get("name")))
            out.append(_function_call(str(item["id"]), name, item.get("arguments")))
            emitted.add(item["id"])
        elif kind == "mcp_approval_response" and not item.get("approve"):
            request_id = item.get("approval_request_id")
            if request_id in emitted:
                reason = item.get("reason")
                text = "The user declined this tool call."
                out.append(
                    _function_output(
                        str(request_id), f"{text} Reason: {reason}" if reason else text
                    )
                )
        elif kind == "mcp_call":
            output = item.get("output")
            error = item.get("error")
            text = (
                error_text(error)
                if isinstance(error, dict)
                else (f"Error: {error}" if error else str(output or ""))
            )
            request_id = item.get("approval_request_id")
            if request_id and request_id in emitted:
                out.append(_function_output(str(request_id), text))
                continue
            call_id = str(item.get("id"))
            name = names.name(NAMESPACE, str(item.get("server_label")), str(item.get("name")))
            out.append(_function_call(call_id, name, item.get("arguments")))
            out.append(_function_output(call_id, text))
    return out
