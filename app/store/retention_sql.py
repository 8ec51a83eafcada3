"""The SQL a purge's steps share (``app.store.retention_run``): transactions under the purge
lock, and lists of ids and of (tenant, id) keys as one JSON-array parameter each (as
``app.store.queries`` passes them: one statement whatever the length, no bound-parameter
limit)."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Iterable, Sequence
from typing import Any

from sqlalchemy import (
    ColumnElement,
    Insert,
    Select,
    String,
    bindparam,
    cast,
    func,
    literal_column,
    not_,
    select,
    true,
)
from sqlalchemy import tuple_ as row
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.ext.asyncio import AsyncConnection

from app.store.engine import json_dumps
from app.store.sql_database import SqlDatabase
from app.store.tables import conversation_items, purge_candidates, responses

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


def keys_value(keys: Iterable[Sequence[str]]) -> str:
    """(tenant, id) keys (or longer rows of text) as the JSON array (of arrays) parameter
    ``in_keys`` reads."""
    return json_dumps([list(key) for key in keys])


class PurgeSql:
    """The SQL the steps share, on one ``SqlDatabase``."""

    def __init__(self, db: SqlDatabase) -> None:
        self._db = db
        self.postgres = not db.is_sqlite

    @contextlib.asynccontextmanager
    async def snapshot(self) -> AsyncIterator[AsyncConnection]:
        """A read-only transaction: one snapshot, no lock."""
        async with self._db.read() as conn:
            yield conn

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

    def in_keys(self, *columns: ColumnElement[Any], name: str) -> ColumnElement[bool]:
        """``(columns...) IN`` the rows of the JSON parameter ``name`` (``keys_value``): (tenant,
        id) keys, or longer rows. An index on the id column alone serves it too (both
        databases search by its prefix)."""
        return row(*columns).in_(self.keys(name, len(columns)))

    def keys(self, name: str, width: int = 2) -> Select[Any]:
        """The rows (``width`` text columns) of the JSON parameter ``name`` (``keys_value``)."""
        columns: list[ColumnElement[Any]]
        if self.postgres:
            pairs = func.json_array_elements(self._param(name)).table_valued("value")
            columns = [
                pairs.c.value.op("->>", return_type=String)(literal_column(str(index)))
                for index in range(width)
            ]
        else:
            pairs = func.json_each(self._param(name)).table_valued("value")
            columns = [func.json_extract(pairs.c.value, f"$[{index}]") for index in range(width)]
        return select(*columns).select_from(pairs)

    def add_candidates(self) -> Insert:
        """Put the keys of the parameter ``keys`` (distinct) in ``purge_candidates`` with the
        parameter ``token``, or give a row already there that token."""
        table = purge_candidates
        rows = self.keys("keys").add_columns(bindparam("token", type_=String))
        if self.postgres:
            insert: Any = postgresql.insert(table)
        else:
            # WHERE: SQLite's parser would take ON CONFLICT for a join's ON otherwise.
            rows = rows.where(true())
            insert = sqlite.insert(table)
        statement = insert.from_select(["tenant", "item_id", "token"], rows)
        updated: Insert = statement.on_conflict_do_update(
            index_elements=[table.c.tenant, table.c.item_id],
            set_={"token": statement.excluded.token},
        )
        return updated

    def elements(self, array: ColumnElement[Any]) -> Any:
        """The elements of a JSON array (a column or a parameter) as text rows (``value``)."""
        if self.postgres:
            return func.json_array_elements_text(array).table_valued("value")
        return func.json_each(array).table_valued("value")

    def in_checkpoints(self, *, since: int | None = None) -> Select[Any]:
        """The (tenant, item id) keys of the parameter ``keys`` that a stored response of
        their tenant lists in its checkpoint: every response's (one pass over them), or only
        those created at ``since`` or later (the ``created_at`` index). Responses whose ids
        are in the parameter ``gone`` do not count (a dry run's)."""
        listed = self.elements(responses.c.checkpoint_ids)
        expanded = (
            select(responses.c.tenant.label("tenant"), listed.c.value.label("item_id"))
            .select_from(responses)
            .join(listed, true())
            .where(not_(self.in_list(responses.c.id, "gone")))
        )
        if since is not None:
            expanded = expanded.where(responses.c.created_at >= since)
        if self.postgres:
            # A fence (a subquery with OFFSET is planned on its own): otherwise the planner
            # joins the keys to the responses by tenant first, then expands every checkpoint
            # once per key of its tenant (measured: 9 s instead of 35 ms on 5,000 responses).
            expanded = expanded.offset(0)
        pairs = expanded.subquery()
        return (
            select(pairs.c.tenant, pairs.c.item_id)
            .where(self.in_keys(pairs.c.tenant, pairs.c.item_id, name="keys"))
            .distinct()
        )

    def in_conversations(self) -> Select[Any]:
        """The keys of the parameter ``keys`` that a conversation of their tenant lists (the
        ``item_id`` index), but for the conversations whose ids are in the parameter
        ``gone_conversations`` (a dry run's)."""
        listed = conversation_items.c
        return (
            select(listed.tenant, listed.item_id)
            .where(
                self.in_keys(listed.tenant, listed.item_id, name="keys"),
                not_(self.in_list(listed.conversation_id, "gone_conversations")),
            )
            .distinct()
        )
