"""The cost of a tool engine session's persistence per round: ``ToolSessions.run`` (read the
saved state, set the session up, execute, write the new state, tear down) against the same
engine's ``execute`` on a session kept live, in one run.

    python bench/tool_sessions_bench.py              # 500 rounds per case
    python bench/tool_sessions_bench.py --rounds 200 --postgres postgresql+asyncpg://postgres@127.0.0.1:5432/test

The engine does no I/O (it answers at once and records the call), so the figures are the
bookkeeping alone: the multi engine, the session book's copies, and the store (in memory, an
SQLite file, PostgreSQL when ``--postgres`` names a reachable server). Each case starts from a
session with ``history`` earlier calls of about 300 bytes each (the state grows by one call per
round; the engine keeps at most 200).
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from app.core.engines import (
    EngineCall,
    EngineResult,
    ToolSessionStore,
    ToolSpec,
    history_entry,
)
from app.core.session_book import SessionBook
from app.core.tenancy import DEFAULT_TENANT
from app.core.tool_sessions import ToolSessions
from app.protocol.json_types import JsonObject
from app.tools.engines.multi import MultiEngine, Route

SPEC = ToolSpec(
    "crm",
    "update_customer",
    "Change a customer's fields",
    {"type": "object", "properties": {"id": {"type": "string"}, "plan": {"type": "string"}}},
)


class NullEngine:
    """Answers every call at once and records it."""

    def __init__(self) -> None:
        self.book = SessionBook()

    async def setup(self, session_id: str, state: JsonObject | None = None) -> None:
        self.book.setup(session_id, state)

    async def teardown(self, session_id: str) -> None:
        self.book.teardown(session_id)

    def get_session_state(self, session_id: str) -> JsonObject:
        return self.book.state(session_id)

    async def execute(self, session_id: str, calls: Sequence[EngineCall]) -> list[EngineResult]:
        results = []
        for call in calls:
            result = EngineResult(call.call_id, '{"id": "cus_1", "plan": "pro", "ok": true}')
            self.book.record(session_id, call, result)
            results.append(result)
        return results

    async def simulate(self, session_id: str, calls: Sequence[EngineCall]) -> list[EngineResult]:
        return await self.execute(session_id, calls)


def calls(n: int) -> list[EngineCall]:
    return [EngineCall(f"call_{n}", SPEC, '{"id": "cus_1", "plan": "pro"}')]


def saved_state(history: int) -> JsonObject:
    entries = [
        history_entry(calls(i)[0], EngineResult(f"call_{i}", "x" * 120)) for i in range(history)
    ]
    return {"engines": {"api": {"history": entries}}}


def pct(values: list[float], p: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(p / 100 * len(ordered)))]


async def one_case(store: ToolSessionStore | None, history: int, rounds: int) -> dict[str, float]:
    engine = NullEngine()
    multi = MultiEngine({"crm": Route("api", engine)})
    sessions = ToolSessions(multi, store)
    state = saved_state(history)
    session = f"bench_{history}_{time.monotonic_ns()}"
    if store is not None:
        await store.save_tool_session(session, state, tenant=DEFAULT_TENANT)
    else:
        await sessions._store.save_tool_session(session, state, tenant=DEFAULT_TENANT)
    live = f"{session}_live"
    await multi.setup(live, state)
    bare: list[float] = []
    persisted: list[float] = []
    for n in range(rounds):
        started = time.perf_counter()
        await multi.execute(live, calls(n))
        bare.append((time.perf_counter() - started) * 1e3)
        started = time.perf_counter()
        await sessions.run(session, calls(n), tenant=DEFAULT_TENANT)
        persisted.append((time.perf_counter() - started) * 1e3)
    added = [p - b for p, b in zip(persisted, bare, strict=True)]
    return {
        "bare_p50": statistics.median(bare),
        "run_p50": statistics.median(persisted),
        "added_p50": statistics.median(added),
        "added_p99": pct(added, 99),
    }


async def main_async(args: argparse.Namespace) -> None:
    from app.store.engine import create_engine_for
    from app.store.migrate import prepare_database
    from app.store.sql import SqlResponseStore

    stores: list[tuple[str, ToolSessionStore | None, object]] = [("memory", None, None)]
    tmp = tempfile.TemporaryDirectory()
    url = f"sqlite+aiosqlite:///{Path(tmp.name) / 'bench.db'}"
    await prepare_database(url, auto_migrate=True)
    sqlite = SqlResponseStore(create_engine_for(url))
    stores.append(("SQLite file", sqlite, sqlite))
    if args.postgres:
        try:
            await prepare_database(args.postgres, auto_migrate=True)
            pg = SqlResponseStore(create_engine_for(args.postgres))
            await pg.load_tool_session("probe", tenant=DEFAULT_TENANT)
            stores.append(("PostgreSQL", pg, pg))
        except Exception as exc:
            print(f"PostgreSQL skipped: {exc}", file=sys.stderr)
    print("| store | history | execute p50 | run p50 | added p50 | added p99 |")
    print("|---|---|---|---|---|---|")
    for name, store, _ in stores:
        for history in (0, 20, 199):
            figures = await one_case(store, history, args.rounds)
            print(
                f"| {name} | {history} | {figures['bare_p50']:.3f} ms | {figures['run_p50']:.3f} ms"
                f" | {figures['added_p50']:.3f} ms | {figures['added_p99']:.3f} ms |"
            )
    for _, _, closable in stores:
        if closable is not None:
            await closable.aclose()  # type: ignore[attr-defined]
    tmp.cleanup()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--rounds", type=int, default=500)
    ap.add_argument("--postgres", help="a PostgreSQL URL (postgresql+asyncpg://...)")
    asyncio.run(main_async(ap.parse_args()))


if __name__ == "__main__":
    main()
