"""Benchmark the retention purge (``app.store.retention.SqlRetention``) on SQLite and PostgreSQL.

    python bench/retention_bench.py                        # both backends, 50k responses
    python bench/retention_bench.py --backend sqlite --responses 10000
    python bench/retention_bench.py --out /tmp/retention-bench.md

Builds a store of realistic shape with bulk inserts (not through ``save_response``: the
figures are the purge's), in a fresh SQLite file or a scratch PostgreSQL schema:

- ``--tenants`` tenants (8); 90 % of the responses in ``previous_response_id`` chains of depth
  5, 10 % in conversations of 10 responses; every turn brings 4 items (a user message, a
  function call, its output, the answer: ~350-byte payloads), so 50k responses hold 200k
  items, and a turn's checkpoint lists every item of its history (4, 8, ... 20 in a chain, up
  to 40 in a conversation); 5 % of the chain turns also send back an item of another chain
  of their tenant by id (``item_reference``);
- a tool session for every fifth chain and every conversation, a finished background job
  with 10 logged events for one response in fifty;
- ages spread over 60 days (a chain's turns minutes apart, a conversation's last activity its
  last turn); the cut-off is 30 days: about half of everything expires.

Then, per backend: a dry run, the purge (``--batch-size``, 500 as the default setting), and
the purge again (nothing left to do). The figures: time, rows removed per second, batches,
and how long each batch's transaction (the write lock: SQLite's ``BEGIN IMMEDIATE``, and the
advisory lock on PostgreSQL) was held: median, 95th percentile, max. With
``--concurrent-saves`` small saves run meanwhile (one at a time), and their latency is
reported next to the same saves' without a purge. Nothing is asserted: these are figures.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import gc
import platform
import random
import statistics
import sys
import tempfile
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from sqlalchemy import func, insert, select

from app.core.ports import NewResponse
from app.core.retention import PurgeReport, RetentionCutoffs
from app.store.retention import SqlRetention
from app.store.sql import SqlResponseStore
from app.store.tables import (
    background_events,
    background_jobs,
    conversation_items,
    conversations,
    items,
    responses,
    tool_sessions,
)
from bench.store_bench import DEFAULT_PG_URL, postgres_store, small_turn, sqlite_store

DAY = 86_400
NOW = int(time.time())
CUTOFF = NOW - 30 * DAY
TEXT = "The gateway stores the history of every turn so that a client can continue from it. "
CHAIN_DEPTH, CONVERSATION_TURNS = 5, 10
TABLES = (responses, items, conversations, conversation_items, tool_sessions)
ITEM_TYPES = ("message", "function_call", "function_call_output", "message")


# ----------------------------------------------------------------------------- the store


@dataclass
class Rows:
    """Every row of the store to build, by table."""

    by_table: dict[str, list[dict[str, Any]]] = field(default_factory=dict)

    def add(self, table: str, **row: Any) -> None:
        self.by_table.setdefault(table, []).append(row)


class Builder:
    """Makes the rows of a realistic store (see the module docstring), reproducibly."""

    def __init__(self, total: int, tenants: int) -> None:
        self.random = random.Random(17)
        self.tenants = [f"tenant-{index}" for index in range(tenants)]
        self.rows = Rows()
        self.serial = 0
        # each tenant's items so far (what a turn may send back by id)
        self.items_of: dict[str, list[str]] = {tenant: [] for tenant in self.tenants}
        in_conversations = total // 10 // CONVERSATION_TURNS
        for _ in range((total - in_conversations * CONVERSATION_TURNS) // CHAIN_DEPTH):
            self.chain()
        for _ in range(in_conversations):
            self.conversation()

    def new_id(self, prefix: str) -> str:
        self.serial += 1
        return f"{prefix}_{self.serial:012d}{self.random.getrandbits(40):010x}"

    def start(self) -> int:
        return NOW - self.random.randrange(60 * DAY)

    def turn_items(self, tenant: str, at: int) -> tuple[list[str], list[str]]:
        """A turn's four new items: (its input ids, its output ids)."""
        ids = [self.new_id(kind) for kind in ("msg", "fc", "fco", "msg")]
        for item_id, kind in zip(ids, ITEM_TYPES, strict=True):
            payload = {"id": item_id, "type": kind, "content": [{"type": "text", "text": TEXT * 4}]}
            self.rows.add(
                "items", tenant=tenant, id=item_id, type=kind, schema_version=1,
                created_at=at, payload=payload,
            )  # fmt: skip
        self.items_of[tenant].extend(ids)
        return ids[:1] + ids[2:3], ids[1:2] + ids[3:]

    def response(
        self, tenant: str, at: int, checkpoint: list[str], inputs: list[str], **row: Any
    ) -> str:
        response_id = self.new_id("resp")
        body = {"id": response_id, "object": "response", "created_at": at, "status": "completed",
                "model": "bench-model", "output": [], "usage": {"total_tokens": 100}}  # fmt: skip
        self.rows.add(
            "responses", id=response_id, created_at=at, status="completed", model="bench-model",
            checkpoint_ids=checkpoint, input_item_ids=inputs, response=body, tenant=tenant,
            **{"previous_response_id": None, "conversation_id": None, "root_id": response_id}
            | row,
        )  # fmt: skip
        if self.random.random() < 0.02:
            self.job(tenant, response_id, at)
        return response_id

    def job(self, tenant: str, response_id: str, at: int) -> None:
        self.rows.add(
            "background_jobs", response_id=response_id, status="completed", request={},
            response={"id": response_id}, resumable=True, owner=None, lease_until=0, attempts=1,
            created_at=at, finished_at=at + 60, checkpoint=None, tenant=tenant,
        )  # fmt: skip
        for sequence in range(10):
            event = {"type": "response.output_text.delta", "delta": TEXT}
            self.rows.add(
                "background_events", response_id=response_id, sequence_number=sequence,
                event=event, tenant=tenant,
            )  # fmt: skip

    def chain(self) -> None:
        tenant = self.random.choice(self.tenants)
        at, previous, root = self.start(), None, None
        history: list[str] = []
        for _ in range(CHAIN_DEPTH):
            referenced: list[str] = []
            if self.items_of[tenant] and self.random.random() < 0.05:
                referenced = [self.random.choice(self.items_of[tenant])]
            inputs, outputs = self.turn_items(tenant, at)
            checkpoint = [*history, *referenced, *inputs, *outputs]
            previous = self.response(
                tenant, at, checkpoint, [*referenced, *inputs],
                previous_response_id=previous, **({"root_id": root} if root else {}),
            )  # fmt: skip
            root = root or previous
            history, at = checkpoint, at + 120
        if self.random.random() < 0.2:
            self.session(tenant, str(root), at)

    def conversation(self) -> None:
        tenant, at = self.random.choice(self.tenants), self.start()
        conversation_id = self.new_id("conv")
        listed: list[str] = []
        created = at
        for _ in range(CONVERSATION_TURNS):
            inputs, outputs = self.turn_items(tenant, at)
            self.response(
                tenant, at, [*listed, *inputs, *outputs], inputs, conversation_id=conversation_id
            )
            listed, at = [*listed, *inputs, *outputs], at + 300
        for position, item_id in enumerate(listed):
            self.rows.add(
                "conversation_items", conversation_id=conversation_id, position=position,
                item_id=item_id, tenant=tenant,
            )  # fmt: skip
        self.rows.add(
            "conversations", id=conversation_id, created_at=created, metadata={},
            next_position=len(listed), tenant=tenant, last_active_at=at,
        )  # fmt: skip
        self.session(tenant, conversation_id, at)

    def session(self, tenant: str, session_id: str, at: int) -> None:
        self.rows.add(
            "tool_sessions", tenant=tenant, session_id=session_id, state={"calls": [TEXT]},
            created_at=at, updated_at=at,
        )  # fmt: skip


async def load(store: SqlResponseStore, rows: Rows) -> float:
    """Insert every row (1,000 a statement); the seconds it took."""
    tables = {table.name: table for table in (*TABLES, background_jobs, background_events)}
    began = time.perf_counter()
    for name in ("conversations", "responses", "items", "conversation_items", "tool_sessions",
                 "background_jobs", "background_events"):  # fmt: skip
        table_rows = rows.by_table.get(name, [])
        for start in range(0, len(table_rows), 1_000):
            async with store.db.write() as conn:
                await conn.execute(insert(tables[name]), table_rows[start : start + 1_000])
    async with store.db.write() as conn:
        if not store.db.is_sqlite:
            for name in tables:
                await conn.exec_driver_sql(f"ANALYZE {name}")
        else:
            await conn.exec_driver_sql("ANALYZE")
    return time.perf_counter() - began


async def counts(store: SqlResponseStore) -> dict[str, int]:
    async with store.db.read() as conn:
        return {
            table.name: int(await conn.scalar(select(func.count()).select_from(table)) or 0)
            for table in (*TABLES, background_jobs, background_events)
        }


# ----------------------------------------------------------------------------- the purge


@dataclass
class Timed:
    report: PurgeReport
    seconds: float
    holds: list[float]  # each transaction of the purge (write transactions, but in a dry run)
    passes: list[float]  # each pass over the stored checkpoints in a read-only snapshot


def timing(opened: Any, durations: list[float]) -> Any:
    """``opened`` (a context manager factory), recording how long each one stayed open."""

    @contextlib.asynccontextmanager
    async def timed(*args: Any) -> AsyncIterator[Any]:
        async with opened(*args) as conn:
            began = time.perf_counter()
            try:
                yield conn
            finally:
                durations.append(time.perf_counter() - began)

    return timed


async def timed_purge(store: SqlResponseStore, batch_size: int, *, dry_run: bool) -> Timed:
    """The purge, with how long each of its transactions was held."""
    retention = SqlRetention(store.db, batch_size=batch_size)
    sql = retention._sql  # the bench times each transaction
    timed = Timed(PurgeReport(), 0.0, [], [])
    sql.transaction = timing(sql.transaction, timed.holds)  # type: ignore[method-assign]
    if hasattr(sql, "snapshot"):  # before the sweep (--before figures) there was none
        sql.snapshot = timing(sql.snapshot, timed.passes)  # type: ignore[method-assign]
    began = time.perf_counter()
    report = await retention.purge(RetentionCutoffs(CUTOFF, CUTOFF), dry_run=dry_run)
    assert report is not None
    timed.report, timed.seconds = report, time.perf_counter() - began
    return timed


async def save_latencies(
    store: SqlResponseStore, until: asyncio.Event | None, count: int
) -> list[float]:
    """Small saves, one every 10 ms (``count`` of them, or until ``until`` is set); each
    one's latency."""
    latencies: list[float] = []
    while (until is None and len(latencies) < count) or (until is not None and not until.is_set()):
        turn: NewResponse = small_turn([], None)
        began = time.perf_counter()
        await store.save_response(turn, tenant="tenant-0")
        latencies.append(time.perf_counter() - began)
        await asyncio.sleep(0.01)
    return latencies


def quantiles(samples: list[float]) -> str:
    if not samples:
        return "-"
    ordered = sorted(samples)
    p95 = ordered[min(len(ordered) - 1, int(len(ordered) * 0.95))]
    return f"{statistics.median(ordered) * 1000:.1f} / {p95 * 1000:.1f} / {ordered[-1] * 1000:.1f}"


async def bench_backend(name: str, store: SqlResponseStore, args: argparse.Namespace) -> list[str]:
    loaded = await load(store, Builder(args.responses, args.tenants).rows)
    gc.collect()  # the rows built are garbage now: no collection of them during the purge
    before = await counts(store)
    print(f"{name}: {before} loaded in {loaded:.1f}s", flush=True)
    lines = []
    dry = await timed_purge(store, args.batch_size, dry_run=True)
    baseline = await save_latencies(store, None, 200) if args.concurrent_saves else []
    stop = asyncio.Event()
    saving = asyncio.create_task(save_latencies(store, stop, 0)) if args.concurrent_saves else None
    real = await timed_purge(store, args.batch_size, dry_run=False)
    stop.set()
    during = await saving if saving is not None else []
    again = await timed_purge(store, args.batch_size, dry_run=False)
    after = await counts(store)
    assert real.report.counts() == dry.report.counts(), (real.report, dry.report)
    removed = real.report.total
    for label, run in (("dry run", dry), ("purge", real), ("purge again", again)):
        lines.append(
            f"| {name} | {label} | {run.seconds:.2f} | {run.report.total / run.seconds:,.0f} "
            f"| {len(run.holds)} | {quantiles(run.holds)} "
            f"| {' + '.join(f'{p:.2f}' for p in run.passes) or '-'} |"
        )
    print("\n".join(lines), flush=True)
    print(f"{name}: removed {real.report.summary()}; left {after}", flush=True)
    extra = [f"{name}: {before['responses']:,} responses, {before['items']:,} items; the purge "
             f"removed {real.report.summary()} ({removed:,} rows)"]  # fmt: skip
    if args.concurrent_saves:
        extra.append(
            f"{name}: save latency ms (median / p95 / max), alone: {quantiles(baseline)}; "
            f"during the purge: {quantiles(during)} ({len(during)} saves)"
        )
        print(extra[-1], flush=True)
    return [*lines, "", *extra]


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--backend", choices=["sqlite", "postgres", "both"], default="both")
    parser.add_argument("--postgres-url", default=DEFAULT_PG_URL)
    parser.add_argument("--responses", type=int, default=50_000)
    parser.add_argument("--tenants", type=int, default=8)
    parser.add_argument("--batch-size", type=int, default=500)
    parser.add_argument("--concurrent-saves", action="store_true")
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    header = [
        f"retention purge, {args.responses:,} responses, batch {args.batch_size}; "
        f"Python {platform.python_version()}, {platform.machine()}",
        "",
        "| backend | run | seconds | rows/s | transactions | held ms (median / p95 / max) "
        "| passes s |",
        "|---|---|---|---|---|---|---|",
    ]
    body: list[str] = []
    notes: list[str] = []
    if args.backend in ("sqlite", "both"):
        with tempfile.TemporaryDirectory() as directory:
            async with sqlite_store(Path(directory)) as store:
                lines = await bench_backend("SQLite", store, args)
        body += [line for line in lines if line.startswith("|")]
        notes += [line for line in lines if line and not line.startswith("|")]
    if args.backend in ("postgres", "both"):
        async with postgres_store(args.postgres_url) as store:
            lines = await bench_backend("PostgreSQL", store, args)
        body += [line for line in lines if line.startswith("|")]
        notes += [line for line in lines if line and not line.startswith("|")]
    text = "\n".join([*header, *body, "", *(f"- {note}" for note in notes)])
    print(text)
    if args.out:
        args.out.write_text(text + "\n")


if __name__ == "__main__":
    asyncio.run(main())
