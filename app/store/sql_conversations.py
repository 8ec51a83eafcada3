"""``SqlConversations``: the conversations half of the SQL response store
(``sql.SqlResponseStore``).

A conversation's items are ``conversation_items`` rows ordered by ``position``; an append
reserves a contiguous block of positions under the conversation's lock (``sql_database``), so
concurrent appends to one conversation are serialized and none is lost.
``append_conversation_items`` raises ``ItemAlreadyInConversationError`` (nothing is written),
``list_conversation_items`` ``UnknownCursorError`` for an unknown ``after``. Deleting a
conversation deletes its tool engine session (``sql_tool_sessions``) in the same transaction.
Every statement names the caller's tenant: another tenant's conversation is not found, and a
conversation's item ids are its tenant's items.
"""

from __future__ import annotations

import time
from typing import Any

from sqlalchemy import Select, delete, func, insert, select, update

from app.core.ids import new_id
from app.core.ports import Page, StoredConversation
from app.core.store_errors import ItemAlreadyInConversationError, UnknownCursorError
from app.protocol.json_types import JsonObject
from app.store.engine import json_dumps, json_loads
from app.store.queries import decode_objects, item_of
from app.store.sql_database import SqlDatabase, is_descending
from app.store.sql_tool_sessions import delete_session
from app.store.tables import conversation_items, conversations, items


class SqlConversations:
    """Conversations and their items on a ``SqlDatabase``."""

    def __init__(self, db: SqlDatabase) -> None:
        self._db = db

    async def create_conversation(
        self, metadata: dict[str, str], items: list[JsonObject], *, tenant: str
    ) -> StoredConversation:
        conversation = StoredConversation(
            id=new_id("conv"), created_at=int(time.time()), metadata=dict(metadata)
        )
        item_ids = [str(item["id"]) for item in items]
        async with self._db.write() as conn:
            await conn.execute(
                insert(conversations).values(
                    id=conversation.id,
                    created_at=conversation.created_at,
                    metadata=conversation.metadata,
                    next_position=len(item_ids),
                    tenant=tenant,
                    last_active_at=conversation.created_at,
                )
            )
            await self._db.store_items(conn, [(tenant, item) for item in items])
            await self._db.append(conn, tenant, conversation.id, 0, item_ids)
        return conversation

    async def get_conversation(
        self, conversation_id: str, *, tenant: str
    ) -> StoredConversation | None:
        rows = await self._db.fetch(
            "get_conversation", conversation_id=conversation_id, tenant=tenant
        )
        if not rows:
            return None
        created_at, metadata = rows[0]
        return StoredConversation(
            id=conversation_id, created_at=int(created_at), metadata=json_loads(metadata)
        )

    async def update_conversation(
        self, conversation_id: str, metadata: dict[str, str], *, tenant: str
    ) -> StoredConversation | None:
        async with self._db.write() as conn:
            created_at = await conn.scalar(
                update(conversations)
                .where(conversations.c.id == conversation_id, conversations.c.tenant == tenant)
                .values(metadata=dict(metadata), last_active_at=int(time.time()))
                .returning(conversations.c.created_at)
            )
        if created_at is None:
            return None
        return StoredConversation(
            id=conversation_id, created_at=int(created_at), metadata=dict(metadata)
        )

    async def delete_conversation(self, conversation_id: str, *, tenant: str) -> bool:
        async with self._db.write() as conn:
            result = await conn.execute(
                delete(conversations).where(
                    conversations.c.id == conversation_id, conversations.c.tenant == tenant
                )
            )
            if not result.rowcount:  # unknown, or another tenant's: nothing of it is touched
                return False
            await conn.execute(
                delete(conversation_items).where(
                    conversation_items.c.conversation_id == conversation_id
                )
            )
            await delete_session(conn, conversation_id, tenant=tenant)
            return True

    async def conversation_items(
        self, conversation_id: str, *, tenant: str
    ) -> list[JsonObject] | None:
        # One query: the conversation row (to tell "missing" from "empty") joined to its items,
        # payloads as text, decoded at once.
        rows = await self._db.fetch(
            "conversation_items", conversation_id=conversation_id, tenant=tenant
        )
        if not rows:
            return None
        return decode_objects([row[1] for row in rows if row[1] is not None])

    async def append_conversation_items(
        self, conversation_id: str, items: list[JsonObject], *, tenant: str
    ) -> list[JsonObject] | None:
        db = self._db
        item_ids = [str(item["id"]) for item in items]
        try:
            async with db.write() as conn:
                await db.store_items(conn, [(tenant, item) for item in items])
                start = await db.reserve_positions(conn, tenant, conversation_id, len(item_ids))
                if start is None:
                    raise _ConversationMissing
                if item_ids:
                    # Under the conversation's lock: no concurrent append can slip in between.
                    present = await conn.scalar(
                        db.queries.in_conversation,
                        {
                            "conversation_id": conversation_id,
                            "ids": json_dumps(item_ids),
                            "tenant": tenant,
                        },
                    )
                    if present is not None:
                        raise ItemAlreadyInConversationError(conversation_id)
                await db.append(conn, tenant, conversation_id, start, item_ids)
                # The stored payloads: an id that was already stored keeps its first payload.
                return await db.load(conn, item_ids, tenant=tenant)
        except _ConversationMissing:
            return None

    async def list_conversation_items(
        self, conversation_id: str, *, tenant: str, after: str | None, limit: int, order: str
    ) -> Page | None:
        descending = is_descending(order)
        position = conversation_items.c.position
        async with self._db.read() as conn:
            exists = await conn.scalar(
                select(conversations.c.id).where(
                    conversations.c.id == conversation_id, conversations.c.tenant == tenant
                )
            )
            if exists is None:
                return None
            query: Select[Any] = (
                select(items.c.payload)
                .select_from(conversation_items)
                .join(items, item_of(conversation_items))
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

    async def get_conversation_item(
        self, conversation_id: str, item_id: str, *, tenant: str
    ) -> JsonObject | None:
        rows = await self._db.fetch(
            "conversation_item", conversation_id=conversation_id, item_id=item_id, tenant=tenant
        )
        return decode_objects([rows[0][0]])[0] if rows else None

    async def delete_conversation_item(
        self, conversation_id: str, item_id: str, *, tenant: str
    ) -> bool:
        async with self._db.write() as conn:
            result = await conn.execute(
                delete(conversation_items).where(
                    conversation_items.c.tenant == tenant,
                    conversation_items.c.conversation_id == conversation_id,
                    conversation_items.c.item_id == item_id,
                )
            )
            return bool(result.rowcount)


class _ConversationMissing(Exception):
    """Rolls back a write whose conversation does not exist."""
