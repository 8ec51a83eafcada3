"""The gateway's toolkit: which of a request's tools are the gateway's, under which upstream names.

``GatewayToolKit`` (the ``core.tools.ToolKit`` the service uses) dispatches each request tool
to the ``core.tools.ToolProvider`` whose ``spec`` declares its ``type`` and keeps ``function``
tools, and any other client-run type (``custom``, ``namespace`` …), for the client. A hosted
tool the gateway cannot run (no provider for its type, or a provider that is not available) is
dropped, refused or forwarded as ``tools.hosted.HostedTools`` says. What the kernel asks of the
tools (the ``include`` values they answer, their secret fields) and what ``app.main`` registers
with the protocol (their item types and id prefixes) come from the providers' specs.
``NameTable`` gives the tools collision-free upstream function names.
"""

from __future__ import annotations

import asyncio
import hashlib
import re
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

from app.core.tools import (
    PreparedTools,
    ProviderTools,
    ToolContext,
    ToolExecutor,
    ToolProvider,
    ToolRequest,
)
from app.errors import InvalidRequestError
from app.protocol.items import ItemKind
from app.protocol.json_types import JsonObject
from app.tools.hosted import HostedToolPolicy, HostedTools, dropped_include, is_hosted

MAX_NAME_LENGTH = 64
_UNSAFE = re.compile(r"[^A-Za-z0-9_-]")


class NameTable:
    """Collision-free upstream function names for gateway tools (``core.tools.ToolNames``)."""

    def __init__(self, reserved: Sequence[str] = ()) -> None:
        self._taken: set[str] = set(reserved)
        self._by_key: dict[tuple[str, str, str], str] = {}

    def claim(self, name: str) -> str:
        """``name`` itself when free (a built-in tool's plain name such as ``file_search``),
        else ``name`` with a numeric suffix; each call claims a new name."""
        candidate, n = name, 2
        while candidate in self._taken:
            candidate, n = f"{name}_{n}", n + 1
        self._taken.add(candidate)
        return candidate

    def name(self, namespace: str, group: str, tool: str) -> str:
        """``{namespace}__{group}__{tool}`` made safe (``[A-Za-z0-9_-]``, at most 64 chars);
        a hash suffix keeps names apart when cleaning or truncating made two of them equal."""
        key = (namespace, group, tool)
        known = self._by_key.get(key)
        if known is not None:
            return known
        base = _UNSAFE.sub("_", f"{namespace}__{group}__{tool}")
        name = base
        if len(name) > MAX_NAME_LENGTH or name in self._taken:
            digest = hashlib.sha1("\0".join(key).encode()).hexdigest()[:8]
            name = f"{base[: MAX_NAME_LENGTH - 9]}_{digest}"
        self._taken.add(name)
        self._by_key[key] = name
        return name


class ExecutorTable(Mapping[str, ToolExecutor]):
    """The gateway's executors by upstream name; a name in a provider's namespace that no tool
    serves (the model invented it) gets that provider's error-answering executor."""

    def __init__(
        self, executors: dict[str, ToolExecutor], providers: Sequence[ToolProvider]
    ) -> None:
        self._executors = executors
        self._namespaces = {f"{p.spec.namespace}__": p for p in providers}

    def __getitem__(self, name: str) -> ToolExecutor:
        executor = self._executors.get(name)
        if executor is not None:
            return executor
        if isinstance(name, str):
            for prefix, provider in self._namespaces.items():
                if name.startswith(prefix):
                    executor = provider.unknown_executor(name)
                    self._executors[name] = executor
                    return executor
        raise KeyError(name)

    def __iter__(self) -> Iterator[str]:
        return iter(self._executors)

    def __len__(self) -> int:
        return len(self._executors)


class GatewayToolKit:
    """``core.tools.ToolKit`` over a set of providers, one per gateway tool kind."""

    def __init__(
        self,
        providers: Sequence[ToolProvider],
        hosted: HostedTools | None = None,
        default_tools: Callable[[JsonObject], list[JsonObject]] | None = None,
    ) -> None:
        """``default_tools`` gives the tools a request gets without naming them (an
        operator's default tool sets for the request's route)."""
        self._providers = list(providers)
        self._default_tools = default_tools
        self._by_tool_type = {t: p for p in self._providers for t in p.spec.tool_types}
        self._item_types = frozenset(t for p in self._providers for t in p.spec.item_types)
        self._include = frozenset(v for p in self._providers for v in p.spec.include)
        self._hosted = hosted if hosted is not None else HostedTools()

    @property
    def include_values(self) -> frozenset[str]:
        return self._include

    def secret_fields(self, tool_type: str) -> frozenset[str]:
        provider = self._by_tool_type.get(tool_type)
        return provider.spec.secret_fields if provider is not None else frozenset()

    @property
    def item_kinds(self) -> tuple[ItemKind, ...]:
        """The item types of every tool kind, for the protocol's registry."""
        return tuple(kind for p in self._providers for kind in p.spec.items)

    def _tools(self, body: JsonObject) -> list[JsonObject]:
        """The request's tools, then the defaults of its route."""
        raw = body.get("tools")
        tools = [t for t in raw if isinstance(t, dict)] if isinstance(raw, list) else []
        if self._default_tools is not None:
            tools.extend(self._default_tools(body))
        return tools

    def involves_gateway(self, body: JsonObject, items: list[JsonObject]) -> bool:
        tools = self._tools(body)
        if tools:
            for tool in (t for t in tools if isinstance(t, dict)):
                if self._runs(tool):
                    return True
                if self._cannot_run(tool) and self._hosted.policy(body) != "forward":
                    return True  # to drop or refuse it
        return any(item.get("type") in self._item_types for item in items)

    def _runs(self, tool: JsonObject) -> bool:
        provider = self._by_tool_type.get(str(tool.get("type")))
        return provider is not None and provider.unavailable() is None

    def _cannot_run(self, tool: JsonObject) -> bool:
        """A hosted tool without an available provider."""
        if str(tool.get("type")) in self._by_tool_type:
            return not self._runs(tool)
        return is_hosted(tool)

    def _sort(
        self, tools: list[JsonObject], policy: HostedToolPolicy
    ) -> tuple[dict[int, list[tuple[int, JsonObject]]], list[JsonObject], list[JsonObject]]:
        """The gateway's tools by provider, the upstream's (the client's and forwarded hosted
        ones), and the hosted tools left out."""
        grouped: dict[int, list[tuple[int, JsonObject]]] = {}
        upstream_tools: list[JsonObject] = []
        dropped: list[JsonObject] = []
        for index, tool in enumerate(tools):
            provider = self._by_tool_type.get(str(tool.get("type")))
            if provider is not None and provider.unavailable() is None:
                grouped.setdefault(id(provider), []).append((index, tool))
            elif provider is None and not is_hosted(tool):
                upstream_tools.append(tool)  # the client's (function, custom, namespace …)
            elif self._hosted.handle(
                index, tool, provider.unavailable() if provider else None, policy
            ):
                upstream_tools.append(tool)
            else:
                dropped.append(tool)
        return grouped, upstream_tools, dropped

    async def prepare(
        self,
        body: JsonObject,
        history: list[JsonObject],
        new_input: list[JsonObject],
        context: ToolContext | None = None,
    ) -> PreparedTools:
        tools = self._tools(body)
        client_names = [str(t.get("name")) for t in tools if t.get("type") == "function"]
        names = NameTable(client_names)
        request = ToolRequest(body, names, context or ToolContext("", ""))
        grouped, upstream_tools, dropped = self._sort(tools, self._hosted.policy(body))
        parts = await asyncio.gather(
            *(
                p.prepare(grouped.get(id(p), []), history, new_input, request)
                for p in self._providers
            ),
            return_exceptions=True,
        )
        closers = [c for part in parts if isinstance(part, ProviderTools) for c in part.closers]
        failure = next((part for part in parts if isinstance(part, BaseException)), None)
        if failure is not None:
            for closer in closers:
                await closer()
            raise failure
        executors: dict[str, ToolExecutor] = {}
        prepared = PreparedTools(
            executors={},
            upstream_tools=upstream_tools,
            tool_choice=None,
            upstream_input=[],
            prelude=[],
            approved=[],
            closers=closers,
        )
        for part in parts:
            assert isinstance(part, ProviderTools)
            executors.update(part.executors)
            upstream_tools.extend(part.upstream_tools)
            prepared.prelude.extend(part.prelude)
            prepared.approved.extend(part.approved)
            prepared.annotators.extend(part.annotators)
        table = ExecutorTable(executors, self._providers)
        prepared.executors = table
        try:
            prepared.upstream_tools, prepared.tool_choice = self._apply_choice(
                body.get("tool_choice"), upstream_tools, table, dropped
            )
        except InvalidRequestError:
            await prepared.aclose()
            raise
        include = body.get("include")
        if dropped and isinstance(include, list):
            prepared.upstream_include = dropped_include(include, dropped)
        lowered = [*history, *new_input]
        for provider in self._providers:
            lowered = provider.lower(lowered, names)
        prepared.upstream_input = lowered
        return prepared

    # ------------------------------------------------------------------ tool_choice

    def _apply_choice(
        self,
        choice: Any,
        upstream_tools: list[JsonObject],
        table: ExecutorTable,
        dropped: list[JsonObject],
    ) -> tuple[list[JsonObject], Any]:
        """Translate ``tool_choice`` for the upstream; ``allowed_tools`` (and a choice of a whole
        MCP server) is enforced by offering the upstream only the allowed tools. A choice the
        left-out tools made impossible is a 400 naming ``tool_choice``."""
        if dropped:
            _check_choice_survives(choice, upstream_tools, dropped)
        if not isinstance(choice, dict):
            return upstream_tools, choice
        kind = choice.get("type")
        if kind in self._by_tool_type and _family(str(kind)) in {
            _family(str(t.get("type"))) for t in upstream_tools
        }:
            return upstream_tools, choice  # a forwarded hosted tool: the upstream's to choose
        if kind == "allowed_tools":
            allowed: set[str] = set()
            for entry in choice.get("tools") or []:
                if isinstance(entry, dict):
                    allowed.update(self._names_for(entry, table))
            mode = choice.get("mode") if choice.get("mode") in ("auto", "required") else "auto"
            return _only(upstream_tools, allowed), mode
        provider = self._by_tool_type.get(str(kind))
        if provider is None:
            return upstream_tools, choice
        selected = self._names_for(choice, table)
        if not selected:
            raise InvalidRequestError(
                "tool_choice names a tool that is not available in this request.",
                param="tool_choice",
                code="invalid_value",
            )
        if len(selected) == 1:
            return upstream_tools, {"type": "function", "name": selected[0]}
        return _only(upstream_tools, set(selected)), "required"

    def _names_for(self, entry: JsonObject, table: ExecutorTable) -> list[str]:
        if entry.get("type") == "function":
            name = entry.get("name")
            return [name] if isinstance(name, str) else []
        provider = self._by_tool_type.get(str(entry.get("type")))
        if provider is None:
            return []
        return provider.choice_names(entry, table) or []


def _only(tools: list[JsonObject], names: set[str]) -> list[JsonObject]:
    return [t for t in tools if t.get("type") != "function" or t.get("name") in names]


def _family(kind: str) -> str:
    """A tool type without its date and ``_preview`` (``web_search_preview_2025_03_11`` ->
    ``web_search``): a ``tool_choice`` of one names any of them."""
    base, _, _ = kind.partition("_20")
    return base.removesuffix("_preview")


def _check_choice_survives(
    choice: Any, upstream_tools: list[JsonObject], dropped: list[JsonObject]
) -> None:
    """Refuse a ``tool_choice`` that needs a tool the gateway left out: one naming it, or
    ``"required"`` when every tool was left out."""
    if choice == "required" and not upstream_tools:
        raise InvalidRequestError(
            "tool_choice is 'required' but this gateway cannot run any of the request's tools "
            f"({', '.join(sorted({str(t.get('type')) for t in dropped}))}), so they were left "
            "out.",
            param="tool_choice",
            code="invalid_value",
        )
    if not isinstance(choice, dict) or not isinstance(choice.get("type"), str):
        return
    kind = choice["type"]
    if _family(kind) in {_family(str(t.get("type"))) for t in dropped}:
        raise InvalidRequestError(
            f"tool_choice names the {kind} tool, which this gateway cannot run, so it was left "
            "out of the request.",
            param="tool_choice",
            code="invalid_value",
        )
