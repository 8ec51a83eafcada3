"""The SQL a purge's steps share (``app.store.retention_run``): transactions under the purge
lock, and lists of ids and of (tenant, id) keys as one JSON-array parameter each (as
``app.store.queries`` passes them: one statement whatever the length, no bound-parameter
limit)."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Iterable
from typing import Any

from sqlalchemy import ColumnElement, Select, String, bindparam, cast, func, literal_column, select
from sqlalchemy import tuple_ as row
from sqlalchemy.dialects import postgresql
from sqlalchemy.ext.asyncio import AsyncConnection

from app.store.engine import json_dumps
from app.store.sql_database import SqlDatabase

# The advisory lock of a purge batch (PostgreSQL): "respgate" + 1 (migrations take "respgate").
PG_PURGE_LOCK = 0x7265_7370_6761_7466

# A row of a table keyed within its tenant (items, tool sessions), or a tenant's reference to
# one: (tenant, id).
Key = tuple[str, str]


class PurgeLockedError(Exception):
    """Another process holds the purge lock (PostgreSQL)."""


def ids_value(ids: Iterable[str]) -> str:
    """A list of ids as the JSON array parameter ``in_list`` reads."""
    return json_dumps(list(ids))


def keys_value(keys: Iterable[Key]) -> str:
    """(tenant, id) keys as the JSON array (of pairs) parameter ``in_keys`` reads."""
    return json_dumps([list(key) for key in keys])


class PurgeSql:
    """The SQL the steps share, on one ``SqlDatabase``."""

    def __init__(self, db: SqlDatabase) -> None:
        self._db = db
        self.postgres = not db.is_sqlite

    @contextlib.asynccontextmanager
    async def transaction(self, dry_run: bool) -> AsyncIterator[AsyncConnection]:
        """A read-only one for a dry run; else a write transaction holding the purge lock
        (PostgreSQL; ``PurgeLockedError`` when another process holds it)."""
        if dry_run:
            async with self._db.read() as conn:
                yield conn
            return
        async with self._db.write() as conn:
            if self.postgres and not await conn.scalar(
                select(func.pg_try_advisory_xact_lock(PG_PURGE_LOCK))
            ):
                raise PurgeLockedError
            yield conn

    def _param(self, name: str) -> ColumnElement[Any]:
        param: ColumnElement[Any] = bindparam(name, type_=String)
        return cast(param, postgresql.JSON) if self.postgres else param

    def in_list(self, column: ColumnElement[Any], name: str) -> ColumnElement[bool]:
        """``column IN`` the ids of the JSON array parameter ``name`` (``ids_value``)."""
        return column.in_(select(self.elements(self._param(name)).c.value))

    def in_keys(
        self, tenant: ColumnElement[Any], column: ColumnElement[Any], name: str
    ) -> ColumnElement[bool]:
        """``(tenant, column) IN`` the keys of the JSON parameter ``name`` (``keys_value``).
        An index on ``column`` alone serves it too (both databases search by its prefix)."""
        return row(tenant, column).in_(self.keys(name))

    def keys(self, name: str) -> Select[Any]:
        """The (tenant, id) rows of the JSON parameter ``name`` (``keys_value``)."""
        columns: list[ColumnElement[Any]]
        if self.postgres:
            pairs = func.json_array_elements(self._param(name)).table_valued("value")
            columns = [
                pairs.c.value.op("->>", return_type=String)(literal_column(str(index)))
                for index in (0, 1)
            ]
        else:
            pairs = func.json_each(self._param(name)).table_valued("value")
            columns = [func.json_extract(pairs.c.value, f"$[{index}]") for index in (0, 1)]
        return select(*columns).select_from(pairs)

    def elements(self, array: ColumnElement[Any]) -> Any:
        """The elements of a JSON array (a column or a parameter) as text rows (``value``)."""
        if self.postgres:
            return func.json_array_elements_text(array).table_valued("value")
        return func.json_each(array).table_valued("value")
