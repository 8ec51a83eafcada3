"""Plugins: Python objects an operator names in configuration, or that an installed package
offers through an entry point.

``load_object("package.module:attribute")`` imports one object (``attribute`` may be dotted:
``module:Class.method``); a path that cannot be loaded is a ``PluginError`` (a ``ValueError``)
naming it. Two entry point groups (``[project.entry-points."respgate.tool_hooks"]`` in a
package's ``pyproject.toml``):

- ``respgate.tool_hooks``: each entry point is a tool-call event hook, a callable that takes a
  ``core.observe.ToolCallEvent`` (a plain function or an ``async def``);
- ``respgate.tool_engines``: each entry point is a tool engine factory; its name is the engine
  ``kind`` the configuration selects (``tools.engines.registry.EngineRegistry``).

Only the standard library: any layer may use this module.
"""

from __future__ import annotations

import importlib
import importlib.metadata
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

TOOL_HOOKS_GROUP = "respgate.tool_hooks"
TOOL_ENGINES_GROUP = "respgate.tool_engines"


class PluginError(ValueError):
    """A plugin that cannot be loaded; the message names it."""


def load_object(path: str) -> Any:
    """The object ``path`` (``package.module:attribute``) names."""
    module_name, sep, attribute = path.strip().partition(":")
    if not sep or not module_name or not attribute:
        raise PluginError(f"{path!r} is not a 'package.module:attribute' path")
    try:
        target: Any = importlib.import_module(module_name)
    except Exception as exc:  # ImportError, or whatever the module raised on import
        raise PluginError(f"cannot load {path!r}: importing {module_name!r} failed: {exc}") from exc
    for part in attribute.split("."):
        try:
            target = getattr(target, part)
        except AttributeError:
            raise PluginError(f"cannot load {path!r}: {part!r} not found") from None
    return target


def load_callable(path: str) -> Callable[..., Any]:
    """``load_object(path)``, which must be callable."""
    target = load_object(path)
    if not callable(target):
        raise PluginError(f"{path!r} is a {type(target).__name__}, not a callable")
    return target  # type: ignore[no-any-return]


@dataclass(frozen=True, slots=True)
class Plugin:
    """One entry point of a group, not loaded yet."""

    group: str
    name: str
    value: str
    distribution: str | None
    entry_point: importlib.metadata.EntryPoint = field(repr=False, compare=False)

    def describe(self) -> str:
        origin = f" of {self.distribution}" if self.distribution else ""
        return f"entry point {self.name!r}{origin} ({self.group}: {self.value})"

    def load(self) -> Any:
        try:
            return self.entry_point.load()
        except Exception as exc:
            raise PluginError(f"cannot load {self.describe()}: {exc}") from exc

    def load_callable(self) -> Callable[..., Any]:
        target = self.load()
        if not callable(target):
            raise PluginError(f"{self.describe()} is a {type(target).__name__}, not a callable")
        return target  # type: ignore[no-any-return]


def entry_points_of(group: str) -> list[Plugin]:
    """The entry points of ``group`` in the installed distributions, by name (a distribution
    found twice on ``sys.path`` counts once)."""
    seen: dict[tuple[str, str], Plugin] = {}
    for entry in importlib.metadata.entry_points(group=group):
        dist = entry.dist.name if entry.dist is not None else None
        plugin = Plugin(group, entry.name, entry.value, dist, entry)
        seen.setdefault((entry.name, entry.value), plugin)
    return sorted(seen.values(), key=lambda p: (p.name, p.value))


def load_hooks(
    paths: Iterable[str] = (), *, entry_points: bool = True
) -> list[tuple[str, Callable[..., Any]]]:
    """The tool-call event hooks: those ``paths`` name (configuration), then, with
    ``entry_points``, those of the ``respgate.tool_hooks`` group; each with a name for logs.
    A hook that cannot be loaded is a ``PluginError``."""
    hooks = [(path, load_callable(path)) for path in paths]
    if entry_points:
        hooks.extend((p.describe(), p.load_callable()) for p in entry_points_of(TOOL_HOOKS_GROUP))
    return hooks
