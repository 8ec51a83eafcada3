"""The tool-call event bus (``core.observe.ToolEvents``): delivery to sync and async hooks, in
order and off the loop's path; hooks that raise or overrun; a full queue; ``aclose``; and the
events the tool loop emits for calls that succeed, fail, time out or crash."""

from __future__ import annotations

import asyncio
import logging
import threading
from typing import Any

import pytest

from app.core.observe import (
    COMPLETED,
    FAILED,
    STARTED,
    ToolCallEvent,
    ToolEvents,
)
from app.core.tenancy import DEFAULT_TENANT
from app.protocol.requests import ParsedRequest
from tests.core.test_loop import BODY, FakeTool, add_tool, make_service
from tests.fakes import FakeClock, function_call, message

# A guard for tests whose hooks are released by the test itself: reaching it is a failure.
GUARD = 30.0


def event(n: int, kind: Any = STARTED) -> ToolCallEvent:
    return ToolCallEvent(type=kind, response_id="resp_1", round=1, tool=f"t{n}", item_id=f"i{n}")


class Gate:
    """An async hook that records each event and then waits until the test opens the gate."""

    def __init__(self) -> None:
        self.opened = asyncio.Event()
        self.entered: list[str] = []
        self.finished: list[str] = []

    async def __call__(self, e: ToolCallEvent) -> None:
        self.entered.append(e.tool)
        await self.opened.wait()
        self.finished.append(e.tool)


async def test_sync_and_async_hooks_get_every_event_in_order() -> None:
    sync_seen: list[str] = []
    async_seen: list[str] = []
    threads: set[str] = set()

    def sync_hook(e: ToolCallEvent) -> None:
        threads.add(threading.current_thread().name)
        sync_seen.append(e.tool)

    async def async_hook(e: ToolCallEvent) -> None:
        await asyncio.sleep(0)
        async_seen.append(e.tool)

    bus = ToolEvents([sync_hook, async_hook])
    for n in range(20):
        bus.emit(event(n))
    await bus.drain()
    expected = [f"t{n}" for n in range(20)]
    assert sync_seen == expected and async_seen == expected
    assert threads == {"tool-event-hook"}  # sync hooks never run on the event loop's thread
    assert bus.stats.delivered == 40 and bus.stats.dropped == 0
    await bus.aclose()


async def test_sync_hooks_share_a_few_threads_that_end_at_aclose() -> None:
    idents: set[int] = set()
    bus = ToolEvents([lambda e: idents.add(threading.get_ident())] * 3, hook_threads=2)
    for n in range(30):
        bus.emit(event(n))
    await bus.drain()
    assert 1 <= len(idents) <= 2 and bus.stats.delivered == 90
    await bus.aclose()
    for thread in [t for t in threading.enumerate() if t.ident in idents]:
        thread.join(GUARD)
        assert not thread.is_alive()


async def test_a_hook_that_raises_is_logged_and_the_others_go_on(
    caplog: pytest.LogCaptureFixture,
) -> None:
    seen: list[str] = []

    def broken(e: ToolCallEvent) -> None:
        raise RuntimeError(f"broken on {e.tool}")

    async def broken_async(e: ToolCallEvent) -> None:
        raise ValueError("async broken")

    bus = ToolEvents([broken, broken_async, lambda e: seen.append(e.tool)])
    with caplog.at_level(logging.ERROR, logger="app.core.observe"):
        for n in range(3):
            bus.emit(event(n))
        await bus.drain()
    assert seen == ["t0", "t1", "t2"]
    assert bus.stats.hook_failures == 6 and bus.stats.delivered == 3
    failures = [r for r in caplog.records if "failed" in r.getMessage()]
    assert len(failures) == 6 and failures[0].exc_info is not None
    await bus.aclose()


async def test_an_async_hook_past_its_timeout_is_abandoned_and_events_keep_flowing(
    caplog: pytest.LogCaptureFixture,
) -> None:
    stuck = Gate()  # never opened
    seen: list[str] = []
    bus = ToolEvents([stuck, lambda e: seen.append(e.tool)], hook_timeout=0.05)
    with caplog.at_level(logging.WARNING, logger="app.core.observe"):
        for n in range(3):
            bus.emit(event(n))
        async with asyncio.timeout(GUARD):
            await bus.drain()
    assert seen == ["t0", "t1", "t2"]
    assert stuck.entered == ["t0", "t1", "t2"] and stuck.finished == []  # each one cancelled
    assert bus.stats.hook_timeouts == 3 and bus.stats.delivered == 3
    assert sum("did not finish" in r.getMessage() for r in caplog.records) == 3
    await bus.aclose()


async def test_a_sync_hook_past_its_timeout_holds_only_its_thread() -> None:
    release = threading.Event()
    entered: list[str] = []

    def blocking(e: ToolCallEvent) -> None:
        entered.append(e.tool)
        release.wait(GUARD)

    seen: list[str] = []
    bus = ToolEvents([blocking, lambda e: seen.append(e.tool)], hook_timeout=0.05, hook_threads=8)
    try:
        for n in range(3):
            bus.emit(event(n))
        async with asyncio.timeout(GUARD):
            await bus.drain()
        assert seen == ["t0", "t1", "t2"] and entered == ["t0", "t1", "t2"]
        assert bus.stats.hook_timeouts == 3
    finally:
        release.set()
    await bus.aclose()


async def test_the_loop_does_not_wait_for_a_slow_hook() -> None:
    gate = Gate()
    bus = ToolEvents([gate], hook_timeout=3600)
    calls = [function_call("mcp__fake__add", '{"a":1,"b":2}') for _ in range(3)]
    service, _, _ = make_service([calls, [message("done")]], [add_tool()])
    service.tool_events = bus
    async with asyncio.timeout(GUARD):
        response = await service.create(ParsedRequest.from_body(BODY, tenant=DEFAULT_TENANT), {})
    # The response is complete while the hook has finished none of the six events.
    assert response["status"] == "completed"
    assert gate.finished == [] and len(gate.entered) <= 1
    gate.opened.set()
    async with asyncio.timeout(GUARD):
        await bus.drain()
    assert len(gate.finished) == 6 and bus.stats.dropped == 0
    await bus.aclose()


async def test_a_full_queue_drops_events_with_a_rate_limited_warning(
    caplog: pytest.LogCaptureFixture,
) -> None:
    gate = Gate()
    clock = FakeClock(0.0)
    bus = ToolEvents([gate], queue_size=2, clock=clock)
    with caplog.at_level(logging.WARNING, logger="app.core.observe"):
        for n in range(5):  # no await in between: the hook has not taken any yet
            bus.emit(event(n))
        assert bus.stats.dropped == 3
        clock.advance(10.0)
        bus.emit(event(5))
    warnings = [r.getMessage() for r in caplog.records if "dropped" in r.getMessage()]
    assert len(warnings) == 2  # the first drop, then one per interval with the sum since
    assert "dropped 1 event(s)" in warnings[0] and "dropped 3 event(s)" in warnings[1]
    assert "4 dropped in all" in warnings[1]
    gate.opened.set()
    async with asyncio.timeout(GUARD):
        await bus.drain()
    assert gate.finished == ["t0", "t1"]
    await bus.aclose()


async def test_aclose_delivers_what_is_queued_then_stops() -> None:
    seen: list[str] = []

    async def hook(e: ToolCallEvent) -> None:
        await asyncio.sleep(0)
        seen.append(e.tool)

    bus = ToolEvents([hook])
    for n in range(50):
        bus.emit(event(n))
    await bus.aclose()
    assert seen == [f"t{n}" for n in range(50)] and bus.stats.dropped == 0
    tasks = [t for t in asyncio.all_tasks() if t.get_name() == "tool-event-hooks"]
    assert tasks == []
    bus.emit(event(50))  # the bus stays usable: a new task delivers
    await bus.drain()
    assert seen[-1] == "t50"
    await bus.aclose()


async def test_aclose_gives_up_on_a_stuck_hook_and_counts_what_it_drops() -> None:
    gate = Gate()
    bus = ToolEvents([gate], hook_timeout=3600)
    for n in range(3):
        bus.emit(event(n))
    await asyncio.sleep(0)  # the task takes t0 and waits in the hook
    await bus.aclose(timeout=0.05)
    assert gate.entered == ["t0"] and gate.finished == []
    assert bus.stats.dropped == 3  # t0 cut short, t1 and t2 never handed over


async def test_unsubscribe_stops_delivery_and_no_hook_means_no_task() -> None:
    seen: list[str] = []
    bus = ToolEvents()
    bus.emit(event(0))
    assert not [t for t in asyncio.all_tasks() if t.get_name() == "tool-event-hooks"]
    unsubscribe = bus.subscribe(lambda e: seen.append(e.tool))
    bus.emit(event(1))
    await bus.drain()
    unsubscribe()
    unsubscribe()  # twice is harmless
    bus.emit(event(2))
    await bus.drain()
    assert seen == ["t1"] and bus.hooks == ()
    await bus.aclose()


def test_the_bus_moves_to_a_new_event_loop() -> None:
    seen: list[str] = []
    bus = ToolEvents([lambda e: seen.append(e.tool)])

    async def first() -> None:
        bus.emit(event(0))  # the loop ends before the hook gets it: asyncio.run cancels the task

    async def second() -> None:
        bus.emit(event(1))
        await bus.drain()

    asyncio.run(first())
    asyncio.run(second())
    assert seen == ["t1"] and bus.stats.dropped == 1


def test_emit_outside_an_event_loop_logs_and_counts_a_drop() -> None:
    bus = ToolEvents([lambda e: None])
    bus.emit(event(0))
    assert bus.stats.dropped == 1


def test_an_event_as_json_leaves_out_what_is_not_set() -> None:
    failed = ToolCallEvent(
        type=FAILED,
        response_id="resp_1",
        round=2,
        tool="t",
        item_id="i",
        ok=False,
        duration_ms=1.5,
        error_kind="timeout",
        message="slow",
        at=1.0,
    )
    assert failed.to_json() == {
        "type": "tool_call.failed",
        "response_id": "resp_1",
        "round": 2,
        "tool": "t",
        "item_id": "i",
        "at": 1.0,
        "ok": False,
        "duration_ms": 1.5,
        "error_kind": "timeout",
        "message": "slow",
    }


# ---------------------------------------------------------------- what the loop emits


async def run_with_events(tools: list[FakeTool], calls: int, **limits: Any) -> list[ToolCallEvent]:
    seen: list[ToolCallEvent] = []
    bus = ToolEvents([seen.append])
    script = [function_call(f"mcp__fake__{tools[0].tool}", "{}") for _ in range(calls)]
    service, _, _ = make_service([script, [message("done")]], tools, **limits)
    service.tool_events = bus
    await service.create(ParsedRequest.from_body(BODY, tenant=DEFAULT_TENANT), {})
    await bus.aclose()
    return seen


async def test_a_call_that_raises_is_a_failed_event_of_kind_exception() -> None:
    def crash(arguments: Any) -> Any:
        raise RuntimeError("the backend is on fire")

    seen = await run_with_events([FakeTool("add", crash)], 1)
    assert [e.type for e in seen] == [STARTED, FAILED]
    failed = seen[1]
    assert failed.ok is False and failed.error_kind == "exception"
    assert failed.message is not None and "on fire" in failed.message
    assert failed.duration_ms is not None and failed.preview is None


async def test_a_call_past_its_timeout_is_a_failed_event_of_kind_timeout() -> None:
    async def hang(arguments: Any) -> Any:
        await asyncio.Event().wait()

    seen = await run_with_events([FakeTool("add", hang)], 1, call_timeout=0.01)
    assert [e.type for e in seen] == [STARTED, FAILED]
    assert seen[1].error_kind == "timeout" and "timed out" in (seen[1].message or "")


async def test_parallel_calls_each_start_then_complete_with_a_preview() -> None:
    seen = await run_with_events([FakeTool("add", lambda a: "x" * 1000)], 3)
    assert sorted(e.type for e in seen) == [COMPLETED] * 3 + [STARTED] * 3
    for item_id in {e.item_id for e in seen}:
        mine = [e.type for e in seen if e.item_id == item_id]
        assert mine == [STARTED, COMPLETED]
    preview = next(e.preview for e in seen if e.type == COMPLETED)
    assert preview is not None and len(preview) == 200 and preview.endswith("…")
