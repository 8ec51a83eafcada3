"""What every part of ``SqlFileStore`` shares: the engine, its transactions, the tenant whose
rows it sees, upserts, paging.

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


def check_dialect(engine: AsyncEngine) -> str:
    dialect = engine.dialect.name
    if dialect not in ("sqlite", "postgresql"):
        raise ValueError(f"unsupported dialect {dialect!r}")
    return dialect


def writer_of(engine: AsyncEngine) -> AsyncEngine:
    """``engine`` whose transactions take SQLite's write lock first."""
    return engine.execution_options(**{SQLITE_BEGIN: "BEGIN IMMEDIATE"})


class SqlTables:
    """One tenant's rows on an engine from ``create_engine_for`` (SQLite or PostgreSQL), and
    its transactions: every statement of the parts names ``self._tenant`` (``owned``).

    The engine is the caller's (it may be shared with the response store): it is never
    disposed of here."""

    def __init__(self, engine: AsyncEngine, writer: AsyncEngine, tenant: str) -> None:
        self._engine = engine
        self._dialect = check_dialect(engine)
        self._writer = writer
        self._tenant = tenant

    def _owned(self, table: Table) -> ColumnElement[bool]:
        """``table``'s rows of this tenant."""
        return table.c.tenant == self._tenant

    @contextlib.asynccontextmanager
    async def _write(self) -> AsyncIterator[AsyncConnection]:
        async with self._writer.begin() as conn:
            yield conn

    @contextlib.asynccontextmanager
    async def _read(self) -> AsyncIterator[AsyncConnection]:
        async with self._engine.connect() as conn:
            yield conn

    def _upsert(self, table: Table, row: dict[str, Any], keys: Sequence[str]) -> Any:
        """``INSERT ... ON CONFLICT (keys) DO UPDATE`` setting every other column, as this
        tenant's row; a conflicting row of another tenant is left as it is."""
        dialect_insert = postgresql.insert if self._dialect == "postgresql" else sqlite.insert
        statement = dialect_insert(table).values(**row, tenant=self._tenant)
        changed = {name: statement.excluded[name] for name in row if name not in keys}
        return statement.on_conflict_do_update(
            index_elements=list(keys), set_=changed, where=self._owned(table)
        )


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
