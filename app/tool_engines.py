"""Builds the gateway's tool engines and namespaces from the settings.

Engines (``[tool_engines.<name>]``) are built once, in the order they are configured, and
shared by every tool set that names them; the built-in engine ``mcp`` runs the ``[mcp]``
servers. Each tool set (``[[tool_sets]]``, and every ``[mcp]`` server no tool set names)
becomes a ``core.engines.Namespace``; a ``multi.MultiEngine`` routes each call to its
namespace's engine and ``core.tool_sessions.ToolSessions`` keeps the sessions in the store.
"""

from __future__ import annotations

import contextlib
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from app.core.engines import Namespace, ToolEngine, ToolSessionStore, ToolSet
from app.core.ports import Upstream
from app.core.tool_sessions import ToolSessions
from app.options.secrets import secret_environ
from app.settings import Settings
from app.tool_settings import ToolSetConfig
from app.tools.engines.lm import create_lm_engine
from app.tools.engines.multi import MultiEngine, Route
from app.tools.engines.registry import EngineContext, EngineDefinition, EngineRegistry
from app.tools.engines.rest import create_rest_engine
from app.tools.engines.toolsets import FileToolSet, OpenApiToolSet
from app.tools.mcp.engine import McpEngine, McpToolSet
from app.tools.mcp.pool import McpSessionPool

MCP_ENGINE = "mcp"


@dataclass(slots=True)
class ToolEngines:
    """What the MCP provider needs: the namespaces and the sessions of their engines."""

    namespaces: dict[str, Namespace]
    sessions: ToolSessions | None
    pool: McpSessionPool
    engines: dict[str, ToolEngine] = field(default_factory=dict)
    resources: contextlib.AsyncExitStack = field(default_factory=contextlib.AsyncExitStack)


def build_tool_engines(
    settings: Settings,
    *,
    upstream: Upstream | None = None,
    store: ToolSessionStore | None = None,
    environ: Mapping[str, str] | None = None,
    base_dir: Path | None = None,
) -> ToolEngines:
    """The engines, namespaces and session runner of ``settings`` (``store`` keeps the
    sessions; ``None``: in memory). Raises ValueError naming what is misconfigured."""
    env = secret_environ() if environ is None else environ
    base_dir = Path.cwd() if base_dir is None else base_dir
    mcp = settings.mcp
    egress = settings.egress.policy()
    pool = McpSessionPool(
        {server.label: server.to_spec(env) for server in mcp.servers},
        connect_timeout=mcp.connect_timeout,
        egress=egress,
    )
    built = ToolEngines(namespaces={}, sessions=None, pool=pool)
    built.resources.push_async_callback(pool.aclose)
    registry = engine_registry(pool, call_timeout=settings.tool_call_timeout)
    registry.load_entry_points()
    context = EngineContext(upstream=upstream, environ=env, base_dir=base_dir, egress=egress)
    if MCP_ENGINE not in settings.tool_engines:  # else the operator's [tool_engines.mcp]
        built.engines[MCP_ENGINE] = registry.create(MCP_ENGINE, MCP_ENGINE, {}, context)
    definitions = [
        EngineDefinition(name, config.kind, config.options())
        for name, config in settings.tool_engines.items()
    ]
    built.engines = registry.create_all(definitions, replace(context, engines=built.engines))
    for engine in built.engines.values():
        close = getattr(engine, "aclose", None)
        if callable(close):
            built.resources.push_async_callback(close)
    placed = {t.mcp_server for t in settings.tool_sets}
    for tool_set in settings.tool_sets:
        built.namespaces[tool_set.namespace] = Namespace(
            name=tool_set.namespace,
            engine=tool_set.engine,
            tools=_tool_set(tool_set, pool, base_dir),
            mode=tool_set.mode,
            allowed_tools=_tuple(tool_set.allowed_tools),
            require_approval=tool_set.require_approval,
            description=tool_set.description,
        )
    for server in mcp.servers:
        if server.label in placed:
            continue
        built.namespaces[server.label] = Namespace(
            name=server.label,
            engine=MCP_ENGINE,
            tools=McpToolSet(pool, server.label, server.label, list_timeout=30.0),
            allowed_tools=_tuple(server.allowed_tools),
            require_approval=server.require_approval,
            description=server.description,
        )
    routes = {
        name: Route(ns.engine, built.engines[ns.engine], ns.mode)
        for name, ns in built.namespaces.items()
    }
    if routes:
        built.sessions = ToolSessions(MultiEngine(routes), store)
    return built


def engine_registry(pool: McpSessionPool, *, call_timeout: float) -> EngineRegistry:
    """The built-in engine kinds: ``rest``, ``lm`` and ``mcp`` (the ``[mcp]`` servers'
    pool); ``rest`` and ``mcp`` take a ``simulator`` (an engine defined before them)."""

    def rest(name: str, options: Mapping[str, Any], context: EngineContext) -> ToolEngine:
        own = dict(options)
        simulator = _simulator(own.pop("simulator", None), context)
        return create_rest_engine(
            own, simulator=simulator, environ=context.environ, egress=context.egress
        )

    def lm(name: str, options: Mapping[str, Any], context: EngineContext) -> ToolEngine:
        return create_lm_engine(options, upstream=context.require_upstream())

    def mcp(name: str, options: Mapping[str, Any], context: EngineContext) -> ToolEngine:
        own = dict(options)
        simulator = _simulator(own.pop("simulator", None), context)
        if own:
            raise ValueError(f"unknown option(s) {', '.join(sorted(own))} (known: simulator)")
        return McpEngine(pool, call_timeout=call_timeout, simulator=simulator)

    return EngineRegistry({"rest": rest, "lm": lm, MCP_ENGINE: mcp})


def _simulator(wanted: object, context: EngineContext) -> ToolEngine | None:
    return None if wanted is None else context.engine(str(wanted))


def _tool_set(config: ToolSetConfig, pool: McpSessionPool, base_dir: Path) -> ToolSet:
    """The tool set's loader; a file is read and checked now, so a bad one stops start-up."""
    if config.mcp_server is not None:
        return McpToolSet(pool, config.mcp_server, config.namespace, list_timeout=30.0)
    if config.openapi is not None:
        document = OpenApiToolSet(
            base_dir / config.openapi,
            config.namespace,
            operations=config.operations,
            tags=config.tags,
            base_url=config.base_url,
        )
        document.load()
        return document
    assert config.file is not None  # validated: exactly one source
    specs = FileToolSet(base_dir / config.file, config.namespace)
    specs.load()
    return specs


def _tuple(values: list[str] | None) -> tuple[str, ...] | None:
    return tuple(values) if values is not None else None
