"""The tools of a request's MCP servers, and the ``mcp_list_tools`` items that show them.

A server is listed once per request, not again when the history already holds an
``mcp_list_tools`` item for the same label and allowed tools. (Configured servers are tool
sets: ``engine.McpToolSet`` keeps their listing with the pooled session.)
"""

from __future__ import annotations

import logging

from app.core.ids import new_id
from app.core.tools import PreludeItem
from app.protocol.json_types import JsonObject
from app.tools.mcp.errors import McpError
from app.tools.mcp.outcomes import McpToolInfo
from app.tools.mcp.servers import RequestServer, ToolServer

logger = logging.getLogger(__name__)


class ToolListings:
    """Lists the servers of each request."""

    async def listing(
        self, server: RequestServer, history: list[JsonObject], *, list_timeout: float
    ) -> tuple[list[McpToolInfo], PreludeItem | None]:
        """The server's tools: from the history when it already listed them, else listed now
        (an ``mcp_list_tools`` item for the client either way it was listed)."""
        previous = previous_listing(history, server)
        if previous is not None:
            return previous, None
        item_id = new_id("mcpl")
        opening = {
            "id": item_id,
            "type": "mcp_list_tools",
            "server_label": server.label,
            "tools": [],
        }
        try:
            session = await server.session()
            listed = await session.list_tools(timeout=list_timeout)
        except McpError as exc:
            logger.warning("MCP list_tools failed", extra={"server_label": server.label})
            message = str(exc.error.get("message") or exc)
            failed: JsonObject = opening | {
                "error": f"Error retrieving tool list from MCP server: {message}"
            }
            return [], PreludeItem(
                opening,
                ("response.mcp_list_tools.in_progress", "response.mcp_list_tools.failed"),
                failed,
            )
        shown = [info for info in listed if server.allows(info.name)]
        item: JsonObject = opening | {"tools": [info.to_item_tool() for info in shown]}
        return listed, PreludeItem(
            opening,
            ("response.mcp_list_tools.in_progress", "response.mcp_list_tools.completed"),
            item,
        )


def previous_listing(history: list[JsonObject], server: ToolServer) -> list[McpToolInfo] | None:
    """The tools of the history's latest successful listing of this server, when it lists
    exactly what the current ``allowed_tools`` would (else the server is listed again)."""
    for item in reversed(history):
        if item.get("type") != "mcp_list_tools" or item.get("server_label") != server.label:
            continue
        if item.get("error"):
            return None
        tools = [t for t in item.get("tools") or [] if isinstance(t, dict)]
        names = {str(t.get("name")) for t in tools}
        if server.allowed_tools is not None and names != set(server.allowed_tools):
            return None
        return [
            McpToolInfo(
                name=str(t.get("name")),
                description=t.get("description"),
                input_schema=t.get("input_schema") or {"type": "object", "properties": {}},
                annotations=t.get("annotations"),
            )
            for t in tools
        ]
    return None
