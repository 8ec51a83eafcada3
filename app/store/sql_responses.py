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

    async def get_response(self, response_id: str) -> StoredResponse | None:
        rows = await self._db.fetch("get_response", response_id=response_id)
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

    async def load_items(self, item_ids: list[str]) -> list[JsonObject]:
        return await self._db.load(None, item_ids)

    async def existing_item_ids(self, item_ids: list[str]) -> set[str]:
        if not item_ids:
            return set()
        rows = await self._db.fetch("existing_ids", ids=json_dumps(item_ids))
        return {row[0] for row in rows}

    async def save_response(self, new: NewResponse) -> None:
        await self.saves.submit(new)

    async def save_many(self, batch: Sequence[NewResponse]) -> None:
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
                    "root_id": new.root_id or response["id"],
                }
            )
            if new.conversation_id is not None:
                appends.setdefault(new.conversation_id, []).append(
                    [*new.input_item_ids, *output_ids]
                )
        if self._sqlite_writer is not None:
            await self._save_many_sqlite(batch, response_rows, appends)
            return
        db = self._db
        async with db.write() as conn:
            await db.store_items(conn, [item for new in batch for item in new.new_items])
            await conn.execute(insert(responses), response_rows)
            if appends:
                counts = {key: sum(map(len, blocks)) for key, blocks in appends.items()}
                starts = await db.reserve_many(conn, counts)
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
        assert self._sqlite_writer is not None and self._db.write_lock is not None
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
                row["root_id"],
            )
            for row in response_rows
        ]
        flat = {key: [i for block in blocks for i in block] for key, blocks in appends.items()}
        ordered_items = [items[key] for key in sorted(items)]
        async with self._db.write_lock:
            await self._sqlite_writer.transaction(
                lambda connection: write_saves(connection, ordered_items, rows, flat)
            )

    async def delete_response(self, response_id: str) -> bool:
        async with self._db.write() as conn:
            result = await conn.execute(delete(responses).where(responses.c.id == response_id))
            return bool(result.rowcount)

    async def list_input_items(
        self, response_id: str, *, after: str | None, limit: int, order: str
    ) -> Page | None:
        async with self._db.read() as conn:
            ids = await conn.scalar(
                select(responses.c.input_item_ids).where(responses.c.id == response_id)
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
            loaded = await self._db.load(conn, window[:limit])
        return Page(items=loaded, has_more=len(window) > limit)

    async def close_saves(self) -> None:
        """Finish the saves under way and stop the SQLite writer thread."""
        await self.saves.aclose()
        if self._sqlite_writer is not None:
            await self._sqlite_writer.aclose()
