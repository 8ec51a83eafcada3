"""``SqlDatabase``: what the SQL response store's parts share (``sql_responses``,
``sql_conversations``): the engine and its dialect, the write and read connections, the fast
single-statement reads, and the item writes and reads every part makes.

- Every write is one transaction (``write``). On SQLite, writers of this process also queue on
  an ``asyncio.Lock`` so that they wait in the event loop instead of in SQLite's busy handler
  (which sleeps); other processes are still kept out by the file lock and ``busy_timeout``.
- Multi-statement reads see one snapshot (``read``).
- The hot single-statement reads (``fetch``) skip SQLAlchemy's execution layer
  (``queries.DriverStatement``): on PostgreSQL they run on the asyncpg connection, on SQLite
  inline on a read-only ``sqlite3`` connection of the calling thread (``inline.py``; through
  aiosqlite when busy or big).
- Items are stored once per tenant, by (tenant, id) (insert-if-absent, ``store_items``) and
  read back in one statement (``load``, the tenant's only).
- A conversation's positions are reserved with ``UPDATE conversations SET next_position =
  next_position + n ... RETURNING next_position`` (``reserve_positions``), which takes the
  conversation's row lock (PostgreSQL) or runs under the database write lock (SQLite, ``BEGIN
  IMMEDIATE``): concurrent appends to one conversation are serialized, each batch lands
  contiguously, none is lost.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Sequence
from typing import Any

from sqlalchemy import insert
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from app.protocol.json_types import JsonObject
from app.store.engine import SQLITE_BEGIN, json_dumps, json_loads
from app.store.failures import guard_engine, translated
from app.store.inline import InlineSqliteReader, inline_database_path
from app.store.queries import (
    DriverStatement,
    build_queries,
    compile_for_driver,
    decode_objects,
    position_rows,
)
from app.store.tables import ITEM_SCHEMA_VERSION, conversation_items

# Bigger ``load`` reads leave the event loop (aiosqlite's thread) on SQLite.
INLINE_READ_MAX_IDS = 1_000


class SqlDatabase:
    """An ``AsyncEngine`` from ``app.store.engine.create_engine_for`` as the store uses it."""

    def __init__(self, engine: AsyncEngine, *, inline_reads: bool = True) -> None:
        """``inline_reads``: on a SQLite file, run the small single-statement reads on a
        ``sqlite3`` connection of the calling thread (``inline.py``) instead of aiosqlite's."""
        self.engine = engine
        guard_engine(engine)  # storage failures raise StorageUnavailableError (failures.py)
        dialect = engine.dialect.name
        if dialect not in ("sqlite", "postgresql"):
            raise ValueError(f"unsupported dialect {dialect!r}")
        is_sqlite = dialect == "sqlite"
        self.is_sqlite = is_sqlite
        # Writers: one transaction, write lock first on SQLite.
        self._writer = engine.execution_options(**{SQLITE_BEGIN: "BEGIN IMMEDIATE"})
        # Multi-statement reads: one snapshot (SQLite: a deferred transaction in WAL mode;
        # PostgreSQL: REPEATABLE READ, READ COMMITTED takes a snapshot per statement).
        self._snapshot = (
            engine if is_sqlite else engine.execution_options(isolation_level="REPEATABLE READ")
        )
        self.write_lock: asyncio.Lock | None = asyncio.Lock() if is_sqlite else None
        self.queries = build_queries(dialect)
        # The hot single-statement reads, run on the driver connection (``DriverStatement``).
        self._fast = {
            name: compile_for_driver(getattr(self.queries, name), engine.dialect)
            for name in (
                "get_response",
                "payloads_by_ids",
                "existing_ids",
                "get_conversation",
                "conversation_items",
                "conversation_item",
                "get_tool_session",
                "get_job",
            )
        }
        path = inline_database_path(engine.url) if is_sqlite and inline_reads else None
        self.inline = InlineSqliteReader(path) if path else None

    @contextlib.asynccontextmanager
    async def write(self) -> AsyncIterator[AsyncConnection]:
        """One write transaction (SQLite: after this process's other writers)."""
        if self.write_lock is None:
            async with self._writer.begin() as conn:
                yield conn
            return
        async with self.write_lock, self._writer.begin() as conn:
            yield conn

    @contextlib.asynccontextmanager
    async def read(self) -> AsyncIterator[AsyncConnection]:
        """A connection whose statements see one snapshot."""
        async with self._snapshot.connect() as conn:
            yield conn

    async def fetch(self, name: str, *, inline: bool = True, **values: Any) -> list[Sequence[Any]]:
        """Rows of the fast read ``name`` (one statement, no transaction, on the driver;
        inline on SQLite unless ``inline`` is false or the database is busy)."""
        statement: DriverStatement = self._fast[name]
        args = statement.args(values)
        if inline and self.inline is not None:
            rows = self.inline.fetch(statement.sql, args)
            if rows is not None:
                return rows
        async with self.engine.connect() as conn:
            driver = (await conn.get_raw_connection()).driver_connection
            assert driver is not None
            try:
                if self.is_sqlite:
                    return list(await driver.execute_fetchall(statement.sql, args))
                return list(await driver.fetch(statement.sql, *args))
            except Exception as exc:
                # Not through SQLAlchemy, so it cannot tell a dead connection: drop it, and
                # when the storage is unavailable (a restart closed them), the idle ones too.
                await conn.invalidate()
                failure = translated(exc)
                if failure is not exc:
                    await self.engine.dispose()
                raise failure from exc
            except BaseException:
                await conn.invalidate()
                raise

    async def store_items(
        self, conn: AsyncConnection, new_items: Sequence[tuple[str, JsonObject]]
    ) -> None:
        """Insert the (tenant, item) pairs whose ids the tenant has not stored yet (the others
        are referenced)."""
        if not new_items:
            return
        now = int(time.time())
        rows: dict[tuple[str, str], dict[str, Any]] = {}
        for tenant, item in new_items:
            item_id = str(item["id"])
            if (tenant, item_id) not in rows:  # the first copy of an id given twice is stored
                rows[tenant, item_id] = {
                    "tenant": tenant,
                    "id": item_id,
                    "type": str(item.get("type", "message")),
                    "schema_version": ITEM_SCHEMA_VERSION,
                    "created_at": now,
                    "payload": item,
                }
        # Sorted by key: concurrent writers sharing new ids lock them in the same order.
        await conn.execute(self.queries.insert_items, [rows[key] for key in sorted(rows)])

    async def load(
        self, conn: AsyncConnection | None, item_ids: Sequence[str], *, tenant: str
    ) -> list[JsonObject]:
        """The payloads of ``tenant``'s ``item_ids`` in that order (repeats repeated, unknown
        ids skipped); on ``conn``, or as a fast read when it is None.

        One statement returns every stored payload, concatenated by the database into one
        JSON array text, so that decoding is one ``orjson.loads`` instead of a row and a parse
        per item; the order is then restored from each payload's ``id``.
        """
        if not item_ids:
            return []
        ids = json_dumps(list(item_ids))
        if conn is None:
            inline = len(item_ids) <= INLINE_READ_MAX_IDS
            [(joined,)] = await self.fetch("payloads_by_ids", inline=inline, ids=ids, tenant=tenant)
        else:
            joined = await conn.scalar(self.queries.payloads_by_ids, {"ids": ids, "tenant": tenant})
        if not joined:
            return []
        by_id: dict[str, JsonObject] = {item["id"]: item for item in decode_objects([joined])}
        loaded: list[JsonObject] = []
        seen: set[str] = set()
        for item_id in item_ids:
            item = by_id.get(item_id)
            if item is None:
                continue
            if item_id in seen:  # a repeated item is its own object, as it would be from JSON
                item = json_loads(json_dumps(item))
            seen.add(item_id)
            loaded.append(item)
        return loaded

    async def reserve_positions(
        self, conn: AsyncConnection, tenant: str, conversation_id: str, count: int
    ) -> int | None:
        """Lock ``tenant``'s conversation and reserve ``count`` positions; the first one, or
        None (no such conversation of the tenant)."""
        values = {
            "conversation_id": conversation_id,
            "count": count,
            "for_tenant": tenant,
            "now": int(time.time()),
        }
        next_position = await conn.scalar(self.queries.reserve_one, values)
        return None if next_position is None else int(next_position) - count

    async def reserve_many(
        self, conn: AsyncConnection, tenant: str, counts: dict[str, int]
    ) -> dict[str, int]:
        """``reserve_positions`` for several of ``tenant``'s conversations at once: their
        first positions (a missing conversation is missing from the result)."""
        if len(counts) == 1:
            [(conversation_id, count)] = counts.items()
            start = await self.reserve_positions(conn, tenant, conversation_id, count)
            return {} if start is None else {conversation_id: start}
        param: dict[str, Any] = {
            "counts": json_dumps(dict(sorted(counts.items()))),
            "for_tenant": tenant,
        }
        if self.queries.lock_many is not None:
            # Row locks in id order, so that concurrent batches never deadlock.
            await conn.execute(self.queries.lock_many, param)
        rows = await conn.execute(self.queries.reserve_many, {**param, "now": int(time.time())})
        return {row[0]: int(row[1]) - counts[row[0]] for row in rows}

    async def append(
        self,
        conn: AsyncConnection,
        tenant: str,
        conversation_id: str,
        start: int,
        item_ids: Sequence[str],
    ) -> None:
        """Put ``item_ids`` in ``tenant``'s conversation from position ``start`` (reserved
        before)."""
        if item_ids:
            rows = position_rows(tenant, conversation_id, start, item_ids)
            await conn.execute(insert(conversation_items), rows)

    async def aclose(self) -> None:
        if self.inline is not None:
            self.inline.close()
        await self.engine.dispose()


def is_descending(order: str) -> bool:
    """A list's ``order`` parameter: ``"desc"`` or ``"asc"``."""
    return order == "desc"
