"""Messages tools -> Responses tools: client tools -> function tools, ``web_search_*`` ->
``web_search``, ``mcp_servers`` (Anthropic's MCP connector) -> the gateway's ``mcp`` tools, and
``tool_choice``. Deferred tools (``defer_loading``) are offered once a tool search found them."""

from __future__ import annotations

from typing import Any

from app.frontends.anthropic.errors import invalid
from app.protocol.json_types import JsonObject

# Anthropic-defined server tools the model may call through a Responses upstream as its own.
_WEB_SEARCH_PREFIX = "web_search_"
# Server tools the gateway cannot run (they are Anthropic's hosted tools): dropped, the model is
# not offered them. ``tool_search_tool_*`` is Anthropic's server-side search over deferred tools;
# the gateway cannot run it, so with it every deferred tool is offered from the start. Claude
# Code brings its own search (a client tool, ``ToolSearch``), which works through the gateway.
_DROPPED_TOOL_PREFIXES = ("tool_search_tool_", "code_execution_", "web_fetch_", "memory_")

TOOL_REFERENCE_PREFIX = "Tool loaded: "
_SERVER_SEARCH_PREFIX = "tool_search_tool_"


def deferred_found(tools: list[Any], items: list[JsonObject]) -> set[str] | None:
    """The deferred tools to offer: those found so far, or all (``None``) when the request
    asks for Anthropic's server-side tool search, which the gateway cannot run."""
    for spec in tools:
        if isinstance(spec, dict) and str(spec.get("type") or "").startswith(_SERVER_SEARCH_PREFIX):
            return None
    return referenced_tools(items)


def referenced_tools(items: list[JsonObject]) -> set[str]:
    """The tools a tool search found so far: named by ``tool_reference`` blocks in the
    history's tool results (their text in the translated outputs)."""
    found: set[str] = set()
    for item in items:
        if item.get("type") != "function_call_output":
            continue
        output = item.get("output")
        parts = output if isinstance(output, list) else [{"text": output}]
        for part in parts:
            for line in str(part.get("text") or "").splitlines():
                if line.startswith(TOOL_REFERENCE_PREFIX):
                    found.add(line.removeprefix(TOOL_REFERENCE_PREFIX))
    return found


def tool(tool: Any, param: str, found: set[str] | None) -> JsonObject | None:
    """One tool; ``None`` when the model is not offered it. ``found``: the deferred tools a
    search has found (``None``: all of them, when the gateway cannot run the search asked for)."""
    if not isinstance(tool, dict):
        raise invalid(param, "A tool must be an object.")
    kind = tool.get("type")
    if kind in (None, "custom"):
        name = tool.get("name")
        schema = tool.get("input_schema")
        if not isinstance(name, str) or not isinstance(schema, dict):
            raise invalid(param, "A tool needs a 'name' and an 'input_schema' object.")
        # ``defer_loading``: as on Anthropic's API, the model sees a deferred tool only once a
        # tool search (Claude Code's own ``ToolSearch`` tool) has answered with a
        # ``tool_reference`` to it.
        if tool.get("defer_loading") is True and found is not None and name not in found:
            return None
        function: JsonObject = {"type": "function", "name": name, "parameters": schema}
        if isinstance(tool.get("description"), str):
            function["description"] = tool["description"]
        if tool.get("strict") is True:
            function["strict"] = True
        return function
    if isinstance(kind, str) and kind.startswith(_WEB_SEARCH_PREFIX):
        return {"type": "web_search"}
    if isinstance(kind, str) and kind.startswith(_DROPPED_TOOL_PREFIXES):
        return None
    raise invalid(
        f"{param}.type",
        f"The tool type {kind!r} is one of Anthropic's own tools, which this gateway cannot "
        "run; declare it as a client tool with an input_schema.",
    )


def mcp_tools(servers: list[Any]) -> list[JsonObject | None]:
    """Anthropic's MCP connector (``mcp_servers``) -> the gateway's ``mcp`` tools."""
    tools: list[JsonObject | None] = []
    for index, server in enumerate(servers):
        param = f"mcp_servers[{index}]"
        if not isinstance(server, dict):
            raise invalid(param, "An MCP server must be an object.")
        name, url = server.get("name"), server.get("url")
        if not isinstance(name, str) or not isinstance(url, str):
            raise invalid(param, "An MCP server needs a 'name' and a 'url'.")
        tool: JsonObject = {
            "type": "mcp",
            "server_label": name,
            "server_url": url,
            "require_approval": "never",
        }
        if isinstance(server.get("authorization_token"), str):
            tool["authorization"] = server["authorization_token"]
        configuration = server.get("tool_configuration")
        if isinstance(configuration, dict):
            if configuration.get("enabled") is False:
                continue
            if isinstance(configuration.get("allowed_tools"), list):
                tool["allowed_tools"] = configuration["allowed_tools"]
        tools.append(tool)
    return tools


def tool_choice(choice: Any, body: JsonObject) -> None:
    if choice is None:
        return
    if not isinstance(choice, dict):
        raise invalid("tool_choice", "Input should be an object with a 'type'.")
    kind = choice.get("type")
    if kind == "auto":
        body["tool_choice"] = "auto"
    elif kind == "any":
        body["tool_choice"] = "required"
    elif kind == "none":
        body["tool_choice"] = "none"
    elif kind == "tool" and isinstance(choice.get("name"), str):
        body["tool_choice"] = {"type": "function", "name": choice["name"]}
    else:
        raise invalid("tool_choice.type", "Input should be 'auto', 'any', 'tool' or 'none'.")
    if choice.get("disable_parallel_tool_use") is True:
        body["parallel_tool_calls"] = False
