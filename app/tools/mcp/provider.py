"""Remote MCP tools run by the gateway: ``{"type": "mcp", ...}`` request tools.

``McpToolProvider`` resolves a request's MCP servers (its ``server_url`` after the URL policy,
or a server configured by the operator and named by ``server_label``), lists their tools once
per request (``listing``: not again when the history already holds an ``mcp_list_tools`` item
for the same label and allowed tools), and serves each listed tool as an ``McpToolExecutor``
(``executor``) under the upstream name ``mcp__{server_label}__{tool}``. Calls appear to the
client as ``mcp_call`` items, or as ``mcp_approval_request`` items when ``require_approval``
says so; approved ones come back as calls to run (``approvals``).

``headers`` and ``authorization`` of a request tool go to the server and nowhere else: the
stored response's tools do not carry them (``core.response``).
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from typing import Any

from app.core.tools import ProviderTools, ToolExecutor, ToolKindSpec, ToolNames, ToolRequest
from app.errors import InvalidRequestError
from app.protocol.json_types import JsonObject
from app.tools.mcp.approvals import approved_calls
from app.tools.mcp.executor import ITEM_KINDS, NAMESPACE, McpToolExecutor
from app.tools.mcp.listing import ToolListings
from app.tools.mcp.lowering import lower_mcp_items
from app.tools.mcp.outcomes import McpToolInfo
from app.tools.mcp.pool import McpSessionPool
from app.tools.mcp.servers import ConfiguredMcpServer, McpPolicy, RequestServer, ServerTerms
from app.tools.mcp.spec import McpServerSpec, transport_for_url


class McpToolProvider:
    """The ``mcp`` tool type (``core.tools.ToolProvider``)."""

    # The credentials in ``headers`` and ``authorization`` go to the MCP server only.
    spec = ToolKindSpec(
        namespace=NAMESPACE,
        tool_types=frozenset({"mcp"}),
        items=ITEM_KINDS,
        secret_fields=frozenset({"headers", "authorization"}),
    )

    def __init__(
        self,
        *,
        policy: McpPolicy | None = None,
        configured: Mapping[str, ConfiguredMcpServer] | None = None,
        pool: McpSessionPool | None = None,
    ) -> None:
        self.policy = policy or McpPolicy()
        self.configured = dict(configured or {})
        self.pool = pool
        self._listings = ToolListings()

    def unavailable(self) -> str | None:
        return None  # MCP servers are reached per request

    # ------------------------------------------------------------------ prepare

    async def prepare(
        self,
        tools: list[tuple[int, JsonObject]],
        history: list[JsonObject],
        new_input: list[JsonObject],
        request: ToolRequest,
    ) -> ProviderTools:
        names = request.names
        out = ProviderTools()
        servers: dict[str, RequestServer] = {}
        for index, tool in tools:
            server = await self._server_for(index, tool)
            if server.label in servers:
                raise InvalidRequestError(
                    f"Duplicate MCP server_label '{server.label}'.",
                    param=f"tools[{index}].server_label",
                    code="invalid_value",
                )
            servers[server.label] = server
            out.closers.append(server.aclose)
        listings = await asyncio.gather(
            *(
                self._listings.listing(server, history, list_timeout=self.policy.list_timeout)
                for server in servers.values()
            )
        )
        for server, (listed, prelude) in zip(servers.values(), listings, strict=True):
            if prelude is not None:
                out.prelude.append(prelude)
            for info in listed:
                if not server.allows(info.name):
                    continue
                server.tools[info.name] = info
                name = names.name(NAMESPACE, server.label, info.name)
                out.executors[name] = McpToolExecutor(server, server.label, info.name)
                out.upstream_tools.append(
                    {
                        "type": "function",
                        "name": name,
                        "description": _describe(info, server),
                        "parameters": info.input_schema,
                        "strict": False,
                    }
                )
        out.approved = approved_calls(history, new_input, servers, names)
        return out

    async def _server_for(self, index: int, tool: JsonObject) -> RequestServer:
        """The server of the request's ``tools[index]``: a configured one named by its label,
        or the tool's ``server_url`` (checked against the policy) with its headers and
        authorization. Raises ``InvalidRequestError`` naming the field at fault."""
        label = tool.get("server_label")
        if not isinstance(label, str) or not label:
            raise InvalidRequestError(
                f"Missing required parameter: 'tools[{index}].server_label'.",
                param=f"tools[{index}].server_label",
                code="missing_required_parameter",
            )
        allowed = _allowed_names(tool.get("allowed_tools"))
        url = tool.get("server_url")
        if url is None and tool.get("connector_id") is None and label in self.configured:
            configured = self.configured[label]
            terms = ServerTerms(
                allowed_tools=allowed if allowed is not None else configured.allowed_tools,
                require_approval=tool.get("require_approval", configured.require_approval),
                description=tool.get("server_description") or configured.description,
            )
            return RequestServer(
                label,
                terms,
                spec=None if self.pool is not None else configured.spec,
                pool=self.pool,
                connect_timeout=self.policy.connect_timeout,
            )
        if not isinstance(url, str) or not url:
            raise InvalidRequestError(
                f"MCP server '{label}' needs a 'server_url' (no server with this label is "
                "configured on the gateway; connectors are not supported).",
                param=f"tools[{index}].server_url",
                code="missing_required_parameter",
            )
        reason = await self.policy.egress().refusal(url)
        if reason is not None:
            raise InvalidRequestError(
                f"MCP server_url '{url}' is not allowed: {reason}",
                param=f"tools[{index}].server_url",
                code="invalid_value",
            )
        headers = {str(k): str(v) for k, v in (tool.get("headers") or {}).items() if v is not None}
        authorization = tool.get("authorization")
        if isinstance(authorization, str) and authorization:
            headers["Authorization"] = (
                authorization if " " in authorization else f"Bearer {authorization}"
            )
        spec = McpServerSpec(
            label=label, url=url, transport=transport_for_url(url), headers=headers
        )
        terms = ServerTerms(
            allowed_tools=allowed,
            require_approval=tool.get("require_approval", "always"),
            description=tool.get("server_description"),
        )
        return RequestServer(
            label, terms, spec=spec, pool=None, connect_timeout=self.policy.connect_timeout
        )

    # ------------------------------------------------------------------ toolkit hooks

    def unknown_executor(self, name: str) -> ToolExecutor:
        parts = name.split("__", 2)
        label = parts[1] if len(parts) > 1 else ""
        tool = parts[2] if len(parts) > 2 else name
        return McpToolExecutor(None, label, tool)

    def choice_names(
        self, choice: JsonObject, executors: Mapping[str, ToolExecutor]
    ) -> list[str] | None:
        label = choice.get("server_label")
        tool = choice.get("name")
        selected: list[str] = []
        for name, executor in executors.items():
            if not isinstance(executor, McpToolExecutor) or executor.label != label:
                continue
            if tool is None or executor.tool == tool:
                selected.append(name)
        return selected

    def lower(self, items: list[JsonObject], names: ToolNames) -> list[JsonObject]:
        return lower_mcp_items(items, names)


def _describe(info: McpToolInfo, server: RequestServer) -> str:
    """The function description the model reads: the tool's, then its server's."""
    text = info.description or ""
    if server.description:
        text = f"{text}\n\n(MCP server '{server.label}': {server.description})".strip()
    return text


def _allowed_names(value: Any) -> list[str] | None:
    """``allowed_tools`` as a list of names (``["a"]`` or ``{"tool_names": ["a"]}``)."""
    if isinstance(value, list):
        return [str(v) for v in value]
    if isinstance(value, dict) and isinstance(value.get("tool_names"), list):
        return [str(v) for v in value["tool_names"]]
    return None
