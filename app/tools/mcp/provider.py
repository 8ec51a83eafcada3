"""Remote MCP tools run by the gateway: ``{"type": "mcp", ...}`` request tools.

``McpToolProvider`` resolves a request's MCP servers (its ``server_url`` after the URL policy,
or a server configured by the operator and named by ``server_label``), lists their tools once
per request (not again when the history already holds an ``mcp_list_tools`` item for the same
label and allowed tools), and serves each listed tool as an ``McpToolExecutor`` under the
upstream name ``mcp__{server_label}__{tool}``. Calls appear to the client as ``mcp_call``
items, or as ``mcp_approval_request`` items when ``require_approval`` says so.

``headers`` and ``authorization`` of a request tool go to the server and nowhere else: the
stored response's tools do not carry them (``core.response``).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import orjson

from app.core.ids import new_id
from app.core.observe import preview_of
from app.core.ports import CallPresentation, GatewayCall, PreludeItem, ToolExecutor, ToolResult
from app.errors import InvalidRequestError
from app.net.egress import METADATA_AND_LINK_LOCAL, EgressPolicy
from app.protocol.json_types import JsonObject
from app.tools.mcp.client import (
    McpCallOutcome,
    McpError,
    McpServerSpec,
    McpSession,
    McpSessionPool,
    McpToolInfo,
    transport_for_url,
)
from app.tools.registry import NameTable, ProviderTools

logger = logging.getLogger(__name__)

NAMESPACE = "mcp"
ITEM_TYPES = frozenset(
    {"mcp_call", "mcp_list_tools", "mcp_approval_request", "mcp_approval_response"}
)

PRESENTATION = CallPresentation(
    opened_events=("response.mcp_call.in_progress",),
    arguments_events=("response.mcp_call_arguments.delta", "response.mcp_call_arguments.done"),
    running_events=(),
    completed_event="response.mcp_call.completed",
    failed_event="response.mcp_call.failed",
)


@dataclass(frozen=True, slots=True)
class ConfiguredMcpServer:
    """A server the operator configured; clients name it by ``server_label`` alone."""

    spec: McpServerSpec
    allowed_tools: list[str] | None = None
    require_approval: Any = "never"
    description: str | None = None


@dataclass(slots=True)
class McpPolicy:
    allowed_hosts: list[str] = field(default_factory=list)
    allow_link_local: bool = False
    connect_timeout: float = 10.0
    list_timeout: float = 30.0

    def egress(self) -> EgressPolicy:
        """Where a request's ``server_url`` may point: ``allowed_hosts`` when set; never
        at a cloud metadata service or a link-local address unless ``allow_link_local``;
        loopback and private addresses are allowed (users run MCP servers beside the gateway);
        a name that does not resolve is let through (connecting fails as a tool error)."""
        return EgressPolicy(
            allowed_hosts=tuple(self.allowed_hosts),
            refused=frozenset() if self.allow_link_local else METADATA_AND_LINK_LOCAL,
            allow_unresolved=True,
            purpose="MCP",
        )


# ----------------------------------------------------------------------------- servers


class _Server:
    """One MCP server of one request: its session (opened once, lazily) and its policy."""

    def __init__(
        self,
        label: str,
        *,
        spec: McpServerSpec | None,
        pool: McpSessionPool | None,
        allowed_tools: list[str] | None,
        require_approval: Any,
        connect_timeout: float,
        description: str | None = None,
    ) -> None:
        self.label = label
        self.description = description
        self._spec = spec
        self._pool = pool
        self.allowed_tools = allowed_tools
        self.require_approval = require_approval
        self._connect_timeout = connect_timeout
        self._session: McpSession | None = None
        self._lock = asyncio.Lock()
        self.tools: dict[str, McpToolInfo] = {}

    async def session(self) -> McpSession:
        async with self._lock:
            if self._pool is not None:
                return await self._pool.session(self.label)
            if self._session is None or self._session.closed:
                assert self._spec is not None
                self._session = await McpSession.open(
                    self._spec, connect_timeout=self._connect_timeout
                )
            return self._session

    @property
    def pooled(self) -> bool:
        return self._pool is not None

    async def broken(self) -> None:
        if self._pool is not None:
            await self._pool.discard(self.label)

    async def aclose(self) -> None:
        if self._session is not None:
            await self._session.aclose()

    def allows(self, tool: str) -> bool:
        return self.allowed_tools is None or tool in self.allowed_tools

    def approval_required(self, tool: McpToolInfo | None, name: str) -> bool:
        return approval_required(self.require_approval, name, tool)


def approval_required(policy: Any, name: str, tool: McpToolInfo | None) -> bool:
    """OpenAI's ``require_approval``: ``"always"`` (the default), ``"never"``, or filters
    ``{"always": {...}, "never": {...}}`` matching ``tool_names`` and ``read_only``."""
    if policy in (None, "always"):
        return True
    if policy == "never":
        return False
    if isinstance(policy, dict):
        if _filter_matches(policy.get("never"), name, tool):
            return False
        if _filter_matches(policy.get("always"), name, tool):
            return True
    return True


def _filter_matches(spec: Any, name: str, tool: McpToolInfo | None) -> bool:
    if not isinstance(spec, dict):
        return False
    names = spec.get("tool_names")
    if isinstance(names, list) and name in names:
        return True
    read_only = spec.get("read_only")
    if isinstance(read_only, bool) and tool is not None:
        hints = tool.annotations or {}
        return bool(hints.get("readOnlyHint", hints.get("read_only", False))) == read_only
    return False


# ----------------------------------------------------------------------------- executor


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


def _execution_error(message: str) -> JsonObject:
    return {"type": "mcp_tool_execution_error", "content": [{"type": "text", "text": message}]}


class McpToolExecutor:
    """One tool of one MCP server (``core.ports.ToolExecutor``)."""

    presentation = PRESENTATION

    def __init__(self, server: _Server | None, label: str, tool: str) -> None:
        self._server = server
        self.label = label
        self.tool = tool

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
        item = self._item(call, error=_execution_error(message), status=status)
        return ToolResult(item=item, model_output=f"Error: {message}", ok=False, preview=message)

    async def run(self, call: GatewayCall, *, timeout: float) -> ToolResult:  # noqa: ASYNC109
        server = self._server
        if server is None or self.tool not in server.tools:
            return self.error_result(
                call,
                f"tool '{self.tool}' is not available on MCP server '{self.label}'",
                status="failed",
            )
        try:
            arguments = _arguments(call.arguments)
        except (orjson.JSONDecodeError, ValueError) as exc:
            error = {
                "type": "mcp_protocol_error",
                "code": -32602,
                "message": f"Invalid params: {exc}",
            }
            return self._result(call, McpCallOutcome(output=None, error=error))
        try:
            session = await server.session()
        except McpError as exc:
            return self._result(call, McpCallOutcome(output=None, error=exc.error))
        outcome = await session.call_tool(self.tool, arguments, timeout=timeout)
        if outcome.error is not None and outcome.error.get("type") != "mcp_tool_execution_error":
            await server.broken()
        return self._result(call, outcome)

    def _result(self, call: GatewayCall, outcome: McpCallOutcome) -> ToolResult:
        if outcome.error is not None:
            item = self._item(call, error=outcome.error, status="failed")
            text = error_text(outcome.error)
            return ToolResult(item=item, model_output=text, ok=False, preview=preview_of(text))
        output = outcome.output or ""
        item = self._item(call, output=output, status="completed")
        return ToolResult(item=item, model_output=output, ok=True, preview=preview_of(output))


# ----------------------------------------------------------------------------- provider


class McpToolProvider:
    """The ``mcp`` tool type (``tools.registry.ToolProvider``)."""

    tool_types = frozenset({"mcp"})
    item_types = ITEM_TYPES
    namespace = NAMESPACE

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
        self._pooled_tools: dict[str, tuple[McpSession, list[McpToolInfo]]] = {}

    def unavailable(self) -> str | None:
        return None  # MCP servers are reached per request

    # ------------------------------------------------------------------ prepare

    async def prepare(
        self,
        tools: list[tuple[int, JsonObject]],
        history: list[JsonObject],
        new_input: list[JsonObject],
        names: NameTable,
        request: JsonObject,
    ) -> ProviderTools:
        out = ProviderTools()
        servers: dict[str, _Server] = {}
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
            *(self._listing(server, history) for server in servers.values())
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
        out.approved = self._approved_calls(history, new_input, servers, names)
        return out

    async def _server_for(self, index: int, tool: JsonObject) -> _Server:
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
            return _Server(
                label,
                spec=None if self.pool is not None else configured.spec,
                pool=self.pool,
                allowed_tools=allowed if allowed is not None else configured.allowed_tools,
                require_approval=tool.get("require_approval", configured.require_approval),
                connect_timeout=self.policy.connect_timeout,
                description=tool.get("server_description") or configured.description,
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
        return _Server(
            label,
            spec=spec,
            pool=None,
            allowed_tools=allowed,
            require_approval=tool.get("require_approval", "always"),
            connect_timeout=self.policy.connect_timeout,
            description=tool.get("server_description"),
        )

    async def _listing(
        self, server: _Server, history: list[JsonObject]
    ) -> tuple[list[McpToolInfo], PreludeItem | None]:
        """The server's tools: from the history when it already listed them, else listed now
        (an ``mcp_list_tools`` item for the client either way it was listed)."""
        previous = _previous_listing(history, server)
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
            cached = self._pooled_tools.get(server.label) if server.pooled else None
            if cached is not None and cached[0] is session and not session.closed:
                listed = cached[1]
            else:
                listed = await session.list_tools(timeout=self.policy.list_timeout)
                if server.pooled:
                    # A configured server's session outlives the request: its listing is kept
                    # with it (a new session lists again).
                    self._pooled_tools[server.label] = (session, listed)
        except McpError as exc:
            logger.warning("MCP list_tools failed", extra={"server_label": server.label})
            await server.broken()
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

    def _approved_calls(
        self,
        history: list[JsonObject],
        new_input: list[JsonObject],
        servers: Mapping[str, _Server],
        names: NameTable,
    ) -> list[tuple[GatewayCall, ToolExecutor]]:
        requests = {
            item.get("id"): item for item in history if item.get("type") == "mcp_approval_request"
        }
        done = {
            item.get("approval_request_id") for item in history if item.get("type") == "mcp_call"
        }
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
            executor = McpToolExecutor(servers.get(label), label, tool)
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

    # ------------------------------------------------------------------ registry hooks

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

    def lower(self, items: list[JsonObject], names: NameTable) -> list[JsonObject]:
        return lower_mcp_items(items, names)


def _describe(info: McpToolInfo, server: _Server) -> str:
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


def _previous_listing(history: list[JsonObject], server: _Server) -> list[McpToolInfo] | None:
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


# ----------------------------------------------------------------------------- lowering


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


def lower_mcp_items(items: list[JsonObject], names: NameTable) -> list[JsonObject]:
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
