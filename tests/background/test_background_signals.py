"""Background jobs of two gateway "processes" (two ``BackgroundResponses``, each with its own
store, service and signals adapter, on one PostgreSQL database) talking through the job
signals, PostgreSQL ``LISTEN/NOTIFY`` or Redis pub/sub: a follower on B wakes on each event A
logs although its log poll is 10 minutes apart, and a cancel made on B stops A's run at once
although A's lease (2 minutes) would not have been renewed for 40 s. Without signals the same
follower would wait for its poll (``none``: what the signals replace)."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass
from typing import Any

import pytest

from app.core.background import BackgroundOptions, BackgroundResponses
from app.core.job_signals import JobSignals
from app.core.service import ResponsesService
from app.core.tenancy import DEFAULT_TENANT
from app.protocol.json_types import JsonObject
from app.protocol.requests import ParsedRequest
from app.store.engine import create_engine_for
from app.store.migrate import upgrade_to_head
from app.store.pg_signals import PostgresJobSignals
from app.store.sql import SqlResponseStore
from tests.background.signal_transports import REDIS_URL, require_redis
from tests.fakes import FakeUpstream, message, round_events
from tests.postgres import run_in_thread, throwaway_database

DEADLINE = 15.0
# Nothing here may wait for a lease renewal (every 40 s) or a log poll (every 10 minutes).
OPTIONS = BackgroundOptions(lease_seconds=120.0, signalled_poll_interval=600.0)


class DrippingStream:
    """An upstream stream that sends the opening of a message, then one delta per ``drip``,
    and never ends by itself; ``closed`` once the gateway closed it."""

    def __init__(self, opening: list[JsonObject], delta: JsonObject) -> None:
        self._opening = opening
        self._delta = delta
        self.drips: asyncio.Queue[str] = asyncio.Queue()
        self.closed = asyncio.Event()

    def __aiter__(self) -> AsyncIterator[JsonObject]:
        return self._iter()

    async def _iter(self) -> AsyncIterator[JsonObject]:
        for event in self._opening:
            yield event
        while True:
            yield {**self._delta, "delta": await self.drips.get()}

    async def aclose(self) -> None:
        self.closed.set()


class DrippingUpstream(FakeUpstream):
    def __init__(self) -> None:
        super().__init__()
        events = round_events([message("hello")])
        self.opening, self.delta = events[:3], events[3]
        self.dripping: list[DrippingStream] = []
        self.opened = asyncio.Event()

    async def stream_response(  # type: ignore[override]
        self, body: JsonObject, headers: Mapping[str, str]
    ) -> DrippingStream:
        self.requests.append(body)
        stream = DrippingStream(self.opening, self.delta)
        self.dripping.append(stream)
        self.opened.set()
        return stream


@dataclass
class Gateway:
    background: BackgroundResponses
    upstream: DrippingUpstream
    store: SqlResponseStore
    signals: JobSignals


@pytest.fixture
def database() -> Any:
    with throwaway_database("respgate_signals") as url:
        run_in_thread(lambda: upgrade_to_head(url))
        yield url


def new_signals(kind: str, url: str) -> JobSignals:
    if kind == "postgres":
        return PostgresJobSignals(url)
    from app.store.redis_signals import RedisJobSignals

    return RedisJobSignals(REDIS_URL)


@contextlib.asynccontextmanager
async def gateway(url: str, signals_kind: str) -> AsyncIterator[Gateway]:
    store = SqlResponseStore(create_engine_for(url))
    upstream = DrippingUpstream()
    signals = new_signals(signals_kind, url)
    background = BackgroundResponses(
        ResponsesService(upstream, store), store, OPTIONS, signals=signals
    )
    await background.start()
    try:
        yield Gateway(background, upstream, store, signals)
    finally:
        await background.aclose()
        await signals.aclose()
        await store.aclose()


async def collect(stream: AsyncIterator[JsonObject], into: list[JsonObject]) -> None:
    async for event in stream:
        into.append(event)


async def until(condition: Any) -> None:
    async with asyncio.timeout(DEADLINE):
        while not condition():  # noqa: ASYNC110 (the condition reads another task's state)
            await asyncio.sleep(0.01)


@pytest.mark.parametrize("signals_kind", ["postgres", "redis"])
async def test_a_follower_and_a_cancel_on_another_process_take_effect_at_once(
    database: str, signals_kind: str
) -> None:
    if signals_kind == "redis":
        await require_redis()
    async with gateway(database, signals_kind) as a, gateway(database, signals_kind) as b:
        body = {"model": "m", "input": "hi", "background": True}
        queued = await a.background.create(ParsedRequest.from_body(body, tenant=DEFAULT_TENANT), {})
        response_id = str(queued["id"])
        await asyncio.wait_for(a.upstream.opened.wait(), DEADLINE)
        dripping = a.upstream.dripping[0]

        seen: list[JsonObject] = []
        follower = asyncio.create_task(
            collect(await b.background.stream(response_id, -1, tenant=DEFAULT_TENANT), seen)
        )
        await until(lambda: len(seen) >= 3)  # created, in_progress, the opening (logged)
        for text in ("he", "llo"):  # each logged by A, read by B on A's signal
            dripping.drips.put_nowait(text)
            await until(lambda text=text: any(e.get("delta") == text for e in seen))
        assert not follower.done()

        cancelled = await b.background.cancel(response_id, tenant=DEFAULT_TENANT)
        assert cancelled["status"] == "cancelled"
        # A got the cancel signal and closed the upstream request: no lease renewal came.
        await asyncio.wait_for(dripping.closed.wait(), DEADLINE)
        await until(lambda: response_id not in a.background._runs)
        await asyncio.wait_for(follower, DEADLINE)
        assert seen[-1]["type"] == "response.failed"
        assert seen[-1]["response"]["status"] == "cancelled"
        numbers = [int(e["sequence_number"]) for e in seen]
        assert numbers == list(range(len(seen)))
        # A logged nothing after the canceller's closing event.
        logged = await b.store.read_events(response_id, -1, 100, tenant=DEFAULT_TENANT)
        assert [e.sequence_number for e in logged] == numbers
        assert b.upstream.requests == []  # B ran nothing
        job = await a.store.get_job(response_id, tenant=DEFAULT_TENANT)
        assert job is not None and job.status == "cancelled"


async def test_deleting_a_job_on_another_process_stops_its_run_at_once(database: str) -> None:
    async with gateway(database, "postgres") as a, gateway(database, "postgres") as b:
        body = {"model": "m", "input": "hi", "background": True}
        queued = await a.background.create(ParsedRequest.from_body(body, tenant=DEFAULT_TENANT), {})
        response_id = str(queued["id"])
        await asyncio.wait_for(a.upstream.opened.wait(), DEADLINE)
        deleted = await b.background.delete(response_id, tenant=DEFAULT_TENANT)
        assert deleted["deleted"] is True
        # A's run stopped on B's signal (its lease, 2 minutes, was not renewed meanwhile).
        await asyncio.wait_for(a.upstream.dripping[0].closed.wait(), DEADLINE)
        await until(lambda: response_id not in a.background._runs)
        assert await a.store.get_job(response_id, tenant=DEFAULT_TENANT) is None
        assert await a.store.read_events(response_id, -1, 10, tenant=DEFAULT_TENANT) == []
