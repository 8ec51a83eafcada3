"""The steps of one purge (``app.store.retention``, whose docstring says what goes and why),
and the SQL they share: JSON-array parameters, transactions under the purge lock."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import (
    ColumnElement,
    String,
    Table,
    bindparam,
    cast,
    delete,
    func,
    not_,
    select,
    true,
    tuple_,
    update,
)
from sqlalchemy.dialects import postgresql
from sqlalchemy.ext.asyncio import AsyncConnection

from app.core.jobs import FINAL_STATUSES
from app.core.retention import PurgeReport, RetentionCutoffs
from app.store.engine import json_dumps
from app.store.sql_database import SqlDatabase
from app.store.tables import (
    background_events,
    background_jobs,
    conversation_items,
    conversations,
    items,
    responses,
    tool_sessions,
)

# The advisory lock of a purge batch (PostgreSQL): "respgate" + 1 (migrations take "respgate").
PG_PURGE_LOCK = 0x7265_7370_6761_7466
# Keyset cursors (age, id) start below every row.
Cursor = tuple[int, str]
_START: Cursor = (-(2**62), "")


class PurgeLockedError(Exception):
    """Another process holds the purge lock (PostgreSQL)."""


@dataclass(frozen=True, slots=True)
class Protected:
    """What active background jobs continue: their previous responses and conversations."""

    responses: list[str]
    conversations: list[str]


@dataclass(slots=True)
class _Gone:
    """What a dry run has counted as removed so far (a real purge deletes it instead)."""

    responses: list[str] = field(default_factory=list)
    conversations: list[str] = field(default_factory=list)
    items: set[str] = field(default_factory=set)
    sessions: set[str] = field(default_factory=set)


class PurgeSql:
    """The SQL the steps share, on one ``SqlDatabase``."""

    def __init__(self, db: SqlDatabase) -> None:
        self._db = db
        self._postgres = not db.is_sqlite

    @contextlib.asynccontextmanager
    async def transaction(self, dry_run: bool) -> AsyncIterator[AsyncConnection]:
        """A read-only one for a dry run; else a write transaction holding the purge lock
        (PostgreSQL; ``PurgeLockedError`` when another process holds it)."""
        if dry_run:
            async with self._db.read() as conn:
                yield conn
            return
        async with self._db.write() as conn:
            if self._postgres and not await conn.scalar(
                select(func.pg_try_advisory_xact_lock(PG_PURGE_LOCK))
            ):
                raise PurgeLockedError
            yield conn

    def in_list(self, column: ColumnElement[Any], name: str) -> ColumnElement[bool]:
        """``column IN`` the elements of the JSON array parameter ``name``."""
        param: ColumnElement[Any] = bindparam(name, type_=String)
        if self._postgres:
            param = cast(param, postgresql.JSON)
        return column.in_(select(self.elements(param).c.value))

    def elements(self, array: ColumnElement[Any]) -> Any:
        """The elements of a JSON array (a column or a parameter) as text rows (``value``)."""
        if self._postgres:
            return func.json_array_elements_text(array).table_valued("value")
        return func.json_each(array).table_valued("value")


class PurgeRun:
    """One purge: its steps, cursors and counts (``report``)."""

    def __init__(
        self,
        sql: PurgeSql,
        cutoffs: RetentionCutoffs,
        report: PurgeReport,
        protected: Protected,
        *,
        batch_size: int,
    ) -> None:
        self.sql = sql
        self.size = batch_size
        self.cutoffs = cutoffs
        self.report = report
        self.dry_run = report.dry_run
        self.protected = protected
        self.gone = _Gone()
        self.batches = 0

    async def all_steps(self) -> None:
        if self.cutoffs.responses_before is not None:
            await self._batches(self._responses)
        if self.cutoffs.conversations_before is not None:
            await self._batches(self._conversations)
        if self.cutoffs.responses_before is not None:
            await self._batches(self._finished_jobs)
            await self._batches(self._stale_sessions)

    async def _batches(
        self, step: Callable[[AsyncConnection, Cursor], Awaitable[Cursor | None]]
    ) -> None:
        """Run ``step`` a transaction at a time, from the first row on, until it returns no
        cursor (fewer rows than a batch were left)."""
        cursor: Cursor | None = _START
        while cursor is not None:
            async with self.sql.transaction(self.dry_run) as conn:
                cursor = await step(conn, cursor)
            self.batches += 1

    def _values(self, **lists: Sequence[str]) -> dict[str, str]:
        return {name: json_dumps(list(values)) for name, values in lists.items()}

    async def _remove(self, conn: AsyncConnection, column: Any, ids: Sequence[str]) -> int:
        """Delete the rows of ``column``'s table whose ``column`` is in ``ids`` (a dry run
        counts them); how many."""
        if not ids:
            return 0
        table: Table = column.table
        where = self.sql.in_list(column, "ids")
        values = self._values(ids=ids)
        if self.dry_run:
            count = await conn.scalar(select(func.count()).select_from(table).where(where), values)
            return int(count or 0)
        result = await conn.execute(delete(table).where(where), values)
        return int(result.rowcount or 0)

    def _next(self, rows: Sequence[Any]) -> Cursor | None:
        """The cursor after ``rows`` (age, id), or None when they were the last ones."""
        if len(rows) < self.size:
            return None
        age, row_id = rows[-1][1], rows[-1][0]
        return (int(age), str(row_id))

    # ---------------------------------------------------------------- step 1: responses

    async def _responses(self, conn: AsyncConnection, cursor: Cursor) -> Cursor | None:
        sql = self.sql
        created = responses.c.created_at
        rows = (
            await conn.execute(
                select(responses.c.id, created, responses.c.checkpoint_ids, responses.c.root_id)
                .where(
                    created < self.cutoffs.responses_before,
                    tuple_(created, responses.c.id) > tuple_(*cursor),
                    not_(sql.in_list(responses.c.id, "protected")),
                )
                .order_by(created, responses.c.id)
                .limit(self.size),
                self._values(protected=self.protected.responses),
            )
        ).all()
        ids = [str(row[0]) for row in rows]
        candidates = {str(i) for row in rows for i in (row[2] or ())}
        roots = {str(row[3] or row[0]) for row in rows}
        if self.dry_run:
            self.gone.responses += ids
            self.report.responses += len(ids)
        else:
            self.report.responses += await self._remove(conn, responses.c.id, ids)
        self.report.background_events += await self._remove(
            conn, background_events.c.response_id, ids
        )
        self.report.background_jobs += await self._remove(conn, background_jobs.c.response_id, ids)
        await self._remove_unreferenced_items(conn, candidates)
        await self._remove_sessions(conn, await self._without_responses(conn, roots))
        return self._next(rows)

    # ---------------------------------------------------------------- step 2: conversations

    async def _conversations(self, conn: AsyncConnection, cursor: Cursor) -> Cursor | None:
        sql, before = self.sql, self.cutoffs.conversations_before
        last_active = conversations.c.last_active_at
        active: ColumnElement[Any] = last_active
        if self.dry_run:
            active = func.coalesce(last_active, conversations.c.created_at)
        elif cursor == _START:
            await conn.execute(
                update(conversations)
                .where(conversations.c.last_active_at.is_(None))
                .values(last_active_at=conversations.c.created_at)
            )
        rows = (
            await conn.execute(
                select(conversations.c.id, active)
                .where(
                    active < before,
                    tuple_(active, conversations.c.id) > tuple_(*cursor),
                    not_(sql.in_list(conversations.c.id, "protected")),
                )
                .order_by(active, conversations.c.id)
                .limit(self.size),
                self._values(protected=self.protected.conversations),
            )
        ).all()
        ids = [str(row[0]) for row in rows]
        # Before the rows go (PostgreSQL's foreign key cascades).
        candidates = await self._strings(
            conn,
            select(conversation_items.c.item_id)
            .where(sql.in_list(conversation_items.c.conversation_id, "ids"))
            .distinct(),
            ids=ids,
        )
        removed = set(ids)
        if self.dry_run:
            self.gone.conversations += ids
        else:
            # Still inactive: an append since the read above made it active again.
            removed = await self._strings(
                conn,
                delete(conversations)
                .where(
                    sql.in_list(conversations.c.id, "ids"), conversations.c.last_active_at < before
                )
                .returning(conversations.c.id),
                ids=ids,
            )
            await self._remove(conn, conversation_items.c.conversation_id, sorted(removed))
        self.report.conversations += len(removed)
        await self._remove_sessions(conn, removed)
        await self._remove_unreferenced_items(conn, candidates)
        return self._next(rows)

    # ---------------------------------------------------------------- steps 3 and 4

    async def _finished_jobs(self, conn: AsyncConnection, cursor: Cursor) -> Cursor | None:
        finished = background_jobs.c.finished_at
        rows = (
            await conn.execute(
                select(background_jobs.c.response_id, finished)
                .where(
                    background_jobs.c.status.in_(sorted(FINAL_STATUSES)),
                    finished < self.cutoffs.responses_before,
                    tuple_(finished, background_jobs.c.response_id) > tuple_(*cursor),
                    not_(self.sql.in_list(background_jobs.c.response_id, "gone")),
                )
                .order_by(finished, background_jobs.c.response_id)
                .limit(self.size),
                self._values(gone=self.gone.responses),
            )
        ).all()
        ids = [str(row[0]) for row in rows]
        self.report.background_events += await self._remove(
            conn, background_events.c.response_id, ids
        )
        self.report.background_jobs += await self._remove(conn, background_jobs.c.response_id, ids)
        return self._next(rows)

    async def _stale_sessions(self, conn: AsyncConnection, cursor: Cursor) -> Cursor | None:
        sql, updated = self.sql, tool_sessions.c.updated_at
        rows = (
            await conn.execute(
                select(tool_sessions.c.session_id, updated)
                .where(
                    updated < self.cutoffs.responses_before,
                    tuple_(updated, tool_sessions.c.session_id) > tuple_(*cursor),
                )
                .order_by(updated, tool_sessions.c.session_id)
                .limit(self.size)
            )
        ).all()
        ids = {str(row[0]) for row in rows}
        conversation_ids = await self._strings(
            conn,
            select(conversations.c.id).where(
                sql.in_list(conversations.c.id, "ids"),
                not_(sql.in_list(conversations.c.id, "gone")),
            ),
            ids=sorted(ids),
            gone=self.gone.conversations,
        )
        await self._remove_sessions(
            conn, await self._without_responses(conn, ids) - conversation_ids
        )
        return self._next(rows)

    # ---------------------------------------------------------------- references

    async def _strings(self, conn: AsyncConnection, statement: Any, **lists: Any) -> set[str]:
        result = await conn.execute(statement, self._values(**lists))
        return {str(row[0]) for row in result}

    async def _without_responses(self, conn: AsyncConnection, roots: set[str]) -> set[str]:
        """The chain roots among ``roots`` that no stored response belongs to any more."""
        if not roots:
            return set()
        sql, kept = self.sql, not_(self.sql.in_list(responses.c.id, "gone"))
        alive = await self._strings(
            conn,
            select(responses.c.root_id).where(sql.in_list(responses.c.root_id, "roots"), kept),
            roots=sorted(roots),
            gone=self.gone.responses,
        )
        alive |= await self._strings(
            conn,
            select(responses.c.id).where(sql.in_list(responses.c.id, "roots"), kept),
            roots=sorted(roots),
            gone=self.gone.responses,
        )
        return roots - alive

    async def _remove_sessions(self, conn: AsyncConnection, session_ids: set[str]) -> None:
        fresh = sorted(session_ids - self.gone.sessions)
        self.report.tool_sessions += await self._remove(conn, tool_sessions.c.session_id, fresh)
        if self.dry_run:
            self.gone.sessions.update(fresh)

    async def _remove_unreferenced_items(self, conn: AsyncConnection, candidates: set[str]) -> None:
        """Remove the ``candidates`` no stored response's checkpoint and no conversation lists."""
        candidates -= self.gone.items
        if not candidates:
            return
        sql = self.sql
        listed = sql.elements(responses.c.checkpoint_ids)
        in_checkpoints = (
            select(listed.c.value)
            .select_from(responses)
            .join(listed, true())
            .where(
                sql.in_list(listed.c.value, "candidates"),
                not_(sql.in_list(responses.c.id, "gone")),
            )
            .distinct()
        )
        in_conversations = (
            select(conversation_items.c.item_id)
            .where(
                sql.in_list(conversation_items.c.item_id, "candidates"),
                not_(sql.in_list(conversation_items.c.conversation_id, "gone_conversations")),
            )
            .distinct()
        )
        lists = {
            "candidates": sorted(candidates),
            "gone": self.gone.responses,
            "gone_conversations": self.gone.conversations,
        }
        referenced = await self._strings(conn, in_checkpoints, **lists)
        referenced |= await self._strings(conn, in_conversations, **lists)
        unreferenced = sorted(candidates - referenced)
        self.report.items += await self._remove(conn, items.c.id, unreferenced)
        if self.dry_run:
            self.gone.items.update(unreferenced)
