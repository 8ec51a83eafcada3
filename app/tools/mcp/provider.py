"""Remote MCP tools run by the gateway: ``{"type": "mcp", ...}`` request tools.

``McpToolProvider`` resolves a request's MCP servers (its ``server_url`` after the URL policy,
or a server configured by the operator and named by ``server_label``), lists their tools once
per request (``listing``: not again when the history already holds an ``mcp_list_tools`` item
for the same label and allowed tools), and serves each listed tool as an ``McpToolExecutor``
(``executor``) under the upstream name ``mcp__{server_label}__{tool}``. Calls appear to the
client as ``mcp_call`` items, or as ``mcp_approval_request`` items when ``require_approval``
says so; approved ones come back as calls to run (``approvals``).

``headers`` and ``authorization`` of a request tool go to the server and nowhere else: the
stored response's tools do not carry them, and its ``server_url`` is stored with its
credentials redacted (``core.response.without_secrets``). A request's server is reached
through the egress policy (``McpPolicy.egress``): the URL is only checked for its form here;
where it leads is decided when connecting, and a refusal reads like any server that cannot be
reached. A configured server's endpoint, credentials and terms are the operator's
(``configured``): a request may narrow its tools and ask for more approvals, nothing else.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping
from typing import Any

from app.core.engines import Namespace, ToolSpec
from app.core.redaction import redact_url
from app.core.tool_sessions import ToolSessions
from app.core.tools import ProviderTools, ToolExecutor, ToolKindSpec, ToolNames, ToolRequest
from app.errors import InvalidRequestError
from app.net.egress import url_problem
from app.protocol.json_types import JsonObject
from app.tools.mcp.approvals import approved_calls
from app.tools.mcp.executor import ITEM_KINDS, NAMESPACE, McpToolExecutor
from app.tools.mcp.listing import ToolListings
from app.tools.mcp.lowering import lower_mcp_items
from app.tools.mcp.namespaces import EngineBatch, EngineToolExecutor, NamespaceServer
from app.tools.mcp.outcomes import McpToolInfo
from app.tools.mcp.servers import McpPolicy, RequestServer, ServerTerms
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
        namespaces: Mapping[str, Namespace] | None = None,
        sessions: ToolSessions | None = None,
    ) -> None:
        """``namespaces`` are the tool sets the operator configured (MCP servers among them),
        run by ``sessions``' engine."""
        self.policy = policy or McpPolicy()
        self.namespaces = dict(namespaces or {})
        self.sessions = sessions
        self._listings = ToolListings()

    def default_tools(
        self, tool_sets: Callable[[JsonObject], list[str]]
    ) -> Callable[[JsonObject], list[JsonObject]]:
        """The ``mcp`` tools of the tool sets ``tool_sets`` gives a request, less those the
        request names itself."""

        def tools_for(body: JsonObject) -> list[JsonObject]:
            wanted = tool_sets(body)
            if not wanted:
                return []
            tools = body.get("tools")
            named = {
                t.get("server_label")
                for t in (tools if isinstance(tools, list) else [])
                if isinstance(t, dict) and t.get("type") == "mcp"
            }
            return [
                {"type": "mcp", "server_label": ns}
                for ns in wanted
                if ns not in named and ns in self.namespaces
            ]

        return tools_for

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
        servers: dict[str, RequestServer | NamespaceServer] = {}
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
        remote = [s for s in servers.values() if isinstance(s, RequestServer)]
        configured = [s for s in servers.values() if isinstance(s, NamespaceServer)]
        timeout = self.policy.list_timeout
        listings, preludes = await asyncio.gather(
            asyncio.gather(
                *(self._listings.listing(s, history, list_timeout=timeout) for s in remote)
            ),
            asyncio.gather(*(s.list(history, list_timeout=timeout) for s in configured)),
        )
        for server, (listed, prelude) in zip(remote, listings, strict=True):
            if prelude is not None:
                out.prelude.append(prelude)
            for info in listed:
                if server.allows(info.name):
                    server.tools[info.name] = info
                    executor = McpToolExecutor(server, server.label, info.name)
                    self._offer(out, names, server, info, executor)
        batch = EngineBatch(self.sessions, request.context) if self.sessions is not None else None
        for server, listed_prelude in zip(configured, preludes, strict=True):
            if listed_prelude is not None:
                out.prelude.append(listed_prelude)
            for spec in server.specs.values():
                executor = self._engine_executor(server, spec, batch, names)
                self._offer(out, names, server, server.tools[spec.name], executor)

        def approved(label: str, tool: str) -> McpToolExecutor:
            return _approved_executor(servers.get(label), batch, label, tool)

        out.approved = approved_calls(history, new_input, approved, names)
        return out

    def _engine_executor(
        self,
        server: NamespaceServer,
        spec: ToolSpec,
        batch: EngineBatch | None,
        names: ToolNames,
    ) -> McpToolExecutor:
        if batch is None:  # no engine configured: the tool answers with an error
            return McpToolExecutor(None, server.label, spec.name)
        executor = EngineToolExecutor(server, spec, batch)
        batch.add(names.name(NAMESPACE, server.label, spec.name), executor)
        return executor

    @staticmethod
    def _offer(
        out: ProviderTools,
        names: ToolNames,
        server: RequestServer | NamespaceServer,
        info: McpToolInfo,
        executor: McpToolExecutor,
    ) -> None:
        name = names.name(NAMESPACE, server.label, info.name)
        out.executors[name] = executor
        out.upstream_tools.append(
            {
                "type": "function",
                "name": name,
                "description": _describe(info, server.label, server.description),
                "parameters": info.input_schema,
                "strict": False,
            }
        )

    async def _server_for(self, index: int, tool: JsonObject) -> RequestServer | NamespaceServer:
        """The server of the request's ``tools[index]``: a configured one named by its label
        (``configured``), or the tool's ``server_url`` with its headers and authorization.
        Raises ``InvalidRequestError`` naming the field at fault."""
        label = tool.get("server_label")
        if not isinstance(label, str) or not label:
            raise InvalidRequestError(
                f"Missing required parameter: 'tools[{index}].server_label'.",
                param=f"tools[{index}].server_label",
                code="missing_required_parameter",
            )
        allowed = _allowed_names(tool.get("allowed_tools"))
        url = tool.get("server_url")
        namespace = self.namespaces.get(label)
        if namespace is not None:
            return configured(index, tool, namespace, allowed)
        if not isinstance(url, str) or not url:
            raise InvalidRequestError(
                f"MCP server '{label}' needs a 'server_url' (no server with this label is "
                "configured on the gateway; connectors are not supported).",
                param=f"tools[{index}].server_url",
                code="missing_required_parameter",
            )
        # Only what the URL says is checked here: where it leads is the egress policy's call
        # when connecting, answered like any server that cannot be reached.
        problem = url_problem(url)
        if problem is not None:
            raise InvalidRequestError(
                f"MCP server_url '{redact_url(url)}' is not valid: {problem}",
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
        return RequestServer(label, terms, spec=spec, policy=self.policy)

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


def _approved_executor(
    server: RequestServer | NamespaceServer | None,
    batch: EngineBatch | None,
    label: str,
    tool: str,
) -> McpToolExecutor:
    """The executor of a call the client approved (an unknown server or tool: one that answers
    with an error)."""
    if not isinstance(server, NamespaceServer):
        return McpToolExecutor(server, label, tool)
    spec = server.specs.get(tool)
    if spec is None or batch is None:
        return McpToolExecutor(None, label, tool)
    return EngineToolExecutor(server, spec, batch)


def _describe(info: McpToolInfo, label: str, description: str | None) -> str:
    """The function description the model reads: the tool's, then its server's."""
    text = info.description or ""
    if description:
        text = f"{text}\n\n(MCP server '{label}': {description})".strip()
    return text


def _allowed_names(value: Any) -> list[str] | None:
    """``allowed_tools`` as a list of names (``["a"]`` or ``{"tool_names": ["a"]}``)."""
    if isinstance(value, list):
        return [str(v) for v in value]
    if isinstance(value, dict) and isinstance(value.get("tool_names"), list):
        return [str(v) for v in value["tool_names"]]
    return None


def configured(
    index: int, tool: JsonObject, namespace: Namespace, allowed: list[str] | None
) -> NamespaceServer:
    """A configured server (or tool set) named by a request's ``tools[index]``: the operator's
    endpoint, credentials and terms are a ceiling the request may only narrow, so the tool may
    not name an endpoint nor credentials of its own (400 naming the field)."""
    label = namespace.name
    if tool.get("server_url") is not None:
        raise InvalidRequestError(
            f"MCP server '{label}' is configured on the gateway: name it by server_label "
            "alone, without server_url (or give your own server another server_label).",
            param=f"tools[{index}].server_url",
            code="invalid_value",
        )
    for field in ("headers", "authorization"):
        if tool.get(field):
            raise InvalidRequestError(
                f"MCP server '{label}' is configured on the gateway with the operator's "
                f"credentials: a request cannot set its {field}.",
                param=f"tools[{index}].{field}",
                code="invalid_value",
            )
    return NamespaceServer(
        namespace, allowed=allowed, require_approval=tool.get("require_approval")
    )
