"""``SqlResponseStore``: the ``ResponseStore`` port on SQLAlchemy Core (SQLite or PostgreSQL).

- Items are stored once, by id (insert-if-absent): an item whose id is already stored is
  referenced, never copied or overwritten.
- A response row carries its checkpoint (history + own input + output item ids) as a JSON list,
  so rehydration is ``get_response`` + ``load_items``: two indexed reads, whatever the depth of
  the ``previous_response_id`` chain.
- A conversation's items are ``conversation_items`` rows ordered by ``position``. An append
  reserves a contiguous block of positions with
  ``UPDATE conversations SET next_position = next_position + n ... RETURNING next_position``,
  which takes the conversation's row lock (PostgreSQL) or runs under the database write lock
  (SQLite, ``BEGIN IMMEDIATE``): concurrent appends to one conversation are serialized, each
  batch lands contiguously, none is lost.
- Every write is one transaction. On SQLite, writers of this process also queue on an
  ``asyncio.Lock`` so that they wait in the event loop instead of in SQLite's busy handler
  (which sleeps); other processes are still kept out by the file lock and ``busy_timeout``.
- Concurrent ``save_response`` calls share transactions (group commit, ``batching.py``), each
  still atomic on its own: ~10x the throughput of one transaction per save at c=32.
- The hot single-statement reads (``get_response``, ``load_items`` ...) skip SQLAlchemy's
  execution layer (``queries.DriverStatement``): on PostgreSQL they run on the asyncpg
  connection, on SQLite inline on a read-only ``sqlite3`` connection of the calling thread
  (``inline.py``; through aiosqlite when busy or big). Payloads come back as the JSON text
  that was stored, concatenated by the database, and are decoded with one ``orjson.loads``.
- Errors (``app.core.store_errors``): ``save_response`` raises ``ConversationNotFoundError``
  when its conversation is gone (nothing is written); ``append_conversation_items`` raises
  ``ItemAlreadyInConversationError``; the list methods raise ``UnknownCursorError`` for an
  unknown ``after``.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Sequence
from typing import Any

from sqlalchemy import Select, delete, func, insert, select, update
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from app.core.ids import new_id
from app.core.ports import NewResponse, Page, StoredConversation, StoredResponse
from app.core.store_errors import (
    ConversationNotFoundError,
    ItemAlreadyInConversationError,
    UnknownCursorError,
)
from app.protocol.json_types import JsonObject
from app.store.batching import GroupCommitter
from app.store.engine import SQLITE_BEGIN, json_dumps, json_loads
from app.store.inline import InlineSqliteReader, inline_database_path
from app.store.queries import (
    DriverStatement,
    build_queries,
    compile_for_driver,
    decode_objects,
    position_rows,
)
from app.store.sqlite_writer import SqliteWriter, write_saves
from app.store.tables import (
    ITEM_SCHEMA_VERSION,
    conversation_items,
    conversations,
    items,
    responses,
)

# Bigger ``load_items`` reads leave the event loop (aiosqlite's thread) on SQLite.
INLINE_READ_MAX_IDS = 1_000
# Most saves one transaction may carry (group commit).
SAVE_BATCH_MAX = 128


class SqlResponseStore:
    """The response store on an ``AsyncEngine`` from ``app.store.engine.create_engine_for``."""

    def __init__(self, engine: AsyncEngine, *, inline_reads: bool = True) -> None:
        """``inline_reads``: on a SQLite file, run the small single-statement reads on a
        ``sqlite3`` connection of the calling thread (``inline.py``) instead of aiosqlite's."""
        self._engine = engine
        self._dialect = engine.dialect.name
        if self._dialect not in ("sqlite", "postgresql"):
            raise ValueError(f"unsupported dialect {self._dialect!r}")
        is_sqlite = self._dialect == "sqlite"
        self._is_sqlite = is_sqlite
        # Writers: one transaction, write lock first on SQLite.
        self._writer = engine.execution_options(**{SQLITE_BEGIN: "BEGIN IMMEDIATE"})
        # Multi-statement reads: one snapshot (SQLite: a deferred transaction in WAL mode;
        # PostgreSQL: REPEATABLE READ, READ COMMITTED takes a snapshot per statement).
        self._snapshot = (
            engine if is_sqlite else engine.execution_options(isolation_level="REPEATABLE READ")
        )
        self._write_lock: asyncio.Lock | None = asyncio.Lock() if is_sqlite else None
        self._q = build_queries(self._dialect)
        # The hot single-statement reads, run on the driver connection (``DriverStatement``).
        self._fast = {
            name: compile_for_driver(getattr(self._q, name), engine.dialect)
            for name in (
                "get_response",
                "payloads_by_ids",
                "existing_ids",
                "get_conversation",
                "conversation_items",
                "conversation_item",
            )
        }
        path = inline_database_path(engine.url) if is_sqlite and inline_reads else None
        self._inline = InlineSqliteReader(path) if path else None
        # Saves on a SQLite file: the whole transaction in one hop to a writer thread.
        file_path = inline_database_path(engine.url) if is_sqlite else None
        self._sqlite_writer = SqliteWriter(file_path) if file_path else None
        # Concurrent saves share transactions; SQLite has one writer anyway.
        self._saves = GroupCommitter(
            self._save_many, max_batch=SAVE_BATCH_MAX, max_writers=1 if is_sqlite else 4
        )

    # ---------------------------------------------------------------- plumbing

    @contextlib.asynccontextmanager
    async def _write(self) -> AsyncIterator[AsyncConnection]:
        if self._write_lock is None:
            async with self._writer.begin() as conn:
                yield conn
            return
        async with self._write_lock, self._writer.begin() as conn:
            yield conn

    @contextlib.asynccontextmanager
    async def _read(self) -> AsyncIterator[AsyncConnection]:
        async with self._snapshot.connect() as conn:
            yield conn

    async def _fetch(self, name: str, *, inline: bool = True, **values: Any) -> list[Sequence[Any]]:
        """Rows of the fast read ``name`` (one statement, no transaction, on the driver;
        inline on SQLite unless ``inline`` is false or the database is busy)."""
        statement: DriverStatement = self._fast[name]
        args = statement.args(values)
        if inline and self._inline is not None:
            rows = self._inline.fetch(statement.sql, args)
            if rows is not None:
                return rows
        async with self._engine.connect() as conn:
            driver = (await conn.get_raw_connection()).driver_connection
            assert driver is not None
            try:
                if self._is_sqlite:
                    return list(await driver.execute_fetchall(statement.sql, args))
                return list(await driver.fetch(statement.sql, *args))
            except BaseException:
                # Not through SQLAlchemy, so it cannot tell a dead connection: drop it.
                await conn.invalidate()
                raise

    async def _store_items(self, conn: AsyncConnection, new_items: Sequence[JsonObject]) -> None:
        if not new_items:
            return
        now = int(time.time())
        rows: dict[str, dict[str, Any]] = {}
        for item in new_items:
            item_id = str(item["id"])
            if item_id not in rows:  # the first copy of an id given twice is the stored one
                rows[item_id] = {
                    "id": item_id,
                    "type": str(item.get("type", "message")),
                    "schema_version": ITEM_SCHEMA_VERSION,
                    "created_at": now,
                    "payload": item,
                }
        # Sorted by id: concurrent writers sharing new ids lock them in the same order.
        await conn.execute(self._q.insert_items, [rows[key] for key in sorted(rows)])

    async def _load(
        self, conn: AsyncConnection | None, item_ids: Sequence[str]
    ) -> list[JsonObject]:
        """The payloads of ``item_ids`` in that order (repeats repeated, unknown ids skipped).

        One statement returns every stored payload, concatenated by the database into one
        JSON array text, so that decoding is one ``orjson.loads`` instead of a row and a parse
        per item; the order is then restored from each payload's ``id``.
        """
        if not item_ids:
            return []
        ids = json_dumps(list(item_ids))
        if conn is None:
            inline = len(item_ids) <= INLINE_READ_MAX_IDS
            [(joined,)] = await self._fetch("payloads_by_ids", inline=inline, ids=ids)
        else:
            joined = await conn.scalar(self._q.payloads_by_ids, {"ids": ids})
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

    async def _reserve_positions(
        self, conn: AsyncConnection, conversation_id: str, count: int
    ) -> int | None:
        """Lock the conversation and reserve ``count`` positions; the first one, or None."""
        next_position = await conn.scalar(
            self._q.reserve_one, {"conversation_id": conversation_id, "count": count}
        )
        return None if next_position is None else int(next_position) - count

    async def _reserve_many(self, conn: AsyncConnection, counts: dict[str, int]) -> dict[str, int]:
        """``_reserve_positions`` for several conversations at once: their first positions
        (a missing conversation is missing from the result)."""
        if len(counts) == 1:
            [(conversation_id, count)] = counts.items()
            start = await self._reserve_positions(conn, conversation_id, count)
            return {} if start is None else {conversation_id: start}
        param = {"counts": json_dumps(dict(sorted(counts.items())))}
        if self._q.lock_many is not None:
            # Row locks in id order, so that concurrent batches never deadlock.
            await conn.execute(self._q.lock_many, param)
        rows = await conn.execute(self._q.reserve_many, param)
        return {row[0]: int(row[1]) - counts[row[0]] for row in rows}

    async def _append(
        self, conn: AsyncConnection, conversation_id: str, start: int, item_ids: Sequence[str]
    ) -> None:
        if item_ids:
            await conn.execute(
                insert(conversation_items), position_rows(conversation_id, start, item_ids)
            )

    # ---------------------------------------------------------------- responses

    async def get_response(self, response_id: str) -> StoredResponse | None:
        rows = await self._fetch("get_response", response_id=response_id)
        if not rows:
            return None
        response, checkpoint_ids, input_item_ids, conversation_id, created_at = rows[0]
        return StoredResponse(
            id=response_id,
            response=json_loads(response),
            checkpoint_ids=json_loads(checkpoint_ids),
            input_item_ids=json_loads(input_item_ids),
            conversation_id=conversation_id,
            created_at=int(created_at),
        )

    async def load_items(self, item_ids: list[str]) -> list[JsonObject]:
        return await self._load(None, item_ids)

    async def existing_item_ids(self, item_ids: list[str]) -> set[str]:
        if not item_ids:
            return set()
        rows = await self._fetch("existing_ids", ids=json_dumps(item_ids))
        return {row[0] for row in rows}

    async def save_response(self, new: NewResponse) -> None:
        await self._saves.submit(new)

    async def _save_many(self, batch: Sequence[NewResponse]) -> None:
        """Write a batch of responses in one transaction (see ``GroupCommitter``)."""
        response_rows: list[dict[str, Any]] = []
        appends: dict[str, list[list[str]]] = {}  # conversation id -> id lists, in batch order
        for new in batch:
            response = new.response
            output_ids = [str(item["id"]) for item in response.get("output") or ()]
            response_rows.append(
                {
                    "id": response["id"],
                    "created_at": int(response.get("created_at") or time.time()),
                    "status": response["status"],
                    "model": response.get("model") or "",
                    "previous_response_id": response.get("previous_response_id"),
                    "conversation_id": new.conversation_id,
                    "checkpoint_ids": [*new.history_ids, *new.input_item_ids, *output_ids],
                    "input_item_ids": list(new.input_item_ids),
                    "response": response,
                }
            )
            if new.conversation_id is not None:
                appends.setdefault(new.conversation_id, []).append(
                    [*new.input_item_ids, *output_ids]
                )
        if self._sqlite_writer is not None:
            await self._save_many_sqlite(batch, response_rows, appends)
            return
        async with self._write() as conn:
            await self._store_items(conn, [item for new in batch for item in new.new_items])
            await conn.execute(insert(responses), response_rows)
            if appends:
                counts = {key: sum(map(len, blocks)) for key, blocks in appends.items()}
                starts = await self._reserve_many(conn, counts)
                missing = sorted(set(counts) - set(starts))
                if missing:
                    raise ConversationNotFoundError(missing[0])
                rows: list[dict[str, Any]] = []
                for conversation_id, blocks in appends.items():
                    item_ids = [item_id for block in blocks for item_id in block]
                    rows += position_rows(conversation_id, starts[conversation_id], item_ids)
                await conn.execute(insert(conversation_items), rows)

    async def _save_many_sqlite(
        self,
        batch: Sequence[NewResponse],
        response_rows: list[dict[str, Any]],
        appends: dict[str, list[list[str]]],
    ) -> None:
        assert self._sqlite_writer is not None and self._write_lock is not None
        now = int(time.time())
        items: dict[str, tuple[Any, ...]] = {}
        for new in batch:
            for item in new.new_items:
                item_id = str(item["id"])
                if item_id not in items:  # the first copy of an id given twice is stored
                    kind = str(item.get("type", "message"))
                    items[item_id] = (item_id, kind, ITEM_SCHEMA_VERSION, now, json_dumps(item))
        rows = [
            (
                row["id"],
                row["created_at"],
                row["status"],
                row["model"],
                row["previous_response_id"],
                row["conversation_id"],
                json_dumps(row["checkpoint_ids"]),
                json_dumps(row["input_item_ids"]),
                json_dumps(row["response"]),
            )
            for row in response_rows
        ]
        flat = {key: [i for block in blocks for i in block] for key, blocks in appends.items()}
        ordered_items = [items[key] for key in sorted(items)]
        async with self._write_lock:
            await self._sqlite_writer.transaction(
                lambda connection: write_saves(connection, ordered_items, rows, flat)
            )

    async def delete_response(self, response_id: str) -> bool:
        async with self._write() as conn:
            result = await conn.execute(delete(responses).where(responses.c.id == response_id))
            return bool(result.rowcount)

    async def list_input_items(
        self, response_id: str, *, after: str | None, limit: int, order: str
    ) -> Page | None:
        async with self._read() as conn:
            ids = await conn.scalar(
                select(responses.c.input_item_ids).where(responses.c.id == response_id)
            )
            if ids is None:
                return None
            ordered: list[str] = list(reversed(ids)) if _descending(order) else list(ids)
            start = 0
            if after is not None:
                if after not in ordered:
                    raise UnknownCursorError(after)
                # The last occurrence: paging always moves forward, even over repeated ids.
                start = len(ordered) - ordered[::-1].index(after)
            window = ordered[start : start + limit + 1]
            loaded = await self._load(conn, window[:limit])
        return Page(items=loaded, has_more=len(window) > limit)

    # ---------------------------------------------------------------- conversations

    async def create_conversation(
        self, metadata: dict[str, str], items: list[JsonObject]
    ) -> StoredConversation:
        conversation = StoredConversation(
            id=new_id("conv"), created_at=int(time.time()), metadata=dict(metadata)
        )
        item_ids = [str(item["id"]) for item in items]
        async with self._write() as conn:
            await conn.execute(
                insert(conversations).values(
                    id=conversation.id,
                    created_at=conversation.created_at,
                    metadata=conversation.metadata,
                    next_position=len(item_ids),
                )
            )
            await self._store_items(conn, items)
            await self._append(conn, conversation.id, 0, item_ids)
        return conversation

    async def get_conversation(self, conversation_id: str) -> StoredConversation | None:
        rows = await self._fetch("get_conversation", conversation_id=conversation_id)
        if not rows:
            return None
        created_at, metadata = rows[0]
        return StoredConversation(
            id=conversation_id, created_at=int(created_at), metadata=json_loads(metadata)
        )

    async def update_conversation(
        self, conversation_id: str, metadata: dict[str, str]
    ) -> StoredConversation | None:
        async with self._write() as conn:
            created_at = await conn.scalar(
                update(conversations)
                .where(conversations.c.id == conversation_id)
                .values(metadata=dict(metadata))
                .returning(conversations.c.created_at)
            )
        if created_at is None:
            return None
        return StoredConversation(
            id=conversation_id, created_at=int(created_at), metadata=dict(metadata)
        )

    async def delete_conversation(self, conversation_id: str) -> bool:
        async with self._write() as conn:
            await conn.execute(
                delete(conversation_items).where(
                    conversation_items.c.conversation_id == conversation_id
                )
            )
            result = await conn.execute(
                delete(conversations).where(conversations.c.id == conversation_id)
            )
            return bool(result.rowcount)

    async def conversation_items(self, conversation_id: str) -> list[JsonObject] | None:
        # One query: the conversation row (to tell "missing" from "empty") joined to its items,
        # payloads as text, decoded at once.
        rows = await self._fetch("conversation_items", conversation_id=conversation_id)
        if not rows:
            return None
        return decode_objects([row[1] for row in rows if row[1] is not None])

    async def append_conversation_items(
        self, conversation_id: str, items: list[JsonObject]
    ) -> list[JsonObject] | None:
        item_ids = [str(item["id"]) for item in items]
        try:
            async with self._write() as conn:
                await self._store_items(conn, items)
                start = await self._reserve_positions(conn, conversation_id, len(item_ids))
                if start is None:
                    raise _ConversationMissing
                if item_ids:
                    # Under the conversation's lock: no concurrent append can slip in between.
                    present = await conn.scalar(
                        self._q.in_conversation,
                        {"conversation_id": conversation_id, "ids": json_dumps(item_ids)},
                    )
                    if present is not None:
                        raise ItemAlreadyInConversationError(conversation_id)
                await self._append(conn, conversation_id, start, item_ids)
                # The stored payloads: an id that was already stored keeps its first payload.
                return await self._load(conn, item_ids)
        except _ConversationMissing:
            return None

    async def list_conversation_items(
        self, conversation_id: str, *, after: str | None, limit: int, order: str
    ) -> Page | None:
        descending = _descending(order)
        position = conversation_items.c.position
        async with self._read() as conn:
            exists = await conn.scalar(
                select(conversations.c.id).where(conversations.c.id == conversation_id)
            )
            if exists is None:
                return None
            query: Select[Any] = (
                select(items.c.payload)
                .select_from(conversation_items)
                .join(items, items.c.id == conversation_items.c.item_id)
                .where(conversation_items.c.conversation_id == conversation_id)
            )
            if after is not None:
                # The last occurrence in this order: paging moves forward over repeated ids.
                cursor = await conn.scalar(
                    select(func.min(position) if descending else func.max(position)).where(
                        conversation_items.c.conversation_id == conversation_id,
                        conversation_items.c.item_id == after,
                    )
                )
                if cursor is None:
                    raise UnknownCursorError(after)
                query = query.where(position < cursor if descending else position > cursor)
            query = query.order_by(position.desc() if descending else position).limit(limit + 1)
            payloads = [row[0] for row in await conn.execute(query)]
        return Page(items=payloads[:limit], has_more=len(payloads) > limit)

    async def get_conversation_item(self, conversation_id: str, item_id: str) -> JsonObject | None:
        rows = await self._fetch(
            "conversation_item", conversation_id=conversation_id, item_id=item_id
        )
        return decode_objects([rows[0][0]])[0] if rows else None

    async def delete_conversation_item(self, conversation_id: str, item_id: str) -> bool:
        async with self._write() as conn:
            result = await conn.execute(
                delete(conversation_items).where(
                    conversation_items.c.conversation_id == conversation_id,
                    conversation_items.c.item_id == item_id,
                )
            )
            return bool(result.rowcount)

    async def aclose(self) -> None:
        await self._saves.aclose()
        if self._sqlite_writer is not None:
            await self._sqlite_writer.aclose()
        if self._inline is not None:
            self._inline.close()
        await self._engine.dispose()


class _ConversationMissing(Exception):
    """Rolls back a write whose conversation does not exist."""


def _descending(order: str) -> bool:
    return order == "desc"
