"""``SqlResponseStore``: the ``ResponseStore`` port on SQLAlchemy Core (SQLite or PostgreSQL).

It is made of four parts, one module each:

- ``sql_database.SqlDatabase``: what the parts share: the engine, one transaction per write
  (SQLite: queued on an ``asyncio.Lock`` of this process first), snapshot reads, the hot
  single-statement reads on the driver connection (``queries.DriverStatement``; on a SQLite
  file inline on a ``sqlite3`` connection of the calling thread, ``inline.py``), items stored
  once by id (insert-if-absent: an item whose id is already stored is referenced, never copied
  or overwritten) and read back in one statement, and the reservation of conversation
  positions under the conversation's lock.
- ``sql_responses.SqlResponses``: responses. A response row carries its checkpoint (history +
  own input + output item ids) as a JSON list, so rehydration is ``get_response`` +
  ``load_items``: two indexed reads, whatever the depth of the ``previous_response_id`` chain.
  Concurrent saves share transactions (group commit, ``batching.py``).
- ``sql_conversations.SqlConversations``: conversations, whose items are
  ``conversation_items`` rows ordered by ``position``.
- ``sql_tool_sessions.SqlToolSessions``: tool engine session states by session id
  (``app.core.engines.ToolSessionStore``, so the gateway's engines persist their sessions in
  the store it already has); deleting a conversation deletes its session.
- ``sql_jobs.SqlJobs``: background jobs (leases) and their streams' event logs
  (``app.core.jobs.JobStore``).

Errors (``app.core.store_errors``): ``save_response`` raises ``ConversationNotFoundError`` when
its conversation is gone (nothing is written); ``append_conversation_items`` raises
``ItemAlreadyInConversationError``; the list methods raise ``UnknownCursorError`` for an unknown
``after``. tests/store/test_store_contract*.py hold every implementation of the port (this one
on SQLite and PostgreSQL, and the tests' in-memory one) to the same behaviour.
"""

from __future__ import annotations

from sqlalchemy.ext.asyncio import AsyncEngine

from app.store.readiness import readiness_problem
from app.store.sql_conversations import SqlConversations
from app.store.sql_database import SqlDatabase
from app.store.sql_jobs import SqlJobs
from app.store.sql_responses import SqlResponses
from app.store.sql_tool_sessions import SqlToolSessions


class SqlResponseStore(SqlResponses, SqlConversations, SqlToolSessions, SqlJobs):
    """The response store on an ``AsyncEngine`` from ``app.store.engine.create_engine_for``;
    also a ``ToolSessionStore`` and a ``JobStore``."""

    def __init__(self, engine: AsyncEngine, *, inline_reads: bool = True) -> None:
        """``inline_reads``: on a SQLite file, run the small single-statement reads on a
        ``sqlite3`` connection of the calling thread (``inline.py``) instead of aiosqlite's."""
        self.db = SqlDatabase(engine, inline_reads=inline_reads)
        SqlResponses.__init__(self, self.db)
        SqlConversations.__init__(self, self.db)
        SqlToolSessions.__init__(self, self.db)
        SqlJobs.__init__(self, self.db)

    async def readiness_problem(self) -> str | None:
        """``core.ports.StoreReadiness`` (``readiness.py``): None when the store can serve."""
        return await readiness_problem(self.db)

    async def aclose(self) -> None:
        await self.close_saves()
        await self.db.aclose()
