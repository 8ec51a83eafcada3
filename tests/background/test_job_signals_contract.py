"""Every job signals adapter (``app.core.job_signals.JobSignals``) behaves the same: in-process,
PostgreSQL ``LISTEN/NOTIFY`` and Redis pub/sub (each skipped with a reason where its server is
not usable). A "process" here is one adapter; the in-process adapter's processes are receivers
of one object. Other tests may share the servers and the channel: every test uses response ids
of its own and looks only at those."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest

from app.core.job_signals import (
    CANCELLED,
    EVENTS,
    JobSignals,
    LocalJobSignals,
    SignalKind,
    decode,
    encode,
)
from app.store.pg_signals import PostgresJobSignals, asyncpg_dsn
from tests.background.signal_transports import REDIS_URL, require_redis
from tests.postgres import POSTGRES_URL, skip_unusable

DEADLINE = 15.0


class Received:
    """What one process's receiver got, in order."""

    def __init__(self) -> None:
        self.signals: list[tuple[SignalKind, str]] = []
        self._changed = asyncio.Event()

    def __call__(self, kind: SignalKind, response_id: str) -> None:
        self.signals.append((kind, response_id))
        self._changed.set()

    def about(self, ids: set[str]) -> list[tuple[SignalKind, str]]:
        return [s for s in self.signals if s[1] in ids]

    async def until(self, done: Callable[[], bool]) -> None:
        async with asyncio.timeout(DEADLINE):
            while not done():
                self._changed.clear()
                await self._changed.wait()


async def _require_postgres() -> None:
    import asyncpg

    try:
        connection = await asyncpg.connect(asyncpg_dsn(POSTGRES_URL), timeout=5)
    except Exception as exc:
        skip_unusable(exc)
    await connection.close()


@pytest.fixture(params=["local", "postgres", "redis"])
async def transport(request: pytest.FixtureRequest) -> AsyncIterator[Callable[[], Any]]:
    """``make()``: a new process's adapter on one shared transport (closed afterwards)."""
    made: list[JobSignals] = []
    local = LocalJobSignals()
    if request.param == "postgres":
        await _require_postgres()
    if request.param == "redis":
        await require_redis()

    def make() -> Any:
        if request.param == "local":
            signals: JobSignals = local
        elif request.param == "postgres":
            signals = PostgresJobSignals(POSTGRES_URL)
        else:
            from app.store.redis_signals import RedisJobSignals

            signals = RedisJobSignals(REDIS_URL)
        made.append(signals)
        return signals

    yield make
    for signals in made:
        await signals.aclose()


def new_ids(count: int) -> list[str]:
    run = uuid.uuid4().hex[:10]
    return [f"resp_{run}{n:04d}" for n in range(count)]


async def test_a_signal_reaches_every_listening_process_its_own_included(
    transport: Callable[[], Any],
) -> None:
    first, second = transport(), transport()
    got_first, got_second = Received(), Received()
    await first.listen(got_first)
    await second.listen(got_second)
    cancelled, logged = new_ids(2)
    first.publish(CANCELLED, cancelled)
    second.publish(EVENTS, logged)
    wanted = {(CANCELLED, cancelled), (EVENTS, logged)}
    ids = {cancelled, logged}
    for got in (got_first, got_second):
        await got.until(lambda got=got: wanted <= set(got.about(ids)))  # type: ignore[misc]
    assert first.spans_processes == second.spans_processes


async def test_signals_of_one_process_arrive_in_order(transport: Callable[[], Any]) -> None:
    sender, listener = transport(), transport()
    got = Received()
    await listener.listen(got)
    ids = new_ids(300)
    for response_id in ids:  # a burst: sent in few round trips, in order
        sender.publish(EVENTS, response_id)
    await got.until(lambda: len(got.about(set(ids))) >= len(ids))
    assert [r for _, r in got.about(set(ids))] == ids


async def test_a_closed_adapter_neither_sends_nor_delivers(transport: Callable[[], Any]) -> None:
    sender, closed = transport(), transport()
    got, got_closed = Received(), Received()
    await sender.listen(got)
    if closed is not sender:  # in-process: one object, nothing to close apart
        await closed.listen(got_closed)
        await closed.aclose()
        await closed.aclose()  # idempotent
        (lost,) = new_ids(1)
        closed.publish(CANCELLED, lost)
    (marker,) = new_ids(1)
    sender.publish(EVENTS, marker)
    await got.until(lambda: bool(got.about({marker})))
    assert got_closed.signals == []
    if closed is not sender:
        assert not got.about({lost})


def test_payloads_that_are_not_signals_are_ignored() -> None:
    assert decode(encode(CANCELLED, "resp_1")) == (CANCELLED, "resp_1")
    assert decode(encode(EVENTS, "resp_2")) == (EVENTS, "resp_2")
    for junk in ("", "cancelled", "cancelled ", "started resp_1", "hello world"):
        assert decode(junk) is None


async def test_postgres_listens_again_after_its_connection_is_killed() -> None:
    await _require_postgres()
    import asyncpg

    signals = PostgresJobSignals(POSTGRES_URL, max_backoff=0.2)
    got = Received()
    try:
        await signals.listen(got)
        admin = await asyncpg.connect(asyncpg_dsn(POSTGRES_URL))
        try:
            killed = await admin.fetchval(
                "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity "
                "WHERE application_name = $1",
                signals.application_name,
            )
            assert killed == 1
            await admin.execute("SELECT pg_notify('respgate_jobs', 'not a signal')")
        finally:
            await admin.close()
        async with asyncio.timeout(DEADLINE):
            while signals.connections < 2:  # noqa: ASYNC110 (a counter of the adapter's task)
                await asyncio.sleep(0.02)
        (response_id,) = new_ids(1)
        signals.publish(CANCELLED, response_id)
        await got.until(lambda: bool(got.about({response_id})))
    finally:
        await signals.aclose()


async def test_redis_subscribes_again_after_its_connection_is_killed() -> None:
    await require_redis()
    import redis.asyncio as redis

    from app.store.redis_signals import RedisJobSignals

    signals = RedisJobSignals(REDIS_URL, max_backoff=0.2)
    got = Received()
    admin = redis.Redis.from_url(REDIS_URL, decode_responses=True)
    try:
        await signals.listen(got)
        clients = await admin.client_list(_type="pubsub")
        ids = [c["id"] for c in clients if c.get("name") == signals.client_name]
        assert len(ids) == 1
        await admin.client_kill_filter(_id=ids[0])
        await admin.publish("respgate_jobs", "not a signal")
        async with asyncio.timeout(DEADLINE):
            while signals.connections < 2:  # noqa: ASYNC110 (a counter of the adapter's task)
                await asyncio.sleep(0.02)
        (response_id,) = new_ids(1)
        signals.publish(CANCELLED, response_id)
        await got.until(lambda: bool(got.about({response_id})))
    finally:
        await signals.aclose()
        await admin.aclose()
