"""Benchmark the response store (``app.store.sql.SqlResponseStore``) on SQLite and PostgreSQL.

    python bench/store_bench.py                      # both backends, ~1 min
    python bench/store_bench.py --quick              # fewer requests and repetitions
    python bench/store_bench.py --backend sqlite     # one backend
    python bench/store_bench.py --out /tmp/store-bench.md

Measures, per backend, in one process on a fresh schema:

(a) ``save_response`` throughput at concurrency 32 (default), a typical small stored response:
    1 input + 1 output message, new ids; three shapes: no conversation
    (``previous_response_id``-style, 10 history ids in the checkpoint), each request appending
    to its own conversation, and all requests appending to ONE conversation (the worst case for
    the conversation row lock).
(b) rehydration = ``get_response`` + ``load_items(checkpoint_ids)`` for checkpoints of 10, 100,
    1,000 and 10,000 items (realistic ~350-byte message items), and for a 1,000-item history
    reached by a chain of depth 1 vs depth 100 (same history size; the checkpoint is flat, so
    the time must not depend on depth).

PostgreSQL: ``--postgres-url`` (default ``$RESPGATE_TEST_POSTGRES_URL`` or
``postgresql+asyncpg://postgres@127.0.0.1:5432/test``); the tables are created in a scratch
schema that is dropped afterwards. Prints a markdown section and writes it to ``--out``.
Nothing is asserted: these are figures.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import platform
import statistics
import sys
import tempfile
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from sqlalchemy import event, text
from sqlalchemy.ext.asyncio import AsyncEngine

from app.core.ids import new_id
from app.core.ports import NewResponse
from app.core.tenancy import DEFAULT_TENANT
from app.store.batching import GroupCommitter
from app.store.engine import (
    POSTGRES_POOL_SIZE,
    SQLITE_BEGIN,
    create_engine_for,
    create_schema,
    json_loads,
)
from app.store.sql import SqlResponseStore

DEFAULT_PG_URL = os.environ.get(
    "RESPGATE_TEST_POSTGRES_URL", "postgresql+asyncpg://postgres@127.0.0.1:5432/test"
)
SIZES = (10, 100, 1_000, 10_000)


# ----------------------------------------------------------------------------- payloads


def message(role: str, text_: str) -> dict[str, Any]:
    kind = "output_text" if role == "assistant" else "input_text"
    content: dict[str, Any] = {"type": kind, "text": text_}
    if role == "assistant":
        content |= {"annotations": [], "logprobs": []}
    return {
        "id": new_id("msg"),
        "type": "message",
        "role": role,
        "status": "completed",
        "content": [content],
    }


FILLER = "The quick brown fox jumps over the lazy dog while the gateway stores its history. " * 3


def response_object(output: list[dict[str, Any]], previous: str | None) -> dict[str, Any]:
    now = int(time.time())
    return {
        "id": new_id("resp"),
        "object": "response",
        "created_at": now,
        "status": "completed",
        "completed_at": now,
        "error": None,
        "incomplete_details": None,
        "instructions": None,
        "model": "mock-model",
        "output": output,
        "parallel_tool_calls": True,
        "previous_response_id": previous,
        "store": True,
        "temperature": 1.0,
        "text": {"format": {"type": "text"}},
        "tool_choice": "auto",
        "tools": [],
        "top_p": 1.0,
        "truncation": "disabled",
        "usage": {"input_tokens": 12, "output_tokens": 5, "total_tokens": 17},
        "metadata": {},
    }


def small_turn(
    history: list[str], conversation_id: str | None, previous: str | None = None
) -> NewResponse:
    user = message("user", "What is the capital of France?")
    answer = message("assistant", "Paris.")
    return NewResponse(
        response=response_object([answer], previous),
        history_ids=history,
        input_item_ids=[user["id"]],
        new_items=[user, answer],
        conversation_id=conversation_id,
    )


# ----------------------------------------------------------------------------- backends


@asynccontextmanager
async def sqlite_store(directory: Path) -> AsyncIterator[SqlResponseStore]:
    path = directory / f"bench-{uuid.uuid4().hex[:8]}.db"
    engine = create_engine_for(f"sqlite+aiosqlite:///{path}")
    await create_schema(engine)
    store = SqlResponseStore(engine)
    try:
        yield store
    finally:
        await store.aclose()
        for suffix in ("", "-wal", "-shm"):
            Path(f"{path}{suffix}").unlink(missing_ok=True)  # noqa: ASYNC240


@asynccontextmanager
async def postgres_store(url: str) -> AsyncIterator[SqlResponseStore]:
    schema = f"bench_{uuid.uuid4().hex[:8]}"
    admin = create_engine_for(url)
    async with admin.begin() as conn:
        await conn.execute(text(f"CREATE SCHEMA {schema}"))
    engine: AsyncEngine = create_engine_for(url)

    # Every pooled connection works in the scratch schema.
    @event.listens_for(engine.sync_engine, "connect")
    def _search_path(dbapi_connection: Any, _record: Any) -> None:
        # SQLAlchemy's recipe: outside a transaction, or a later ROLLBACK undoes the SET.
        autocommit = dbapi_connection.autocommit
        dbapi_connection.autocommit = True
        cursor = dbapi_connection.cursor()
        cursor.execute(f"SET SESSION search_path TO {schema}")
        cursor.close()
        dbapi_connection.autocommit = autocommit

    await create_schema(engine)
    store = SqlResponseStore(engine)
    try:
        yield store
    finally:
        await store.aclose()
        async with admin.begin() as conn:
            await conn.execute(text(f"DROP SCHEMA {schema} CASCADE"))
        await admin.dispose()


# ----------------------------------------------------------------------------- measurements


async def run_concurrent(
    total: int, concurrency: int, make: Callable[[int], Awaitable[None]]
) -> float:
    """Run ``make(i)`` for i in range(total) with ``concurrency`` workers; requests per second."""
    counter = iter(range(total))

    async def worker() -> None:
        for i in counter:
            await make(i)

    start = time.perf_counter()
    await asyncio.gather(*(worker() for _ in range(concurrency)))
    return total / (time.perf_counter() - start)


async def save_throughput(
    store: SqlResponseStore, total: int, concurrency: int, shape: str
) -> float:
    history_items = [message("user", FILLER) for _ in range(10)]
    await store.save_response(
        NewResponse(
            response=response_object([], None),
            history_ids=[],
            input_item_ids=[item["id"] for item in history_items],
            new_items=history_items,
            conversation_id=None,
        ),
        tenant=DEFAULT_TENANT,
    )
    history = [item["id"] for item in history_items]
    conversations: list[str] = []
    if shape == "own conversation":
        for _ in range(total):
            conversations.append(
                (await store.create_conversation({}, [], tenant=DEFAULT_TENANT)).id
            )
    elif shape == "one conversation":
        conversations = [
            (await store.create_conversation({}, [], tenant=DEFAULT_TENANT)).id
        ] * total

    turns = [
        small_turn(
            history if shape == "no conversation" else [],
            conversations[i] if conversations else None,
        )
        for i in range(total)
    ]
    # Warm the pool and the statement caches.
    await run_concurrent(
        concurrency,
        concurrency,
        lambda i: store.save_response(small_turn([], None), tenant=DEFAULT_TENANT),
    )

    async def make(i: int) -> None:
        await store.save_response(turns[i], tenant=DEFAULT_TENANT)

    return await run_concurrent(total, concurrency, make)


async def rehydrate(store: SqlResponseStore, response_id: str) -> int:
    stored = await store.get_response(response_id, tenant=DEFAULT_TENANT)
    assert stored is not None
    return len(await store.load_items(stored.checkpoint_ids, tenant=DEFAULT_TENANT))


async def time_rehydration(
    store: SqlResponseStore, response_id: str, repeat: int, warmup: int = 3
) -> list[float]:
    for _ in range(warmup):
        await rehydrate(store, response_id)
    samples = []
    for _ in range(repeat):
        start = time.perf_counter()
        await rehydrate(store, response_id)
        samples.append((time.perf_counter() - start) * 1000)
    return samples


async def checkpoint_of(store: SqlResponseStore, size: int, depth: int) -> str:
    """A response whose checkpoint holds ``size`` items, reached by a chain of ``depth``."""
    per_turn = size // depth
    history: list[str] = []
    previous: str | None = None
    for turn in range(depth):
        count = per_turn if turn < depth - 1 else size - per_turn * (depth - 1)
        new_items = [
            message("user" if i % 2 == 0 else "assistant", FILLER) for i in range(count - 1)
        ]
        answer = message("assistant", FILLER)
        response = response_object([answer], previous)
        await store.save_response(
            NewResponse(
                response=response,
                history_ids=history,
                input_item_ids=[item["id"] for item in new_items],
                new_items=[*new_items, answer],
                conversation_id=None,
            ),
            tenant=DEFAULT_TENANT,
        )
        history = [*history, *(item["id"] for item in new_items), answer["id"]]
        previous = response["id"]
    assert previous is not None and len(history) == size
    return previous


def ms(samples: list[float]) -> tuple[float, float]:
    ordered = sorted(samples)
    return statistics.median(ordered), ordered[min(len(ordered) - 1, int(len(ordered) * 0.9))]


async def rehydrate_via_sqlalchemy(store: SqlResponseStore, response_id: str) -> int:
    """The same two reads through SQLAlchemy's execution layer (the ablation of the driver
    fast path): ``conn.execute`` of the same Core statements, no transaction."""
    options: dict[str, Any] = (
        {SQLITE_BEGIN: None} if store.db.is_sqlite else {"isolation_level": "AUTOCOMMIT"}
    )
    engine = store.db.engine.execution_options(**options)
    async with engine.connect() as conn:
        row = (
            await conn.execute(store.db.queries.get_response, {"response_id": response_id})
        ).one()
    async with engine.connect() as conn:
        return len(await store.db.load(conn, json_loads(row[1]), tenant=DEFAULT_TENANT))


async def rehydration_throughput(
    store: SqlResponseStore, response_id: str, args: argparse.Namespace, variant: str
) -> float:
    run = rehydrate_via_sqlalchemy if variant == "sqlalchemy" else rehydrate
    inline = store.db.inline
    if variant == "driver":
        store.db.inline = None  # SQLite: through aiosqlite's thread

    async def make(_: int) -> None:
        await run(store, response_id)

    try:
        await run_concurrent(args.concurrency * 4, args.concurrency, make)
        rates = [
            await run_concurrent(args.requests, args.concurrency, make) for _ in range(args.rounds)
        ]
    finally:
        store.db.inline = inline
    return statistics.median(rates)


async def bench_backend(
    name: str, store_factory: Callable[[], Any], args: argparse.Namespace
) -> list[str]:
    c = args.concurrency
    lines = [f"### {name}", "", f"| save_response, c={c} | req/s |", "|---|---:|"]
    shapes = [
        ("no conversation", "1 input + 1 output, 10-item history, no conversation", True),
        ("own conversation", "1 input + 1 output, each appended to its own conversation", True),
        ("one conversation", "1 input + 1 output, all appended to ONE conversation", True),
        ("no conversation", "ablation: group commit off, no conversation", False),
    ]
    for shape, label, group_commit in shapes:
        async with store_factory() as store:
            if not group_commit:  # one transaction per save, as many writers as connections
                writers = 1 if store.db.is_sqlite else POSTGRES_POOL_SIZE
                store.saves = GroupCommitter(store.save_many, max_batch=1, max_writers=writers)
            rates = [
                await save_throughput(store, args.requests, c, shape) for _ in range(args.rounds)
            ]
        rate = statistics.median(rates)
        lines.append(f"| {label} | {rate:,.0f} |")
        print(f"{name}: save {label}: {rate:,.0f} req/s ({', '.join(f'{r:,.0f}' for r in rates)})")
    lines += ["", f"| rehydration throughput, c={c}, 10-item history | per s |", "|---|---:|"]
    async with store_factory() as store:
        response_id = await checkpoint_of(store, 10, 1)
        if store.db.inline is not None:
            variants = [
                ("default", "as shipped (SQLite: reads inline)"),
                ("driver", "ablation: on the driver, through aiosqlite's thread"),
            ]
        else:
            variants = [("default", "as shipped (on the asyncpg driver)")]
        variants.append(("sqlalchemy", "ablation: through SQLAlchemy's execution layer"))
        for variant, label in variants:
            rate = await rehydration_throughput(store, response_id, args, variant)
            lines.append(f"| get_response + load_items, {label} | {rate:,.0f} |")
            print(f"{name}: rehydrations/s {label}: {rate:,.0f}")
    lines += [
        "",
        "| rehydration latency (get_response + load_items), c=1 | p50 ms | p90 ms |",
        "|---|---:|---:|",
    ]
    async with store_factory() as store:
        for size in SIZES:
            response_id = await checkpoint_of(store, size, 1)
            repeat = args.repeat if size < 10_000 else max(5, args.repeat // 5)
            p50, p90 = ms(await time_rehydration(store, response_id, repeat))
            lines.append(f"| {size:,} items, chain depth 1 | {p50:.2f} | {p90:.2f} |")
            print(f"{name}: rehydrate {size}: p50 {p50:.2f} ms p90 {p90:.2f} ms")
        # Same history size, chain depth 1 vs 100; samples interleaved so that drift (other
        # load on the machine, the heap after the 10,000-item runs) hits both alike.
        flat = await checkpoint_of(store, 1_000, 1)
        deep = await checkpoint_of(store, 1_000, 100)
        samples: dict[str, list[float]] = {flat: [], deep: []}
        for response_id in (flat, deep):
            await time_rehydration(store, response_id, 0)
        for _ in range(args.repeat):
            for response_id in (flat, deep):
                samples[response_id] += await time_rehydration(store, response_id, 1, warmup=0)
        for depth, response_id in ((1, flat), (100, deep)):
            p50, p90 = ms(samples[response_id])
            lines.append(f"| 1,000 items, chain depth {depth} | {p50:.2f} | {p90:.2f} |")
            print(f"{name}: rehydrate 1000 depth {depth}: p50 {p50:.2f} ms p90 {p90:.2f} ms")
    return [*lines, ""]


async def main_async(args: argparse.Namespace) -> str:
    load_before = os.getloadavg()[0]
    sections: list[str] = []
    with tempfile.TemporaryDirectory(prefix="respgate-store-bench-") as tmp:
        if args.backend in ("sqlite", "both"):
            sections += await bench_backend(
                "SQLite (aiosqlite, WAL, synchronous=NORMAL)",
                lambda: sqlite_store(Path(args.sqlite_dir or tmp)),
                args,
            )
        if args.backend in ("postgres", "both"):
            sections += await bench_backend(
                "PostgreSQL (asyncpg, local server)",
                lambda: postgres_store(args.postgres_url),
                args,
            )
    header = [
        f"Machine: {platform.machine()}, {os.cpu_count()} CPUs, Python {platform.python_version()},"
        f" event loop {args.loop}; {args.requests:,} saves x {args.rounds} rounds (median),"
        f" {args.repeat} rehydrations per size; load average {load_before:.1f} before,"
        f" {os.getloadavg()[0]:.1f} after (other work on the machine makes figures noisy).",
        "",
    ]
    return "\n".join(header + sections)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--backend", choices=("sqlite", "postgres", "both"), default="both")
    parser.add_argument("--postgres-url", default=DEFAULT_PG_URL)
    parser.add_argument("--sqlite-dir", help="directory for the SQLite file (default: a temp dir)")
    parser.add_argument("--concurrency", type=int, default=32)
    parser.add_argument("--requests", type=int, default=5_000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--repeat", type=int, default=50)
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--loop", choices=("uvloop", "asyncio"), default="uvloop")
    parser.add_argument("--out", default="/tmp/store-bench.md")
    args = parser.parse_args()
    if args.quick:
        args.requests, args.rounds, args.repeat = 1_000, 1, 10
    if args.loop == "uvloop":
        try:
            import uvloop
        except ImportError:
            args.loop = "asyncio"
        else:
            uvloop.install()
    report = asyncio.run(main_async(args))
    print()
    print(report)
    Path(args.out).write_text(report)


if __name__ == "__main__":
    main()
