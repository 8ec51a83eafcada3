"""The MCP servers a request may reach, and how it reaches them.

``McpPolicy`` holds the rules for a request's own ``server_url`` (the egress policy its
connections follow, the timeouts). A ``RequestServer`` is one such server of one request: its
session (opened once, lazily), the tools it may use and its ``require_approval`` policy
(``approval_required``).
Servers the operator configured are tool sets (``engine``, ``namespaces``).
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import Any, Protocol

from app.net.egress import EgressPolicy
from app.tools.mcp.client import McpSession
from app.tools.mcp.outcomes import McpToolInfo
from app.tools.mcp.spec import McpServerSpec


@dataclass(slots=True)
class McpPolicy:
    """Where a request's ``server_url`` may connect (``egress``: the gateway's one policy,
    public addresses only unless ``[egress]`` allows more) and how long it may take."""

    egress: EgressPolicy = field(default_factory=EgressPolicy)
    connect_timeout: float = 10.0
    list_timeout: float = 30.0


@dataclass(frozen=True, slots=True)
class ServerTerms:
    """What a request's ``mcp`` tool (or the operator's configuration) says of its server:
    the tools it may use, which of them need approval, the description the model reads."""

    allowed_tools: list[str] | None
    require_approval: Any
    description: str | None = None


class ToolServer(Protocol):
    """What a call's executor and the listing read of its server (a ``RequestServer``, or a
    configured namespace: ``namespaces.NamespaceServer``)."""

    label: str
    allowed_tools: list[str] | None
    tools: dict[str, McpToolInfo]

    def approval_required(self, tool: McpToolInfo | None, name: str) -> bool: ...


class RequestServer:
    """One MCP server a request names by its ``server_url``: its session (opened once,
    lazily, closed with the request) and its policy."""

    def __init__(
        self, label: str, terms: ServerTerms, *, spec: McpServerSpec, policy: McpPolicy
    ) -> None:
        self.label = label
        self.description = terms.description
        self._spec = spec
        self.allowed_tools = terms.allowed_tools
        self.require_approval = terms.require_approval
        self._policy = policy
        self._session: McpSession | None = None
        self._lock = asyncio.Lock()
        self.tools: dict[str, McpToolInfo] = {}

    async def session(self) -> McpSession:
        async with self._lock:
            if self._session is None or self._session.closed:
                self._session = await McpSession.open(
                    self._spec,
                    connect_timeout=self._policy.connect_timeout,
                    egress=self._policy.egress,
                )
            return self._session

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
