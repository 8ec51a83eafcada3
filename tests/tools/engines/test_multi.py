"""``MultiEngine`` routes by namespace, in parallel across engines, results in call order;
``ToolSessions`` persists the multi engine's state between batches."""

from __future__ import annotations

import asyncio

import orjson
import pytest

from app.core.engines import (
    EngineCall,
    SessionExistsError,
    ToolEngine,
    ToolSpec,
    UnknownSessionError,
    history_of,
)
from app.core.tenancy import DEFAULT_TENANT
from app.core.tool_sessions import ToolSessions
from app.tools.engines.multi import MultiEngine, Route
from tests.tools.engines.recording_engine import RecordingEngine


def call(namespace: str, tool: str, n: int) -> EngineCall:
    return EngineCall(f"call_{n}", ToolSpec(namespace, tool), orjson.dumps({"n": n}).decode())


def engines(delay: float = 0.0) -> tuple[RecordingEngine, RecordingEngine, MultiEngine]:
    rest, lm = RecordingEngine("rest", delay), RecordingEngine("lm", delay)
    multi = MultiEngine(
        {
            "crm": Route("rest", rest),
            "billing": Route("rest", rest),
            "weather": Route("lm", lm),
            "dry": Route("rest", rest, "simulate"),
        }
    )
    return rest, lm, multi


def test_every_engine_keeps_the_contract() -> None:
    for engine in (*engines()[:2], engines()[2]):
        assert isinstance(engine, ToolEngine)


async def test_calls_route_by_namespace_in_order_and_engines_run_in_parallel() -> None:
    rest, lm, multi = engines(delay=0.05)
    await multi.setup("s1")
    calls = [call("weather", "today", 0), call("crm", "create", 1), call("billing", "pay", 2)]
    results = await multi.execute("s1", calls)
    outputs = [orjson.loads(r.output) for r in results]
    assert [r.call_id for r in results] == ["call_0", "call_1", "call_2"]
    assert [(o["engine"], o["tool"], o["arguments"]["n"]) for o in outputs] == [
        ("lm", "weather::today", 0),
        ("rest", "crm::create", 1),
        ("rest", "billing::pay", 2),
    ]
    # One batch per engine (crm and billing share the rest engine: one session, one world).
    assert [[c.call_id for c in b.calls] for b in rest.batches] == [["call_1", "call_2"]]
    assert [[c.call_id for c in b.calls] for b in lm.batches] == [["call_0"]]
    # Within the rest batch the later call saw the earlier one.
    assert [o["seen"] for o in outputs] == [0, 0, 1]
    # The two engines run at the same time: each waits for the other at a barrier.
    rest.barrier = lm.barrier = asyncio.Barrier(2)
    await multi.execute("s1", calls)
    state = multi.get_session_state("s1")
    assert len(history_of(state["engines"]["rest"])) == 4
    assert len(history_of(state["engines"]["lm"])) == 2


async def test_a_simulate_namespace_and_a_dry_run_leave_the_session_unchanged() -> None:
    rest, _, multi = engines()
    await multi.setup("s1")
    results = await multi.execute("s1", [call("dry", "delete", 0), call("crm", "read", 1)])
    assert [orjson.loads(r.output)["mode"] for r in results] == ["simulate", "execute"]
    before = multi.get_session_state("s1")
    assert len(history_of(before["engines"]["rest"])) == 1  # only the executed call
    dry = await multi.simulate("s1", [call("crm", "create", 2), call("weather", "x", 3)])
    assert [orjson.loads(r.output)["mode"] for r in dry] == ["simulate", "simulate"]
    assert multi.get_session_state("s1") == before
    assert [b.mode for b in rest.batches] == ["execute", "simulate", "simulate"]


async def test_unknown_namespaces_and_failing_engines_are_failed_results() -> None:
    class Broken(RecordingEngine):
        async def execute(self, session_id, calls):  # type: ignore[no-untyped-def]
            raise RuntimeError("boom")

    multi = MultiEngine(
        {"ok": Route("ok", RecordingEngine("ok")), "bad": Route("bad", Broken("bad"))}
    )
    await multi.setup("s")
    results = await multi.execute(
        "s",
        [call("nowhere", "x", 0), call("bad", "y", 1), call("ok", "fail", 2), call("ok", "z", 3)],
    )
    assert [r.error.kind if r.error else None for r in results] == [
        "unknown_namespace",
        "engine_error",
        "tool_error",
        None,
    ]
    assert "boom" in results[1].model_text and results[0].model_text.startswith("Error: ")


async def test_sessions_follow_the_contract() -> None:
    _, _, multi = engines()
    await multi.setup("s")
    with pytest.raises(SessionExistsError):
        await multi.setup("s")
    await multi.teardown("s")
    await multi.teardown("s")  # unknown: a no-op
    with pytest.raises(UnknownSessionError):
        await multi.execute("s", [call("crm", "x", 0)])


async def test_tool_sessions_persist_between_batches_and_dry_runs_are_not_saved() -> None:
    rest, _, multi = engines()
    sessions = ToolSessions(multi)
    await sessions.run("conv_1", [call("crm", "create", 0)], tenant=DEFAULT_TENANT)
    await sessions.run("conv_1", [call("crm", "create", 1)], tenant=DEFAULT_TENANT)
    again = await sessions.run(
        "conv_1", [call("crm", "read", 2)], simulate=True, tenant=DEFAULT_TENANT
    )
    assert orjson.loads(again[0].output)["seen"] == 2  # the simulation saw the saved world
    state = await sessions.state("conv_1", tenant=DEFAULT_TENANT)
    assert state is not None and len(history_of(state["engines"]["rest"])) == 2
    # Another conversation is another world; no session stays set up between batches.
    other = await sessions.run("conv_2", [call("crm", "read", 3)], tenant=DEFAULT_TENANT)
    assert orjson.loads(other[0].output)["seen"] == 0
    assert not rest.book.live("conv_1") and not rest.book.live("conv_2")


async def test_one_session_id_of_two_tenants_is_two_sessions() -> None:
    _, _, multi = engines()
    sessions = ToolSessions(multi)
    await sessions.run("conv_1", [call("crm", "create", 0)], tenant="acme")

    theirs = await sessions.run("conv_1", [call("crm", "read", 1)], tenant="globex")
    mine = await sessions.run("conv_1", [call("crm", "read", 2)], tenant="acme")

    assert orjson.loads(theirs[0].output)["seen"] == 0  # globex's world is its own
    assert orjson.loads(mine[0].output)["seen"] == 1
    state = await sessions.state("conv_1", tenant="globex")
    assert state is not None and len(history_of(state["engines"]["rest"])) == 1


async def test_concurrent_batches_of_one_session_run_one_at_a_time() -> None:
    rest, _, multi = engines(delay=0.02)
    sessions = ToolSessions(multi)
    await asyncio.gather(
        *(sessions.run("c", [call("crm", "x", n)], tenant=DEFAULT_TENANT) for n in range(5))
    )
    assert rest.most_running == 1
    state = await sessions.state("c", tenant=DEFAULT_TENANT)
    assert state is not None and len(history_of(state["engines"]["rest"])) == 5
