"""``EngineRegistry``: engine kinds and the factories that build engines of them.

A configuration defines engines by name, each of a ``kind`` with its own options
(``EngineDefinition``). The registry maps each kind to an ``EngineFactory``: the caller
registers the built-in kinds (``register``), and ``load_entry_points`` adds those of installed
packages (entry point group ``respgate.tool_engines``; the entry point's name is the kind, its
object the factory, loaded when an engine of that kind is first built). A built-in kind cannot
be taken over by an entry point.

A factory is called as ``factory(name, options, context)`` and returns a
``core.engines.ToolEngine``. The ``EngineContext`` holds what a factory may need: the kernel's
``Upstream`` port (for engines that ask a model), the environment (secrets), the directory
relative paths start from, the egress policy (``app.net.egress``: where an engine may connect;
an engine trusts the destinations its own configuration names with ``egress.trusting``), and
the engines defined before this one (``context.engine(name)``:
a ``rest`` engine names the engine that simulates it). Every failure is an
``EngineConfigError`` naming the engine and its kind.
"""

from __future__ import annotations

import inspect
import logging
import os
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from app.core.engines import ToolEngine
from app.core.ports import Upstream
from app.net.egress import EgressPolicy
from app.plugins import TOOL_ENGINES_GROUP, Plugin, PluginError, entry_points_of

logger = logging.getLogger(__name__)

ASYNC_METHODS = ("setup", "execute", "simulate", "teardown")


class EngineConfigError(ValueError):
    """An engine that cannot be built: an unknown kind, a factory that failed or returned
    something that is not a ``ToolEngine``, a reference to an engine not defined before."""


@dataclass(frozen=True, slots=True)
class EngineContext:
    """What an engine factory may use besides its options (see the module docstring)."""

    upstream: Upstream | None = None
    environ: Mapping[str, str] = field(default_factory=lambda: os.environ)
    base_dir: Path = field(default_factory=Path.cwd)
    engines: Mapping[str, ToolEngine] = field(default_factory=dict)
    egress: EgressPolicy = field(default_factory=EgressPolicy)

    def engine(self, name: str) -> ToolEngine:
        """The engine ``name``, defined before the one being built."""
        try:
            return self.engines[name]
        except KeyError:
            known = ", ".join(sorted(self.engines)) or "none"
            raise EngineConfigError(
                f"no engine {name!r} is defined before this one (defined so far: {known})"
            ) from None

    def path(self, value: str | Path) -> Path:
        """``value`` as a path, relative ones from ``base_dir``."""
        path = Path(value).expanduser()
        return path if path.is_absolute() else self.base_dir / path

    def secret(self, variable: str) -> str:
        """The value of environment variable ``variable`` (a missing one is an error that
        names the variable, never a value)."""
        value = self.environ.get(variable)
        if value is None:
            raise EngineConfigError(f"environment variable {variable!r} is not set")
        return value

    def require_upstream(self) -> Upstream:
        if self.upstream is None:
            raise EngineConfigError("this engine needs an upstream and none is configured")
        return self.upstream


EngineFactory = Callable[[str, Mapping[str, Any], EngineContext], ToolEngine]
"""``factory(name, options, context) -> ToolEngine``."""


@dataclass(frozen=True, slots=True)
class EngineDefinition:
    """One configured engine: its name, its kind and the kind's options."""

    name: str
    kind: str
    options: Mapping[str, Any] = field(default_factory=dict)


class EngineRegistry:
    """Engine kinds and their factories (see the module docstring)."""

    def __init__(self, factories: Mapping[str, EngineFactory] | None = None) -> None:
        self._factories: dict[str, EngineFactory] = {}
        self._plugins: dict[str, Plugin] = {}
        for kind, factory in (factories or {}).items():
            self.register(kind, factory)

    @property
    def kinds(self) -> list[str]:
        return sorted({*self._factories, *self._plugins})

    def __contains__(self, kind: object) -> bool:
        return kind in self._factories or kind in self._plugins

    def register(self, kind: str, factory: EngineFactory) -> None:
        """Make ``kind`` build engines with ``factory``; a kind is registered once."""
        if not kind or not isinstance(kind, str):
            raise ValueError(f"an engine kind is a non-empty string, not {kind!r}")
        if kind in self:
            raise ValueError(f"engine kind {kind!r} is already registered")
        if not callable(factory):
            raise ValueError(f"the factory of engine kind {kind!r} is not callable")
        self._factories[kind] = factory

    def load_entry_points(self, group: str = TOOL_ENGINES_GROUP) -> list[str]:
        """Add the kinds installed packages offer (entry point group ``group``); returns them.
        A kind registered already keeps its factory (the entry point is skipped with a
        warning); factories are loaded when first used."""
        added: list[str] = []
        for plugin in entry_points_of(group):
            if plugin.name in self:
                logger.warning(
                    "%s is ignored: engine kind %r is registered already",
                    plugin.describe(),
                    plugin.name,
                )
                continue
            self._plugins[plugin.name] = plugin
            added.append(plugin.name)
        return added

    def factory(self, kind: str) -> EngineFactory:
        """The factory of ``kind`` (an entry point's is loaded now)."""
        found = self._factories.get(kind)
        if found is not None:
            return found
        plugin = self._plugins.get(kind)
        if plugin is None:
            known = ", ".join(self.kinds) or "none"
            raise EngineConfigError(f"unknown engine kind {kind!r} (known kinds: {known})")
        try:
            loaded: EngineFactory = plugin.load_callable()
        except PluginError as exc:
            raise EngineConfigError(f"engine kind {kind!r}: {exc}") from exc
        del self._plugins[kind]
        self._factories[kind] = loaded
        return loaded

    def create(
        self, name: str, kind: str, options: Mapping[str, Any], context: EngineContext
    ) -> ToolEngine:
        """Build engine ``name`` of ``kind``; an ``EngineConfigError`` names both."""
        what = f"engine {name!r} (kind {kind!r})"
        try:
            factory = self.factory(kind)
        except EngineConfigError as exc:
            raise EngineConfigError(f"{what}: {exc}") from exc
        try:
            engine: object = factory(name, options, context)
        except Exception as exc:
            raise EngineConfigError(f"{what}: {exc}") from exc
        problem = _not_an_engine(engine)
        if problem is not None:
            raise EngineConfigError(f"{what}: the factory returned {problem}")
        assert isinstance(engine, ToolEngine)
        return engine

    def create_all(
        self, definitions: Iterable[EngineDefinition], context: EngineContext
    ) -> dict[str, ToolEngine]:
        """Build ``definitions`` in order; each sees the ones before it
        (``context.engine(name)``) besides ``context.engines``."""
        built: dict[str, ToolEngine] = dict(context.engines)
        scoped = replace(context, engines=built)
        for definition in definitions:
            if definition.name in built:
                raise EngineConfigError(f"engine {definition.name!r} is defined twice")
            built[definition.name] = self.create(
                definition.name, definition.kind, definition.options, scoped
            )
        return built


def _not_an_engine(engine: object) -> str | None:
    """Why ``engine`` is not a ``ToolEngine`` (``None``: it is one)."""
    if inspect.isawaitable(engine):
        close = getattr(engine, "close", None)
        if callable(close):
            close()  # a coroutine never awaited would warn
        return "an awaitable: an engine factory is a plain function that returns the engine"
    kind = type(engine).__name__
    if not isinstance(engine, ToolEngine):
        missing = [
            m
            for m in (*ASYNC_METHODS, "get_session_state")
            if not callable(getattr(engine, m, None))
        ]
        return f"a {kind}, not a ToolEngine (missing: {', '.join(missing)})"
    plain = [m for m in ASYNC_METHODS if not inspect.iscoroutinefunction(getattr(engine, m))]
    if plain:
        return f"a {kind} whose {', '.join(plain)} must be async (async def)"
    return None
