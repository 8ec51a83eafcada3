"""``SqlResponses``: the responses half of the SQL response store (``sql.SqlResponseStore``).

- A response row carries its checkpoint (history + own input + output item ids) as a JSON list,
  so rehydration is ``get_response`` + ``load_items``: two indexed reads, whatever the depth of
  the ``previous_response_id`` chain.
- Concurrent ``save_response`` calls share transactions (group commit, ``batching.py``), each
  still atomic on its own: ~10x the throughput of one transaction per save at c=32. On a SQLite
  file the whole transaction goes in one hop to a writer thread (``sqlite_writer.py``).
- A response row records the first response of its ``previous_response_id`` chain
  (``root_id``, its own id for a root; NULL in rows from before migration 0003, read as the
  row's own id).
- Every row is its tenant's: a response is read, listed and deleted only by its tenant, its
  checkpoint's ids name that tenant's items, and a save appends only to a conversation of the
  same tenant.
- A save into a conversation appends its input and output ids to it (positions reserved as in
  ``sql_database``); ``save_response`` raises ``ConversationNotFoundError`` when the
  conversation is gone (nothing is written), ``list_input_items`` ``UnknownCursorError`` for an
  unknown ``after``.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

from sqlalchemy import delete, insert, select
from sqlalchemy.ext.asyncio import AsyncConnection

from app.core.ports import NewResponse, Page, StoredResponse
from app.core.store_errors import ConversationNotFoundError, UnknownCursorError
from app.protocol.json_types import JsonObject
from app.store.batching import GroupCommitter
from app.store.engine import json_dumps, json_loads
from app.store.inline import inline_database_path
from app.store.queries import position_rows
from app.store.sql_database import SqlDatabase, is_descending
from app.store.sqlite_writer import SqliteWriter, write_saves
from app.store.tables import ITEM_SCHEMA_VERSION, conversation_items, responses

# Most saves one transaction may carry (group commit).
SAVE_BATCH_MAX = 128

# One save: the tenant and what it stores.
Save = tuple[str, NewResponse]


class SqlResponses:
    """Responses and their items on a ``SqlDatabase``."""

    def __init__(self, db: SqlDatabase) -> None:
        self._db = db
        # Saves on a SQLite file: the whole transaction in one hop to a writer thread.
        file_path = inline_database_path(db.engine.url) if db.is_sqlite else None
        self._sqlite_writer = SqliteWriter(file_path) if file_path else None
        # Concurrent saves share transactions; SQLite has one writer anyway.
        self.saves = GroupCommitter(
            self.save_many, max_batch=SAVE_BATCH_MAX, max_writers=1 if db.is_sqlite else 4
        )

    async def get_response(self, response_id: str, *, tenant: str) -> StoredResponse | None:
        rows = await self._db.fetch("get_response", response_id=response_id, tenant=tenant)
        if not rows:
            return None
        response, checkpoint_ids, input_item_ids, conversation_id, created_at, root_id = rows[0]
        return StoredResponse(
            id=response_id,
            response=json_loads(response),
            checkpoint_ids=json_loads(checkpoint_ids),
            input_item_ids=json_loads(input_item_ids),
            conversation_id=conversation_id,
            created_at=int(created_at),
            root_id=root_id or response_id,
        )

    async def load_items(self, item_ids: list[str], *, tenant: str) -> list[JsonObject]:
        return await self._db.load(None, item_ids, tenant=tenant)

    async def existing_item_ids(self, item_ids: list[str], *, tenant: str) -> set[str]:
        if not item_ids:
            return set()
        rows = await self._db.fetch("existing_ids", ids=json_dumps(item_ids), tenant=tenant)
        return {row[0] for row in rows}

    async def save_response(self, new: NewResponse, *, tenant: str) -> None:
        await self.saves.submit((tenant, new))

    async def save_many(self, batch: Sequence[Save]) -> None:
        """Write a batch of responses in one transaction (see ``GroupCommitter``)."""
        response_rows: list[dict[str, Any]] = []
        # (tenant, conversation id) -> id lists, in batch order
        appends: dict[tuple[str, str], list[list[str]]] = {}
        for tenant, new in batch:
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
                    "root_id": new.root_id or response["id"],
                    "tenant": tenant,
                }
            )
            if new.conversation_id is not None:
                appends.setdefault((tenant, new.conversation_id), []).append(
                    [*new.input_item_ids, *output_ids]
                )
        if self._sqlite_writer is not None:
            await self._save_many_sqlite(batch, response_rows, appends)
            return
        db = self._db
        async with db.write() as conn:
            new_items = [(tenant, item) for tenant, new in batch for item in new.new_items]
            await db.store_items(conn, new_items)
            await conn.execute(insert(responses), response_rows)
            if appends:
                await self._append_all(conn, appends)

    async def _append_all(
        self, conn: AsyncConnection, appends: dict[tuple[str, str], list[list[str]]]
    ) -> None:
        """Append each save's ids to its conversation, the conversations of one tenant at a
        time (tenants in order: concurrent batches lock in the same order)."""
        rows: list[dict[str, Any]] = []
        for tenant in sorted({tenant for tenant, _ in appends}):
            blocks_of = {key[1]: blocks for key, blocks in appends.items() if key[0] == tenant}
            counts = {key: sum(map(len, blocks)) for key, blocks in blocks_of.items()}
            starts = await self._db.reserve_many(conn, tenant, counts)
            missing = sorted(set(counts) - set(starts))
            if missing:  # gone, or another tenant's
                raise ConversationNotFoundError(missing[0])
            for conversation_id, blocks in blocks_of.items():
                item_ids = [item_id for block in blocks for item_id in block]
                start = starts[conversation_id]
                rows += position_rows(tenant, conversation_id, start, item_ids)
        await conn.execute(insert(conversation_items), rows)

    async def _save_many_sqlite(
        self,
        batch: Sequence[Save],
        response_rows: list[dict[str, Any]],
        appends: dict[tuple[str, str], list[list[str]]],
    ) -> None:
        assert self._sqlite_writer is not None and self._db.write_lock is not None
        now = int(time.time())
        items: dict[tuple[str, str], tuple[Any, ...]] = {}
        for tenant, new in batch:
            for item in new.new_items:
                key = (tenant, str(item["id"]))
                if key not in items:  # the first copy of an id given twice is stored
                    kind = str(item.get("type", "message"))
                    items[key] = (*key, kind, ITEM_SCHEMA_VERSION, now, json_dumps(item))
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
                row["root_id"],
                row["tenant"],
            )
            for row in response_rows
        ]
        flat = {key: [i for block in blocks for i in block] for key, blocks in appends.items()}
        ordered_items = [items[key] for key in sorted(items)]
        async with self._db.write_lock:
            await self._sqlite_writer.transaction(
                lambda connection: write_saves(connection, ordered_items, rows, flat)
            )

    async def delete_response(self, response_id: str, *, tenant: str) -> bool:
        async with self._db.write() as conn:
            result = await conn.execute(
                delete(responses).where(responses.c.id == response_id, responses.c.tenant == tenant)
            )
            return bool(result.rowcount)

    async def list_input_items(
        self, response_id: str, *, tenant: str, after: str | None, limit: int, order: str
    ) -> Page | None:
        async with self._db.read() as conn:
            ids = await conn.scalar(
                select(responses.c.input_item_ids).where(
                    responses.c.id == response_id, responses.c.tenant == tenant
                )
            )
            if ids is None:
                return None
            ordered: list[str] = list(reversed(ids)) if is_descending(order) else list(ids)
            start = 0
            if after is not None:
                if after not in ordered:
                    raise UnknownCursorError(after)
                # The last occurrence: paging always moves forward, even over repeated ids.
                start = len(ordered) - ordered[::-1].index(after)
            window = ordered[start : start + limit + 1]
            loaded = await self._db.load(conn, window[:limit], tenant=tenant)
        return Page(items=loaded, has_more=len(window) > limit)

    async def close_saves(self) -> None:
        """Finish the saves under way and stop the SQLite writer thread."""
        await self.saves.aclose()
        if self._sqlite_writer is not None:
            await self._sqlite_writer.aclose()
