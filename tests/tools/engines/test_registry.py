"""``EngineRegistry``: kinds registered by the caller and found through the
``respgate.tool_engines`` entry point group of an installed distribution, the checks on what a
factory returns, and the ``EngineContext`` factories get (engines defined earlier, paths,
secrets, the upstream)."""

from __future__ import annotations

import logging
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import pytest

from app.core.engines import EngineCall, EngineResult, ToolEngine, ToolSpec
from app.core.session_book import SessionBook
from app.protocol.json_types import JsonObject
from app.tools.engines.registry import (
    EngineConfigError,
    EngineContext,
    EngineDefinition,
    EngineRegistry,
)
from tests.fakes import ScriptedUpstream
from tests.plugin_dists import Site, installed_site

# A third-party engine package as a user would write it: it imports only respgate's contract.
ECHO_ENGINE = '''
from app.core.engines import EngineResult
from app.core.session_book import SessionBook


class EchoEngine:
    """Answers each call with its tool name, the arguments and how many calls came before."""

    def __init__(self, name, prefix):
        self.name = name
        self.prefix = prefix
        self.book = SessionBook()

    async def setup(self, session_id, state=None):
        self.book.setup(session_id, state)

    async def execute(self, session_id, calls):
        results = []
        for call in calls:
            before = len(self.book.history(session_id))
            output = f"{self.prefix}{call.tool.name}#{before}:{call.arguments}"
            result = EngineResult(call_id=call.call_id, output=output)
            self.book.record(session_id, call, result)
            results.append(result)
        return results

    async def simulate(self, session_id, calls):
        snapshot = self.book.snapshot(session_id)
        try:
            return await self.execute(session_id, calls)
        finally:
            self.book.restore(session_id, snapshot)

    async def teardown(self, session_id):
        self.book.teardown(session_id)

    def get_session_state(self, session_id):
        return self.book.state(session_id)


def create(name, options, context):
    return EchoEngine(name, options.get("prefix", ""))
'''


@pytest.fixture
def site(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Site]:
    yield from installed_site(tmp_path, monkeypatch)


class MemoEngine:
    """A built-in-style engine for these tests; ``delegate`` is another engine it wraps."""

    def __init__(self, delegate: ToolEngine | None = None) -> None:
        self.delegate = delegate
        self.book = SessionBook()

    async def setup(self, session_id: str, state: JsonObject | None = None) -> None:
        self.book.setup(session_id, state)

    async def execute(self, session_id: str, calls: Sequence[EngineCall]) -> list[EngineResult]:
        return [EngineResult(call_id=c.call_id, output="memo") for c in calls]

    async def simulate(self, session_id: str, calls: Sequence[EngineCall]) -> list[EngineResult]:
        return await self.execute(session_id, calls)

    async def teardown(self, session_id: str) -> None:
        self.book.teardown(session_id)

    def get_session_state(self, session_id: str) -> JsonObject:
        return self.book.state(session_id)


def memo(name: str, options: Mapping[str, Any], context: EngineContext) -> ToolEngine:
    delegate = options.get("delegate")
    return MemoEngine(context.engine(delegate) if delegate else None)


def call(n: int, tool: str = "lookup") -> EngineCall:
    return EngineCall(f"call_{n}", ToolSpec(namespace="crm", name=tool), f'{{"n": {n}}}')


def install_echo(site: Site, kind: str = "echo") -> None:
    module = site.module_name("respgate_echo")
    site.install(
        "respgate-echo",
        {module: ECHO_ENGINE},
        {"respgate.tool_engines": {kind: f"{module}:create"}},
    )


async def test_an_installed_engine_package_is_found_and_built(site: Site) -> None:
    install_echo(site)
    registry = EngineRegistry({"memo": memo})
    assert registry.load_entry_points() == ["echo"]
    assert registry.kinds == ["echo", "memo"] and "echo" in registry
    engine = registry.create("shouty", "echo", {"prefix": ">"}, EngineContext())
    assert isinstance(engine, ToolEngine)
    await engine.setup("s1")
    results = await engine.execute("s1", [call(1), call(2, "update")])
    assert [r.output for r in results] == ['>lookup#0:{"n": 1}', '>update#1:{"n": 2}']
    simulated = await engine.simulate("s1", [call(3)])
    assert simulated[0].output == '>lookup#2:{"n": 3}'
    assert len(engine.get_session_state("s1")["history"]) == 2  # simulate left no trace


async def test_an_entry_point_never_takes_over_a_registered_kind(
    site: Site, caplog: pytest.LogCaptureFixture
) -> None:
    install_echo(site, kind="memo")
    registry = EngineRegistry({"memo": memo})
    with caplog.at_level(logging.WARNING, logger="app.tools.engines.registry"):
        assert registry.load_entry_points() == []
    assert "respgate-echo" in caplog.text and "registered already" in caplog.text
    assert isinstance(registry.create("m", "memo", {}, EngineContext()), MemoEngine)


def test_a_broken_entry_point_fails_when_its_kind_is_used_and_says_which(site: Site) -> None:
    module = site.module_name("respgate_broken")
    site.install(
        "respgate-broken",
        {module: "raise ImportError('needs a library that is not installed')\n"},
        {"respgate.tool_engines": {"broken": f"{module}:create"}},
    )
    registry = EngineRegistry()
    assert registry.load_entry_points() == ["broken"]  # loading is deferred
    with pytest.raises(EngineConfigError) as caught:
        registry.create("inventory", "broken", {}, EngineContext())
    message = str(caught.value)
    assert "engine 'inventory' (kind 'broken')" in message
    assert "respgate-broken" in message and "not installed" in message


def test_an_unknown_kind_names_the_engine_and_the_known_kinds() -> None:
    registry = EngineRegistry({"memo": memo})
    with pytest.raises(EngineConfigError, match=r"engine 'crm' \(kind 'soap'\).*known kinds: memo"):
        registry.create("crm", "soap", {}, EngineContext())


class HalfEngine:
    async def execute(self, session_id: str, calls: Sequence[EngineCall]) -> list[EngineResult]:
        return []


class SyncEngine(MemoEngine):
    def setup(self, session_id: str, state: JsonObject | None = None) -> None:  # type: ignore[override]
        self.book.setup(session_id, state)


async def make_later(name: str, options: Mapping[str, Any], context: EngineContext) -> Any:
    return MemoEngine()


@pytest.mark.parametrize(
    ("factory", "problem"),
    [
        (lambda name, options, context: HalfEngine(), "a HalfEngine, not a ToolEngine (missing: "),
        (lambda name, options, context: SyncEngine(), "whose setup must be async"),
        (make_later, "an awaitable"),
    ],
)
def test_a_factory_must_return_a_tool_engine(factory: Any, problem: str) -> None:
    registry = EngineRegistry({"odd": factory})
    with pytest.raises(EngineConfigError) as caught:
        registry.create("weird", "odd", {}, EngineContext())
    assert str(caught.value).startswith("engine 'weird' (kind 'odd'): the factory returned ")
    assert problem in str(caught.value)


def test_a_failing_factory_is_reported_with_the_engine_and_its_cause() -> None:
    def needs_url(name: str, options: Mapping[str, Any], context: EngineContext) -> ToolEngine:
        raise KeyError("base_url")

    registry = EngineRegistry({"rest": needs_url})
    with pytest.raises(EngineConfigError, match=r"engine 'billing' \(kind 'rest'\): 'base_url'"):
        registry.create("billing", "rest", {}, EngineContext())


def test_a_kind_is_registered_once() -> None:
    registry = EngineRegistry({"memo": memo})
    with pytest.raises(ValueError, match="already registered"):
        registry.register("memo", memo)
    with pytest.raises(ValueError, match="non-empty string"):
        registry.register("", memo)


def test_engines_see_the_ones_defined_before_them() -> None:
    registry = EngineRegistry({"memo": memo})
    engines = registry.create_all(
        [
            EngineDefinition("simulator", "memo"),
            EngineDefinition("crm", "memo", {"delegate": "simulator"}),
        ],
        EngineContext(),
    )
    crm = engines["crm"]
    assert isinstance(crm, MemoEngine) and crm.delegate is engines["simulator"]
    with pytest.raises(EngineConfigError, match=r"no engine 'later'.*defined so far: first"):
        registry.create_all(
            [
                EngineDefinition("first", "memo"),
                EngineDefinition("x", "memo", {"delegate": "later"}),
            ],
            EngineContext(),
        )
    with pytest.raises(EngineConfigError, match="'first' is defined twice"):
        registry.create_all(
            [EngineDefinition("first", "memo"), EngineDefinition("first", "memo")], EngineContext()
        )


def test_the_context_resolves_paths_secrets_and_the_upstream(tmp_path: Path) -> None:
    upstream = ScriptedUpstream([])
    context = EngineContext(upstream=upstream, environ={"CRM_TOKEN": "s3cret"}, base_dir=tmp_path)
    assert context.path("specs/crm.yaml") == tmp_path / "specs" / "crm.yaml"
    assert context.path("/etc/ca.pem") == Path("/etc/ca.pem")
    assert context.secret("CRM_TOKEN") == "s3cret"
    with pytest.raises(EngineConfigError, match="'MISSING' is not set"):
        context.secret("MISSING")
    assert context.require_upstream() is upstream
    with pytest.raises(EngineConfigError, match="needs an upstream"):
        EngineContext().require_upstream()
