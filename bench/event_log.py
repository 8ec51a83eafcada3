"""Events through the shared event log of background jobs, and how late a follower on another
connection sees them, woken by the job signals.

One writer logs N events of one job through the store (``SqlResponseStore``: the ``JobStore``
port) the way a background run does (``core.job_runner``: one write in flight, every event that
waits for it goes in the next write; ``SignalledJobs`` publishes ``events`` after each write).
A follower on another store (its own engine: its own connections, as another gateway process
would have) reads them through ``BackgroundResponses.stream`` (the log, read again on each
signal, polled otherwise). Each event carries the writer's ``perf_counter`` (one process: one
clock); the follower's lag is its receive time minus that.

Modes: ``max`` (the writer produces as fast as it can: events/s logged, and events/s until the
follower has the last one) and ``paced`` (``--rate`` events/s, like a model streaming tokens:
the follower's lag p50/p99).

    python bench/event_log.py                       # SQLite and PostgreSQL, every signal kind
    python bench/event_log.py --events 5000 --rate 500 --backends postgres --signals postgres

Signals: ``local`` (SQLite: writer and follower in one process share an in-process adapter),
``postgres`` (LISTEN/NOTIFY), ``redis`` (pub/sub on ``--redis``), ``none`` (poll every 0.25 s).
PostgreSQL: a throwaway database on ``--postgres`` (dropped afterwards). Prints a table.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import statistics
import tempfile
import time
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

from sqlalchemy import text
from sqlalchemy.engine import make_url
from sqlalchemy.ext.asyncio import create_async_engine
from sqlalchemy.pool import NullPool

from app.core.background import BackgroundOptions, BackgroundResponses
from app.core.job_signals import JobSignals, LocalJobSignals, SignalledJobs
from app.core.jobs import BackgroundJob, JobStore, LoggedEvent
from app.core.service import ResponsesService
from app.core.tenancy import DEFAULT_TENANT
from app.store.engine import create_engine_for
from app.store.migrate import upgrade_to_head
from app.store.pg_signals import PostgresJobSignals
from app.store.sql import SqlResponseStore

OWNER = "bench:writer"


@contextlib.asynccontextmanager
async def database(backend: str, postgres: str) -> AsyncIterator[str]:
    if backend == "sqlite":
        with tempfile.TemporaryDirectory() as tmp:
            url = f"sqlite+aiosqlite:///{Path(tmp) / 'respgate.db'}"
            await upgrade_to_head(url)
            yield url
        return
    name = f"respgate_bench_{uuid.uuid4().hex[:8]}"
    admin = create_async_engine(postgres, poolclass=NullPool, isolation_level="AUTOCOMMIT")
    async with admin.connect() as conn:
        await conn.execute(text(f'CREATE DATABASE "{name}"'))
    try:
        url = make_url(postgres).set(database=name).render_as_string(hide_password=False)
        await upgrade_to_head(url)
        yield url
    finally:
        async with admin.connect() as conn:
            await conn.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
        await admin.dispose()


def new_signals(kind: str, url: str, redis_url: str, shared: LocalJobSignals) -> JobSignals | None:
    if kind == "none":
        return None
    if kind == "local":
        return shared
    if kind == "postgres":
        return PostgresJobSignals(url)
    from app.store.redis_signals import RedisJobSignals

    return RedisJobSignals(redis_url)


async def write(jobs: JobStore, response_id: str, count: int, rate: float | None) -> float:
    """Log ``count`` delta events then the terminal one, batching as a run does; seconds."""
    pending: list[dict[str, Any]] = []
    wake = asyncio.Event()
    produced = asyncio.Event()

    async def flusher() -> None:
        number = 1
        while True:
            await wake.wait()
            wake.clear()
            batch = pending[:]
            del pending[:]
            logged = [
                LoggedEvent(number + i, {**e, "sequence_number": number + i})
                for i, e in enumerate(batch)
            ]
            number += len(batch)
            final = [e for e in logged if e.event["type"] == "response.completed"]
            if final:
                response = {"id": response_id, "status": "completed", "output": []}
                await jobs.update_job(
                    response_id, OWNER, response, int(time.time()), logged, tenant=DEFAULT_TENANT
                )
                return
            # as a run logs: owner-checked
            await jobs.log_events(response_id, OWNER, logged, tenant=DEFAULT_TENANT)
            if pending:
                wake.set()

    task = asyncio.create_task(flusher())
    start = time.perf_counter()
    for n in range(count + 1):
        if rate is not None:
            delay = start + n / rate - time.perf_counter()
            if delay > 0:
                await asyncio.sleep(delay)
        kind = "response.completed" if n == count else "response.output_text.delta"
        event: dict[str, Any] = {"type": kind, "t": time.perf_counter(), "delta": "x"}
        if n == count:
            event["response"] = {"id": response_id, "status": "completed", "output": []}
        pending.append(event)
        wake.set()
        if n % 64 == 0:
            await asyncio.sleep(0)  # let the flusher run, as a streaming upstream would
    produced.set()
    await task
    return time.perf_counter() - start


async def one_run(
    url: str, signals_kind: str, args: argparse.Namespace, rate: float | None
) -> dict[str, float]:
    shared = LocalJobSignals()
    writer_store = SqlResponseStore(create_engine_for(url))
    reader_store = SqlResponseStore(create_engine_for(url))
    writer_signals = new_signals(signals_kind, url, args.redis, shared)
    reader_signals = (
        writer_signals
        if signals_kind == "local"
        else new_signals(signals_kind, url, args.redis, shared)
    )
    jobs: JobStore = writer_store
    if writer_signals is not None:
        jobs = SignalledJobs(writer_store, writer_signals)
    follower = BackgroundResponses(
        ResponsesService(None, reader_store),  # type: ignore[arg-type]
        reader_store,
        BackgroundOptions(lease_seconds=600),
        signals=reader_signals,
    )
    await follower.start()
    if writer_signals is not None and writer_signals is not reader_signals:
        await writer_signals.listen(lambda kind, rid: None)
    response_id = f"resp_bench{uuid.uuid4().hex[:12]}"
    now = time.time()
    job = BackgroundJob(
        response_id,
        "in_progress",
        {"model": "m"},
        {"id": response_id, "status": "in_progress"},
        True,
        OWNER,
        now + 600,
        1,
        int(now),
        tenant=DEFAULT_TENANT,
    )
    await writer_store.add_job(job, {"type": "response.created", "sequence_number": 0})
    lags: list[float] = []
    try:
        stream = await follower.stream(response_id, 0, tenant=DEFAULT_TENANT)

        async def follow() -> None:
            async for event in stream:
                if "t" in event:
                    lags.append(time.perf_counter() - float(event["t"]))

        reading = asyncio.create_task(follow())
        began = time.perf_counter()
        seconds = await write(jobs, response_id, args.events, rate)
        await asyncio.wait_for(reading, 60)
        followed = time.perf_counter() - began
    finally:
        await follower.aclose()
        for signals in {id(s): s for s in (writer_signals, reader_signals) if s}.values():
            await signals.aclose()
        await writer_store.aclose()
        await reader_store.aclose()
    lags.sort()
    return {
        "events_per_s": (args.events + 1) / seconds,
        "followed_per_s": (args.events + 1) / followed,
        "lag_p50_ms": 1000 * statistics.median(lags),
        "lag_p99_ms": 1000 * lags[min(len(lags) - 1, int(len(lags) * 0.99))],
        "received": len(lags),
    }


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--events", type=int, default=5000)
    parser.add_argument("--rate", type=float, default=500.0, help="paced mode's events/s")
    parser.add_argument("--backends", default="sqlite,postgres")
    parser.add_argument("--signals", default="local,postgres,redis,none")
    parser.add_argument("--postgres", default="postgresql+asyncpg://postgres@127.0.0.1:5432/test")
    parser.add_argument("--redis", default="redis://127.0.0.1:6379/0")
    args = parser.parse_args()
    print(f"{args.events} events; paced at {args.rate:g}/s\n")
    print(
        "| store | signals | mode | logged events/s | followed events/s | follower lag p50 "
        "| p99 | received |"
    )
    print("|---|---|---|---|---|---|---|---|")
    for backend in args.backends.split(","):
        async with database(backend, args.postgres) as url:
            for kind in args.signals.split(","):
                if kind in ("local", "postgres") and (kind == "local") != (backend == "sqlite"):
                    continue  # in-process signals with SQLite, LISTEN/NOTIFY with PostgreSQL
                for mode, rate in (("max", None), ("paced", args.rate)):
                    r = await one_run(url, kind, args, rate)
                    print(
                        f"| {backend} | {kind} | {mode} | {r['events_per_s']:,.0f} | "
                        f"{r['followed_per_s']:,.0f} | "
                        f"{r['lag_p50_ms']:.1f} ms | {r['lag_p99_ms']:.1f} ms | "
                        f"{r['received']:.0f} |",
                        flush=True,
                    )


if __name__ == "__main__":
    asyncio.run(main())
