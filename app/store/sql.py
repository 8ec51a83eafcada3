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
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Sequence
from typing import Any

from sqlalchemy import (
    JSON,
    ColumnElement,
    Select,
    String,
    Text,
    bindparam,
    cast,
    delete,
    func,
    insert,
    select,
    type_coerce,
    update,
)
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from app.core.ids import new_id
from app.core.ports import JsonObject, NewResponse, Page, StoredConversation, StoredResponse
from app.store.batching import GroupCommitter
from app.store.engine import SQLITE_BEGIN, json_dumps, json_loads
from app.store.tables import (
    ITEM_SCHEMA_VERSION,
    conversation_items,
    conversations,
    items,
    responses,
)

ITEM_ALREADY_IN_CONVERSATION = "item_already_in_conversation"
CONVERSATION_NOT_FOUND = "conversation_not_found"
# Most saves one transaction may carry (group commit).
SAVE_BATCH_MAX = 128


class SqlResponseStore:
    """The response store on an ``AsyncEngine`` from ``app.store.engine.create_engine_for``."""

    def __init__(self, engine: AsyncEngine) -> None:
        self._engine = engine
        self._dialect = engine.dialect.name
        if self._dialect not in ("sqlite", "postgresql"):
            raise ValueError(f"unsupported dialect {self._dialect!r}")
        is_sqlite = self._dialect == "sqlite"
        # Writers: one transaction, write lock first on SQLite.
        self._writer = engine.execution_options(**{SQLITE_BEGIN: "BEGIN IMMEDIATE"})
        # Single-statement reads: no transaction round trips.
        self._reader = (
            engine.execution_options(**{SQLITE_BEGIN: None})
            if is_sqlite
            else engine.execution_options(isolation_level="AUTOCOMMIT")
        )
        # Multi-statement reads: one snapshot (a deferred transaction).
        self._snapshot = engine
        self._write_lock: asyncio.Lock | None = asyncio.Lock() if is_sqlite else None
        self._insert_items = _insert_if_absent(self._dialect)
        self._payloads_by_ids = _select_payloads_by_ids(self._dialect)
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
    async def _read(self, *, snapshot: bool = False) -> AsyncIterator[AsyncConnection]:
        async with (self._snapshot if snapshot else self._reader).connect() as conn:
            yield conn

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
        await conn.execute(self._insert_items, [rows[key] for key in sorted(rows)])

    async def _load(self, conn: AsyncConnection, item_ids: Sequence[str]) -> list[JsonObject]:
        """The payloads of ``item_ids`` in that order (repeats repeated, unknown ids skipped).

        One statement returns every stored payload, concatenated by the database into one
        JSON array text, so that decoding is one ``orjson.loads`` instead of a row and a parse
        per item; the order is then restored from each payload's ``id``.
        """
        if not item_ids:
            return []
        joined = await conn.scalar(self._payloads_by_ids, {"ids": list(item_ids)})
        if not joined:
            return []
        by_id: dict[str, JsonObject] = {item["id"]: item for item in json_loads(f"[{joined}]")}
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
            update(conversations)
            .where(conversations.c.id == conversation_id)
            .values(next_position=conversations.c.next_position + count)
            .returning(conversations.c.next_position)
        )
        return None if next_position is None else int(next_position) - count

    async def _append(
        self, conn: AsyncConnection, conversation_id: str, start: int, item_ids: Sequence[str]
    ) -> None:
        if item_ids:
            await conn.execute(
                insert(conversation_items), _position_rows(conversation_id, start, item_ids)
            )

    # ---------------------------------------------------------------- responses

    async def get_response(self, response_id: str) -> StoredResponse | None:
        async with self._read() as conn:
            row = (
                await conn.execute(
                    select(
                        responses.c.response,
                        responses.c.checkpoint_ids,
                        responses.c.input_item_ids,
                        responses.c.conversation_id,
                        responses.c.created_at,
                    ).where(responses.c.id == response_id)
                )
            ).first()
        if row is None:
            return None
        return StoredResponse(
            id=response_id,
            response=row.response,
            checkpoint_ids=row.checkpoint_ids,
            input_item_ids=row.input_item_ids,
            conversation_id=row.conversation_id,
            created_at=int(row.created_at),
        )

    async def load_items(self, item_ids: list[str]) -> list[JsonObject]:
        if not item_ids:
            return []
        async with self._read() as conn:
            return await self._load(conn, item_ids)

    async def existing_item_ids(self, item_ids: list[str]) -> set[str]:
        if not item_ids:
            return set()
        async with self._read() as conn:
            result = await conn.execute(select(items.c.id).where(items.c.id.in_(_unique(item_ids))))
            return {row[0] for row in result}

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
        async with self._write() as conn:
            await self._store_items(conn, [item for new in batch for item in new.new_items])
            await conn.execute(insert(responses), response_rows)
            rows: list[dict[str, Any]] = []
            # Sorted: concurrent batches lock conversations in the same order (no deadlock).
            for conversation_id in sorted(appends):
                blocks = appends[conversation_id]
                count = sum(len(block) for block in blocks)
                start = await self._reserve_positions(conn, conversation_id, count)
                if start is None:
                    raise KeyError(CONVERSATION_NOT_FOUND)
                item_ids = [item_id for block in blocks for item_id in block]
                rows += _position_rows(conversation_id, start, item_ids)
            if rows:
                await conn.execute(insert(conversation_items), rows)

    async def delete_response(self, response_id: str) -> bool:
        async with self._write() as conn:
            result = await conn.execute(delete(responses).where(responses.c.id == response_id))
            return bool(result.rowcount)

    async def list_input_items(
        self, response_id: str, *, after: str | None, limit: int, order: str
    ) -> Page | None:
        async with self._read(snapshot=True) as conn:
            ids = await conn.scalar(
                select(responses.c.input_item_ids).where(responses.c.id == response_id)
            )
            if ids is None:
                return None
            ordered: list[str] = list(reversed(ids)) if _descending(order) else list(ids)
            start = 0
            if after is not None:
                if after not in ordered:
                    raise KeyError(after)
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
        async with self._read() as conn:
            row = (
                await conn.execute(
                    select(conversations.c.created_at, conversations.c.metadata).where(
                        conversations.c.id == conversation_id
                    )
                )
            ).first()
        if row is None:
            return None
        return StoredConversation(
            id=conversation_id, created_at=int(row.created_at), metadata=row.metadata
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
        query = (
            select(conversations.c.id, _payload_text(self._dialect))
            .select_from(conversations)
            .outerjoin(
                conversation_items, conversation_items.c.conversation_id == conversations.c.id
            )
            .outerjoin(items, items.c.id == conversation_items.c.item_id)
            .where(conversations.c.id == conversation_id)
            .order_by(conversation_items.c.position)
        )
        async with self._read() as conn:
            rows = (await conn.execute(query)).all()
        if not rows:
            return None
        texts = [row[1] for row in rows if row[1] is not None]
        return json_loads(f"[{','.join(texts)}]") if texts else []

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
                        select(conversation_items.c.item_id)
                        .where(
                            conversation_items.c.conversation_id == conversation_id,
                            conversation_items.c.item_id.in_(_unique(item_ids)),
                        )
                        .limit(1)
                    )
                    if present is not None:
                        raise ValueError(ITEM_ALREADY_IN_CONVERSATION)
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
        async with self._read(snapshot=True) as conn:
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
                    raise KeyError(after)
                query = query.where(position < cursor if descending else position > cursor)
            query = query.order_by(position.desc() if descending else position).limit(limit + 1)
            payloads = [row[0] for row in await conn.execute(query)]
        return Page(items=payloads[:limit], has_more=len(payloads) > limit)

    async def get_conversation_item(self, conversation_id: str, item_id: str) -> JsonObject | None:
        query = (
            select(items.c.payload)
            .select_from(conversation_items)
            .join(items, items.c.id == conversation_items.c.item_id)
            .where(
                conversation_items.c.conversation_id == conversation_id,
                conversation_items.c.item_id == item_id,
            )
            .limit(1)
        )
        async with self._read() as conn:
            payload: JsonObject | None = await conn.scalar(query)
            return payload

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
        await self._engine.dispose()


class _ConversationMissing(Exception):
    """Rolls back a write whose conversation does not exist."""


def _unique(values: Sequence[str]) -> list[str]:
    return list(dict.fromkeys(values))


def _descending(order: str) -> bool:
    return order == "desc"


def _insert_if_absent(dialect: str) -> Any:
    statement = sqlite.insert(items) if dialect == "sqlite" else postgresql.insert(items)
    return statement.on_conflict_do_nothing(index_elements=[items.c.id])


def _payload_text(dialect: str) -> ColumnElement[str]:
    """``items.payload`` as stored text (no JSON decoding per row)."""
    if dialect == "postgresql":
        return cast(items.c.payload, Text)
    return type_coerce(items.c.payload, Text)


def _position_rows(
    conversation_id: str, start: int, item_ids: Sequence[str]
) -> list[dict[str, Any]]:
    return [
        {"conversation_id": conversation_id, "position": start + offset, "item_id": item_id}
        for offset, item_id in enumerate(item_ids)
    ]


def _select_payloads_by_ids(dialect: str) -> Select[Any]:
    """The stored payload texts of the distinct ``:ids``, joined by commas (or NULL).

    The ids travel as one parameter (a JSON array on SQLite, a ``text[]`` on PostgreSQL), so
    the statement is the same for 1 or 10,000 ids and never hits a bound-parameter limit.
    The payloads are read as text: the ``json`` column keeps what orjson wrote.
    """
    payload = _payload_text(dialect)
    if dialect == "sqlite":
        ids = select(func.json_each(bindparam("ids", type_=JSON)).table_valued("value").c.value)
        return select(func.group_concat(payload, ",", type_=Text)).where(
            items.c.id.in_(ids.scalar_subquery())
        )
    return select(func.string_agg(payload, ",", type_=Text)).where(
        items.c.id == func.any(bindparam("ids", type_=postgresql.ARRAY(String)))
    )
