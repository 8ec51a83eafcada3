"""``SqlToolSessions``: tool engine sessions in the SQL store (``app.core.engines
.ToolSessionStore``), one JSON state per tenant and session id in the ``tool_sessions``
table (another tenant's session is missing).

- ``save_tool_session`` is one upsert (``INSERT ... ON CONFLICT (tenant, session_id) DO
  UPDATE``, the same statement on SQLite and PostgreSQL): the whole state is replaced,
  ``created_at`` kept. The last save wins; the gateway saves a session once per round, after
  its engines ran.
- ``load_tool_session`` is one primary-key read, a fast read on the driver connection
  (``SqlDatabase.fetch``: inline on a SQLite file) that returns None for an unknown id;
  ``delete_tool_session`` of an unknown id is a no-op.
- Deleting a conversation deletes the session named by its id in the same transaction
  (``sql_conversations``, through ``delete_session``).

Every store on the same database sees the others' writes (several gateway processes).
"""

from __future__ import annotations

import time

from sqlalchemy import Insert, delete
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.ext.asyncio import AsyncConnection

from app.protocol.json_types import JsonObject
from app.store.engine import json_loads
from app.store.sql_database import SqlDatabase
from app.store.tables import tool_sessions


class SqlToolSessions:
    """Tool engine session states on a ``SqlDatabase``."""

    def __init__(self, db: SqlDatabase) -> None:
        self._db = db
        self._upsert = _upsert_statement(db.is_sqlite)

    async def load_tool_session(self, session_id: str, *, tenant: str) -> JsonObject | None:
        rows = await self._db.fetch("get_tool_session", session_id=session_id, tenant=tenant)
        if not rows:
            return None
        state = json_loads(rows[0][0])
        return state if isinstance(state, dict) else None

    async def save_tool_session(self, session_id: str, state: JsonObject, *, tenant: str) -> None:
        now = int(time.time())
        row = {
            "tenant": tenant,
            "session_id": session_id,
            "state": state,
            "created_at": now,
            "updated_at": now,
        }
        async with self._db.write() as conn:
            await conn.execute(self._upsert, row)

    async def delete_tool_session(self, session_id: str, *, tenant: str) -> None:
        async with self._db.write() as conn:
            await delete_session(conn, session_id, tenant=tenant)


async def delete_session(conn: AsyncConnection, session_id: str, *, tenant: str) -> None:
    """Delete ``tenant``'s session in the caller's transaction."""
    await conn.execute(
        delete(tool_sessions).where(
            tool_sessions.c.tenant == tenant, tool_sessions.c.session_id == session_id
        )
    )


def _upsert_statement(is_sqlite: bool) -> Insert:
    insert = sqlite.insert(tool_sessions) if is_sqlite else postgresql.insert(tool_sessions)
    return insert.on_conflict_do_update(
        index_elements=[tool_sessions.c.tenant, tool_sessions.c.session_id],
        set_={"state": insert.excluded.state, "updated_at": insert.excluded.updated_at},
    )
