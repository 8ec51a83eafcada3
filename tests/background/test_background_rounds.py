"""A background tool-loop response whose process dies is continued by another process from its
last completed tool round (``core.checkpoint``), in-process: the dead run is dropped, its lease
lapses on a fake clock, and a second ``BackgroundResponses`` on the same store (in memory, and
SQLite) sweeps it up. A tool call whose result was logged after the checkpoint is never run
again: that job fails with a clear error."""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import pytest

from app.core.background import BackgroundOptions, BackgroundResponses
from app.core.engines import EngineCall, EngineResult, ToolSpec
from app.core.service import ResponsesService
from app.core.tenancy import DEFAULT_TENANT
from app.core.tool_sessions import ToolSessions
from app.core.tools import PreparedTools, ToolContext
from app.protocol.json_types import JsonObject
from app.protocol.requests import ParsedRequest
from app.store.engine import create_engine_for
from app.store.migrate import upgrade_to_head
from app.store.sql import SqlResponseStore
from tests.core.test_loop import FakeTool, FakeToolKit
from tests.fakes import ListEventStream, MemoryResponseStore, ScriptedUpstream, function_call
from tests.fakes import message as text_message

BODY: JsonObject = {
    "model": "m",
    "input": "add 2 and 3, then 4 and 5",
    "tools": [{"type": "fake"}],
    "background": True,
}
LEASE = 30.0


class Clock:
    def __init__(self) -> None:
        self.now = 1_750_000_000.0

    def __call__(self) -> float:
        return self.now


class CountingTool(FakeTool):
    """The tool server: every call it runs is counted; call number ``hang_at`` never
    returns (the process dies during it)."""

    def __init__(self, hang_at: int | None = None) -> None:
        super().__init__("add", self._add)
        self.calls: list[JsonObject] = []
        self.hang_at = hang_at
        self.hanging = asyncio.Event()

    async def _add(self, args: JsonObject) -> int:
        self.calls.append(args)
        if len(self.calls) == self.hang_at:
            self.hanging.set()
            await asyncio.Event().wait()
        return int(args["a"]) + int(args["b"])


class RunningTotal:
    """A ``ToolEngine`` with session state: the total of the numbers added so far."""

    def __init__(self) -> None:
        self.totals: dict[str, int] = {}

    async def setup(self, session_id: str, state: JsonObject | None = None) -> None:
        self.totals[session_id] = int((state or {}).get("total", 0))

    async def execute(self, session_id: str, calls: Sequence[EngineCall]) -> list[EngineResult]:
        results = []
        for call in calls:
            self.totals[session_id] += int(call.parsed_arguments()["n"])
            results.append(EngineResult(call.call_id, str(self.totals[session_id])))
        return results

    async def simulate(self, session_id: str, calls: Sequence[EngineCall]) -> list[EngineResult]:
        raise AssertionError("not simulated")

    async def teardown(self, session_id: str) -> None:
        self.totals.pop(session_id, None)

    def get_session_state(self, session_id: str) -> JsonObject:
        return {"total": self.totals[session_id]}


class SessionToolKit(FakeToolKit):
    """The ``add`` tool, and ``tally``: a running total kept in the run's tool session (in
    the store, through ``ToolSessions``: each process has its own engine)."""

    def __init__(self, tools: list[FakeTool], store: Any) -> None:
        self.sessions: list[str] = []
        self._tally = ToolSessions(RunningTotal(), store)
        super().__init__([*tools, FakeTool("tally", self._count)])

    async def _count(self, args: JsonObject) -> str:
        spec = ToolSpec("tally", "tally")
        call = EngineCall("c", spec, json.dumps(args))
        [result] = await self._tally.run(self.sessions[-1], [call], tenant=DEFAULT_TENANT)
        return result.output

    async def prepare(
        self,
        body: JsonObject,
        history: list[JsonObject],
        new_input: list[JsonObject],
        context: ToolContext | None = None,
    ) -> PreparedTools:
        assert context is not None
        self.sessions.append(context.session_id)
        return await super().prepare(body, history, new_input, context)


class DyingUpstream(ScriptedUpstream):
    """Answers its script, then hangs (the process dies while the upstream infers)."""

    def __init__(self, rounds: list[list[JsonObject]]) -> None:
        super().__init__(rounds)
        self.hanging = asyncio.Event()

    async def stream_response(
        self, body: JsonObject, headers: Mapping[str, str]
    ) -> ListEventStream:
        if not self.rounds:
            self.requests.append(body)
            self.hanging.set()
            await asyncio.Event().wait()
        return await super().stream_response(body, headers)


class HeldCheckpoints(MemoryResponseStore):
    """Saves checkpoints up to round ``last_round``; the next save never returns (the process
    dies after logging a round's tool results, before its checkpoint is written)."""

    def __init__(self, last_round: int) -> None:
        super().__init__()
        self.last_round = last_round
        self.held = asyncio.Event()

    async def save_checkpoint(
        self, response_id: str, owner: str, checkpoint: JsonObject, *, tenant: str
    ) -> bool:
        if int(checkpoint["round"]) > self.last_round:
            self.held.set()
            await asyncio.Event().wait()
        return await super().save_checkpoint(response_id, owner, checkpoint, tenant=tenant)


def add(a: int, b: int, call_id: str) -> JsonObject:
    return function_call("mcp__fake__add", f'{{"a": {a}, "b": {b}}}', call_id=call_id)


def tally(n: int) -> JsonObject:
    return function_call("mcp__fake__tally", f'{{"n": {n}}}')


@pytest.fixture(params=["memory", "sqlite"])
async def store(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Any]:
    if request.param == "memory":
        yield MemoryResponseStore()
        return
    url = f"sqlite+aiosqlite:///{tmp_path / 'respgate.db'}"
    await upgrade_to_head(url)
    sql = SqlResponseStore(create_engine_for(url))
    try:
        yield sql
    finally:
        await sql.aclose()


def gateway(
    store: Any, upstream: ScriptedUpstream, toolkit: FakeToolKit, owner: str, clock: Clock
) -> BackgroundResponses:
    service = ResponsesService(upstream, store, toolkit=toolkit, clock=clock)
    return BackgroundResponses(
        service, store, BackgroundOptions(lease_seconds=LEASE), owner=owner, clock=clock
    )


async def die(process: BackgroundResponses, response_id: str) -> None:
    """The process dies: its run stops where it is, nothing more is written, the lease stays
    until it lapses."""
    run = process._runs[response_id]
    task = run._task
    assert task is not None
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await task


async def followed(process: BackgroundResponses, response_id: str) -> list[JsonObject]:
    async with asyncio.timeout(30):
        return [e async for e in await process.stream(response_id, -1, tenant=DEFAULT_TENANT)]


async def test_a_job_continues_from_its_last_completed_tool_round(store: Any) -> None:
    clock, tool = Clock(), CountingTool()
    kit_a, kit_b = SessionToolKit([tool], store), SessionToolKit([tool], store)
    first = DyingUpstream([[add(2, 3, "call_1"), tally(5)]])
    a = gateway(store, first, kit_a, "process-a", clock)
    queued = await a.create(ParsedRequest.from_body(BODY, tenant=DEFAULT_TENANT), {})
    response_id = str(queued["id"])
    async with asyncio.timeout(30):
        await first.hanging.wait()  # round 2's inference: round 1's checkpoint is saved
    saved = await store.get_checkpoint(response_id, tenant=DEFAULT_TENANT)
    assert saved is not None and saved["round"] == 1
    await die(a, response_id)

    clock.now += LEASE * 2
    second = ScriptedUpstream([[add(4, 5, "call_2"), tally(9)], [text_message("5 and 9")]])
    b = gateway(store, second, kit_b, "process-b", clock)
    assert await b.sweep() == 1
    events = await followed(b, response_id)

    final = events[-1]["response"]
    assert events[-1]["type"] == "response.completed" and final["status"] == "completed"
    assert [i["type"] for i in final["output"]] == ["mcp_call"] * 4 + ["message"]
    assert [i["output"] for i in final["output"][:4]] == ["5", "5", "9", "14"]  # round 1's once
    # ``tally`` 14: process b's engine started from the session state process a left (5)
    assert tool.calls == [{"a": 2, "b": 3}, {"a": 4, "b": 5}]  # each call ran once
    # process b's first request is round 2's: it carries round 1's call and result
    resumed = second.requests[0]["input"]
    assert resumed[:-4] == first.requests[0]["input"]
    assert [i["type"] for i in resumed[-4:]] == ["function_call"] * 2 + ["function_call_output"] * 2
    assert (resumed[-2]["call_id"], resumed[-2]["output"]) == ("call_1", "5")
    assert len(second.requests) == 2
    # one log, its numbers unique and increasing; b's run starts at round 1's checkpoint
    numbers = [int(e["sequence_number"]) for e in events]
    assert numbers == sorted(set(numbers)) and numbers[0] == 0
    restart = next(
        e for e in events if e["type"] == "response.in_progress" and e["response"]["output"]
    )
    assert restart["sequence_number"] > saved["sequence_number"]
    assert restart["response"]["output"] == final["output"][:2]
    job = await store.get_job(response_id, tenant=DEFAULT_TENANT)
    assert job.status == "completed" and job.attempts == 2
    # finished: the checkpoint went
    assert await store.get_checkpoint(response_id, tenant=DEFAULT_TENANT) is None
    assert (await b.get(response_id, tenant=DEFAULT_TENANT)) == final
    # the continued run works in the same tool session (engines find its state in the store)
    assert kit_a.sessions == kit_b.sessions == [response_id]


async def test_a_tool_result_logged_after_the_checkpoint_fails_the_job() -> None:
    clock, tool = Clock(), CountingTool()
    store = HeldCheckpoints(last_round=1)
    first = ScriptedUpstream([[add(2, 3, "call_1")], [add(4, 5, "call_2")]])
    a = gateway(store, first, FakeToolKit([tool]), "process-a", clock)
    queued = await a.create(ParsedRequest.from_body(BODY, tenant=DEFAULT_TENANT), {})
    response_id = str(queued["id"])
    async with asyncio.timeout(30):
        await store.held.wait()  # round 2's result is logged, its checkpoint not yet saved
    await die(a, response_id)

    clock.now += LEASE * 2
    second = ScriptedUpstream([])
    b = gateway(store, second, FakeToolKit([tool]), "process-b", clock)
    assert await b.sweep() == 1
    events = await followed(b, response_id)

    assert [e["type"] for e in events[-2:]] == ["error", "response.failed"]
    message = events[-1]["response"]["error"]["message"]
    assert "could not be restarted" in message and "tool round" in message
    assert tool.calls == [{"a": 2, "b": 3}, {"a": 4, "b": 5}]  # never a third
    assert second.requests == []


async def test_a_job_whose_process_died_during_a_tool_call_is_failed_not_run_again() -> None:
    """Calls that started after the last checkpoint are marked before they start: a job whose
    process died during one is failed, and no call runs a second time."""
    clock, tool = Clock(), CountingTool(hang_at=2)
    store = MemoryResponseStore()
    first = ScriptedUpstream([[add(2, 3, "call_1")], [add(4, 5, "call_2")]])
    a = gateway(store, first, FakeToolKit([tool]), "process-a", clock)
    queued = await a.create(ParsedRequest.from_body(BODY, tenant=DEFAULT_TENANT), {})
    response_id = str(queued["id"])
    async with asyncio.timeout(30):
        await tool.hanging.wait()  # round 2's call runs; round 1's checkpoint is saved
    saved = await store.get_checkpoint(response_id, tenant=DEFAULT_TENANT)
    assert saved["round"] == 1 and saved["calls_started"] is True
    await die(a, response_id)

    clock.now += LEASE * 2
    second = ScriptedUpstream([[add(4, 5, "call_3")], [text_message("5 and 9")]])
    b = gateway(store, second, FakeToolKit([tool]), "process-b", clock)
    assert await b.sweep() == 1
    events = await followed(b, response_id)

    assert [e["type"] for e in events[-2:]] == ["error", "response.failed"]
    message = events[-1]["response"]["error"]["message"]
    assert "started tool calls" in message and "twice" in message
    assert tool.calls == [{"a": 2, "b": 3}, {"a": 4, "b": 5}]  # call 2 never a second time
    assert second.requests == []


async def test_a_job_whose_process_died_during_its_first_tool_call_is_failed() -> None:
    """Before any checkpoint: the start of the first round's calls is marked too."""
    clock, tool = Clock(), CountingTool(hang_at=1)
    store = MemoryResponseStore()
    first = ScriptedUpstream([[add(2, 3, "call_1")]])
    a = gateway(store, first, FakeToolKit([tool]), "process-a", clock)
    queued = await a.create(ParsedRequest.from_body(BODY, tenant=DEFAULT_TENANT), {})
    response_id = str(queued["id"])
    async with asyncio.timeout(30):
        await tool.hanging.wait()
    saved = await store.get_checkpoint(response_id, tenant=DEFAULT_TENANT)
    assert saved["round"] == 0 and saved["calls_started"] is True and saved["output"] == []
    await die(a, response_id)

    clock.now += LEASE * 2
    second = ScriptedUpstream([[add(2, 3, "call_9")], [text_message("5")]])
    b = gateway(store, second, FakeToolKit([tool]), "process-b", clock)
    assert await b.sweep() == 1
    events = await followed(b, response_id)
    assert events[-1]["type"] == "response.failed"
    assert tool.calls == [{"a": 2, "b": 3}]
    assert second.requests == []
