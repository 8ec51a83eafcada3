"""The steps of one purge (``app.store.retention``, whose docstring says what goes and why); the
items they leave behind are swept by ``retention_sweep``.

Tenancy: items and tool sessions are keyed by (tenant, id), so every step works on such keys
(``retention_sql.Key``): an expired response's checkpoint names its own tenant's items, a
chain's session is its tenant's, and an item is kept only by what its own tenant keeps.
Responses, conversations and background jobs have ids unique across tenants; they are still
removed by (tenant, id), as every other statement of the store names its tenant.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy import ColumnElement, Table, delete, func, not_, select, true, tuple_, update
from sqlalchemy.ext.asyncio import AsyncConnection

from app.core.jobs import FINAL_STATUSES
from app.core.retention import PurgeReport, RetentionCutoffs
from app.store.retention_sql import Key, PurgeSql, ids_value, keys_value
from app.store.retention_sweep import Gone, ItemSweep
from app.store.tables import (
    background_events,
    background_jobs,
    conversation_items,
    conversations,
    responses,
    tool_sessions,
)

# A keyset cursor: the (age, key...) of the last row of a batch; a step starts from ``_START``.
Cursor = tuple[Any, ...]
_START: Cursor = ()


@dataclass(frozen=True, slots=True)
class Protected:
    """What active background jobs continue: their tenants' previous responses and
    conversations."""

    responses: list[Key]
    conversations: list[Key]


def _keys(rows: Iterable[Any]) -> set[Key]:
    return {(str(row[0]), str(row[1])) for row in rows}


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
        self.gone = Gone()
        self.items = ItemSweep(sql, report, self.gone, batch_size=batch_size)
        self._batches_of_steps = 0

    async def all_steps(self) -> None:
        if self.cutoffs.responses_before is not None:
            await self._batches(self._responses)
        if self.cutoffs.conversations_before is not None:
            await self._batches(self._conversations)
        await self.items.sweep()
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
            self._batches_of_steps += 1
            if self.items.due:
                await self.items.sweep()

    @property
    def batches(self) -> int:
        """The transactions the purge has completed."""
        return self._batches_of_steps + self.items.transactions

    def _after(self, columns: Sequence[ColumnElement[Any]], cursor: Cursor) -> ColumnElement[bool]:
        """The rows after ``cursor`` in the order of ``columns`` (all of them at the start)."""
        return tuple_(*columns) > tuple_(*cursor) if cursor else true()

    def _next(self, rows: Sequence[Any], width: int) -> Cursor | None:
        """The cursor after ``rows`` (their first ``width`` columns: age and key), or None
        when they were the last ones."""
        if len(rows) < self.size:
            return None
        return tuple(rows[-1][:width])

    async def _delete(
        self, conn: AsyncConnection, table: Table, where: ColumnElement[bool], **values: str
    ) -> int:
        """Delete ``table``'s rows ``where`` says (a dry run counts them); how many."""
        if self.dry_run:
            count = await conn.scalar(select(func.count()).select_from(table).where(where), values)
            return int(count or 0)
        result = await conn.execute(delete(table).where(where), values)
        return int(result.rowcount or 0)

    async def _remove(
        self, conn: AsyncConnection, tenant: Any, column: Any, keys: Iterable[Key]
    ) -> int:
        """Delete the rows of ``column``'s table whose (``tenant``, ``column``) is one of
        ``keys`` (a dry run counts them); how many."""
        listed = sorted(keys)
        if not listed:
            return 0
        where = self.sql.in_keys(tenant, column, name="keys")
        return await self._delete(conn, column.table, where, keys=keys_value(listed))

    async def _rows(self, conn: AsyncConnection, statement: Any, **values: str) -> set[Key]:
        """The (tenant, id) rows of ``statement``."""
        return _keys(await conn.execute(statement, values))

    # ---------------------------------------------------------------- step 1: responses

    async def _responses(self, conn: AsyncConnection, cursor: Cursor) -> Cursor | None:
        sql, created = self.sql, responses.c.created_at
        rows = (
            await conn.execute(
                select(
                    created,
                    responses.c.id,
                    responses.c.tenant,
                    responses.c.checkpoint_ids,
                    responses.c.root_id,
                )
                .where(
                    created < self.cutoffs.responses_before,
                    self._after((created, responses.c.id), cursor),
                    not_(sql.in_keys(responses.c.tenant, responses.c.id, name="protected")),
                )
                .order_by(created, responses.c.id)
                .limit(self.size),
                {"protected": keys_value(self.protected.responses)},
            )
        ).all()
        keys = {(str(row[2]), str(row[1])) for row in rows}
        candidates = {(str(row[2]), str(item)) for row in rows for item in (row[3] or ())}
        roots = {(str(row[2]), str(row[4] or row[1])) for row in rows}
        if self.dry_run:
            self.gone.responses += [key[1] for key in keys]
            self.report.responses += len(keys)
        else:
            self.report.responses += await self._remove(
                conn, responses.c.tenant, responses.c.id, keys
            )
        await self._remove_jobs(conn, keys)
        await self.items.add(conn, candidates)
        await self._remove_sessions(conn, await self._without_responses(conn, roots))
        return self._next(rows, 2)

    async def _remove_jobs(self, conn: AsyncConnection, keys: set[Key]) -> None:
        """The background jobs of these responses, with their event logs."""
        events, jobs = background_events.c, background_jobs.c
        self.report.background_events += await self._remove(
            conn, events.tenant, events.response_id, keys
        )
        self.report.background_jobs += await self._remove(conn, jobs.tenant, jobs.response_id, keys)

    # ---------------------------------------------------------------- step 2: conversations

    async def _conversations(self, conn: AsyncConnection, cursor: Cursor) -> Cursor | None:
        sql, before = self.sql, self.cutoffs.conversations_before
        last_active = conversations.c.last_active_at
        active: ColumnElement[Any] = last_active
        if self.dry_run:
            active = func.coalesce(last_active, conversations.c.created_at)
        elif not cursor:
            await conn.execute(
                update(conversations)
                .where(conversations.c.last_active_at.is_(None))
                .values(last_active_at=conversations.c.created_at)
            )
        rows = (
            await conn.execute(
                select(active, conversations.c.id, conversations.c.tenant)
                .where(
                    active < before,
                    self._after((active, conversations.c.id), cursor),
                    not_(sql.in_keys(conversations.c.tenant, conversations.c.id, name="protected")),
                )
                .order_by(active, conversations.c.id)
                .limit(self.size),
                {"protected": keys_value(self.protected.conversations)},
            )
        ).all()
        keys = {(str(row[2]), str(row[1])) for row in rows}
        listed = conversation_items.c
        # Before the rows go (PostgreSQL's foreign key cascades).
        candidates = await self._rows(
            conn,
            select(listed.tenant, listed.item_id)
            .where(sql.in_keys(listed.tenant, listed.conversation_id, name="keys"))
            .distinct(),
            keys=keys_value(sorted(keys)),
        )
        removed = keys
        if self.dry_run:
            self.gone.conversations += [key[1] for key in keys]
        elif keys:
            # Still inactive: an append since the read above made it active again.
            removed = await self._rows(
                conn,
                delete(conversations)
                .where(
                    sql.in_keys(conversations.c.tenant, conversations.c.id, name="keys"),
                    conversations.c.last_active_at < before,
                )
                .returning(conversations.c.tenant, conversations.c.id),
                keys=keys_value(sorted(keys)),
            )
            await self._remove(conn, listed.tenant, listed.conversation_id, removed)
        self.report.conversations += len(removed)
        await self._remove_sessions(conn, removed)
        await self.items.add(conn, candidates)
        return self._next(rows, 2)

    # ---------------------------------------------------------------- steps 3 and 4

    async def _finished_jobs(self, conn: AsyncConnection, cursor: Cursor) -> Cursor | None:
        jobs = background_jobs.c
        rows = (
            await conn.execute(
                select(jobs.finished_at, jobs.response_id, jobs.tenant)
                .where(
                    jobs.status.in_(sorted(FINAL_STATUSES)),
                    jobs.finished_at < self.cutoffs.responses_before,
                    self._after((jobs.finished_at, jobs.response_id), cursor),
                    not_(self.sql.in_list(jobs.response_id, "gone")),
                )
                .order_by(jobs.finished_at, jobs.response_id)
                .limit(self.size),
                {"gone": ids_value(self.gone.responses)},
            )
        ).all()
        await self._remove_jobs(conn, {(str(row[2]), str(row[1])) for row in rows})
        return self._next(rows, 2)

    async def _stale_sessions(self, conn: AsyncConnection, cursor: Cursor) -> Cursor | None:
        sessions = tool_sessions.c
        order = (sessions.updated_at, sessions.tenant, sessions.session_id)
        rows = (
            await conn.execute(
                select(*order)
                .where(
                    sessions.updated_at < self.cutoffs.responses_before, self._after(order, cursor)
                )
                .order_by(*order)
                .limit(self.size)
            )
        ).all()
        keys = {(str(row[1]), str(row[2])) for row in rows}
        # A conversation's session goes with its conversation (step 2), never here.
        of_conversations = await self._rows(
            conn,
            select(conversations.c.tenant, conversations.c.id).where(
                self.sql.in_keys(conversations.c.tenant, conversations.c.id, name="keys"),
                not_(self.sql.in_list(conversations.c.id, "gone")),
            ),
            keys=keys_value(sorted(keys)),
            gone=ids_value(self.gone.conversations),
        )
        await self._remove_sessions(
            conn, await self._without_responses(conn, keys) - of_conversations
        )
        return self._next(rows, 3)

    # ---------------------------------------------------------------- references

    async def _without_responses(self, conn: AsyncConnection, roots: set[Key]) -> set[Key]:
        """The chain roots among ``roots`` that no stored response of their tenant belongs to
        any more."""
        if not roots:
            return set()
        sql, kept = self.sql, not_(self.sql.in_list(responses.c.id, "gone"))
        values = {"roots": keys_value(sorted(roots)), "gone": ids_value(self.gone.responses)}
        tenant = responses.c.tenant
        alive = await self._rows(
            conn,
            select(tenant, responses.c.root_id).where(
                sql.in_keys(tenant, responses.c.root_id, name="roots"), kept
            ),
            **values,
        )
        alive |= await self._rows(
            conn,
            select(tenant, responses.c.id).where(
                sql.in_keys(tenant, responses.c.id, name="roots"), kept
            ),
            **values,
        )
        return roots - alive

    async def _remove_sessions(self, conn: AsyncConnection, keys: set[Key]) -> None:
        fresh = keys - self.gone.sessions
        self.report.tool_sessions += await self._remove(
            conn, tool_sessions.c.tenant, tool_sessions.c.session_id, fresh
        )
        if self.dry_run:
            self.gone.sessions.update(fresh)
