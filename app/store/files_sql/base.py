"""What every part of ``SqlFileStore`` shares: the engine, its transactions, upserts, paging.

- Every write is one transaction; on SQLite it takes the write lock first (``BEGIN
  IMMEDIATE``, as in ``store.sql``). These are not hot paths: plain SQLAlchemy statements.
- Lists page like OpenAI's list endpoints: ordered by ``created_at`` then id (descending for
  ``order="desc"``), ``after`` is the id of the last object of the previous page
  (``UnknownCursorError`` when it does not exist), and ``limit + 1`` rows come back so that
  the caller can tell ``has_more``.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy import ColumnElement, Select, Table, and_, or_, select
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from app.core.store_errors import UnknownCursorError
from app.store.engine import SQLITE_BEGIN


class SqlTables:
    """An engine from ``create_engine_for`` (SQLite or PostgreSQL) and its transactions.

    The engine is the caller's (it may be shared with the response store): it is never
    disposed of here."""

    def __init__(self, engine: AsyncEngine) -> None:
        self._engine = engine
        self._dialect = engine.dialect.name
        if self._dialect not in ("sqlite", "postgresql"):
            raise ValueError(f"unsupported dialect {self._dialect!r}")
        self._writer = engine.execution_options(**{SQLITE_BEGIN: "BEGIN IMMEDIATE"})

    async def aclose(self) -> None:
        """Nothing to release: the engine is the caller's."""

    @contextlib.asynccontextmanager
    async def _write(self) -> AsyncIterator[AsyncConnection]:
        async with self._writer.begin() as conn:
            yield conn

    @contextlib.asynccontextmanager
    async def _read(self) -> AsyncIterator[AsyncConnection]:
        async with self._engine.connect() as conn:
            yield conn

    def _upsert(self, table: Table, row: dict[str, Any], keys: Sequence[str]) -> Any:
        """``INSERT ... ON CONFLICT (keys) DO UPDATE`` setting every other column."""
        dialect_insert = postgresql.insert if self._dialect == "postgresql" else sqlite.insert
        statement = dialect_insert(table).values(**row)
        changed = {name: statement.excluded[name] for name in row if name not in keys}
        return statement.on_conflict_do_update(index_elements=list(keys), set_=changed)


@dataclass(frozen=True, slots=True)
class PageRequest:
    """One page of a list, as the FileStore's list methods take it."""

    after: str | None
    limit: int
    order: str


async def page(
    conn: AsyncConnection,
    query: Select[Any],
    table: Table,
    key: Any,
    request: PageRequest,
    scope: ColumnElement[bool] | None = None,
) -> Select[Any]:
    """``query`` ordered by (created_at, ``key``), past ``request.after``, ``limit + 1`` rows.

    ``after`` names a row of ``table`` (within ``scope``); ``UnknownCursorError`` when there
    is none."""
    after = request.after
    created_at = table.c.created_at
    descending = request.order == "desc"
    if after is not None:
        lookup = select(created_at).where(key == after)
        if scope is not None:
            lookup = lookup.where(scope)
        cursor = (await conn.execute(lookup)).first()
        if cursor is None:
            raise UnknownCursorError(after)
        (cursor_created_at,) = cursor
        if descending:
            past = or_(
                created_at < cursor_created_at, and_(created_at == cursor_created_at, key < after)
            )
        else:
            past = or_(
                created_at > cursor_created_at, and_(created_at == cursor_created_at, key > after)
            )
        query = query.where(past)
    ordering = (created_at.desc(), key.desc()) if descending else (created_at, key)
    return query.order_by(*ordering).limit(request.limit + 1)
