"""``app.plugins``: objects named by a ``package.module:attribute`` path, and tool-call event
hooks from configuration and from the ``respgate.tool_hooks`` entry point group of an
installed distribution, delivered through ``core.observe.ToolEvents``."""

from __future__ import annotations

import importlib
from collections.abc import Iterator
from pathlib import Path

import pytest

from app.core.observe import COMPLETED, STARTED, ToolCallEvent, ToolEvents
from app.plugins import (
    TOOL_HOOKS_GROUP,
    PluginError,
    entry_points_of,
    load_callable,
    load_hooks,
    load_object,
)
from tests.plugin_dists import Site, installed_site

RECORDER = """
SEEN = []
ASYNC_SEEN = []


def record(event):
    SEEN.append((event.type, event.tool))


async def record_async(event):
    ASYNC_SEEN.append(event.type)


class Sink:
    @staticmethod
    def write(event):
        SEEN.append(("sink", event.tool))


NOT_CALLABLE = 42
"""


@pytest.fixture
def site(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Site]:
    yield from installed_site(tmp_path, monkeypatch)


def recorder(site: Site, entry_points: dict[str, str] | None = None) -> str:
    module = site.module_name("respgate_recorder")
    points = {k: f"{module}:{v}" for k, v in (entry_points or {}).items()}
    site.install("respgate-recorder", {module: RECORDER}, {TOOL_HOOKS_GROUP: points})
    return module


def test_load_object_follows_a_dotted_attribute(site: Site) -> None:
    module = recorder(site)
    assert load_object(f"{module}:NOT_CALLABLE") == 42
    write = load_callable(f"{module}:Sink.write")
    assert write is importlib.import_module(module).Sink.write


@pytest.mark.parametrize(
    ("path", "error"),
    [
        ("no_colon_here", "is not a 'package.module:attribute' path"),
        ("module:", "is not a 'package.module:attribute' path"),
        ("respgate_no_such_module_x:hook", "importing 'respgate_no_such_module_x' failed"),
        ("app.plugins:no_such_hook", "'no_such_hook' not found"),
    ],
)
def test_a_path_that_does_not_load_is_a_clear_error(path: str, error: str) -> None:
    with pytest.raises(PluginError) as caught:
        load_object(path)
    assert repr(path) in str(caught.value) and error in str(caught.value)
    assert isinstance(caught.value, ValueError)


def test_a_hook_must_be_callable(site: Site) -> None:
    module = recorder(site)
    with pytest.raises(PluginError, match="is a int, not a callable"):
        load_hooks([f"{module}:NOT_CALLABLE"], entry_points=False)


async def test_hooks_from_configuration_and_entry_points_get_the_events(site: Site) -> None:
    module = recorder(site, {"recorder": "record", "async-recorder": "record_async"})
    assert [p.name for p in entry_points_of(TOOL_HOOKS_GROUP)] == ["async-recorder", "recorder"]
    hooks = load_hooks([f"{module}:Sink.write"])
    assert [name for name, _ in hooks] == [
        f"{module}:Sink.write",
        f"entry point 'async-recorder' of respgate-recorder ({TOOL_HOOKS_GROUP}: "
        f"{module}:record_async)",
        f"entry point 'recorder' of respgate-recorder ({TOOL_HOOKS_GROUP}: {module}:record)",
    ]
    bus = ToolEvents(hook for _, hook in hooks)
    for kind in (STARTED, COMPLETED):
        bus.emit(ToolCallEvent(type=kind, response_id="r", round=1, tool="crm", item_id="i"))
    await bus.aclose()
    loaded = importlib.import_module(module)
    assert sorted(loaded.SEEN) == sorted(
        [("sink", "crm"), ("sink", "crm"), (STARTED, "crm"), (COMPLETED, "crm")]
    )
    assert loaded.ASYNC_SEEN == [STARTED, COMPLETED]
    assert bus.stats.delivered == 6


def test_a_broken_hook_entry_point_names_itself(site: Site) -> None:
    module = site.module_name("respgate_bad_hook")
    site.install(
        "respgate-bad-hook",
        {module: "raise RuntimeError('misconfigured')\n"},
        {TOOL_HOOKS_GROUP: {"bad": f"{module}:hook"}},
    )
    with pytest.raises(PluginError, match=r"entry point 'bad' of respgate-bad-hook.*misconfigured"):
        load_hooks()
