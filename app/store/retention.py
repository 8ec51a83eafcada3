"""``SqlRetention``: the purge of expired responses and conversations (``core.retention.Purger``)
on the SQL store's database, SQLite or PostgreSQL.

A purge runs four steps, each in batches of ``batch_size`` rows, one transaction a batch:

1. responses created before the cut-off, oldest first, except those an active background job
   continues (its ``previous_response_id``), with their background jobs and event logs;
2. conversations last active before theirs (``last_active_at``; NULL, from before migration
   0009, is filled from ``created_at`` first), except those an active background job writes
   to, with their ``conversation_items`` rows and tool sessions;
3. finished background jobs finished before the responses' cut-off that step 1 did not meet
   (failed and cancelled responses have no response row), with their event logs;
4. tool sessions not updated since the responses' cut-off that belong to nothing left: a chain
   with no response (``root_id``) and no conversation of that id.

Items are shared by id within their tenant (keyed (tenant, id): another tenant's ``msg_1`` is
another item): a response's checkpoint lists every item of its history (so its children, and
every later response of a conversation, list the items of earlier ones), a client may send
back or ``item_reference`` any id it stored, and a conversation lists its items. So the items
of what steps 1 and 2 remove (every id of their checkpoints, every item of their
conversations, with the tenant of each) are candidates, and a candidate goes only when no
stored response and no conversation of its own tenant lists it; another tenant's references
neither keep an item nor remove it. The candidates are written to ``purge_candidates`` in
the transaction that removes what listed them (a purge stopped before its sweep leaves them
to the next one) and swept (``retention_sweep``) after steps 1 and 2, and whenever 50,000 are
waiting: one pass over every stored checkpoint (``json_each`` /
``json_array_elements_text``) and an index lookup in ``conversation_items``, in a read-only
snapshot (no lock held: on SQLite saves go on), then the unlisted ones are deleted in
batches, each of which first checks again the responses created since the pass began (the
``created_at`` index, less a minute for the clocks of several gateways) and the
conversations, so that what a request started meanwhile lists stays. One pass per sweep, not
per batch: measured in ``bench/README.md`` ("Issue 17: retention"). What is kept stays
readable: a kept response's checkpoint, input items and continuation, a kept conversation's
items. Tool sessions are likewise keyed (tenant, session id): a chain's session goes once no
response of its tenant belongs to the chain.

Several processes: on PostgreSQL each write transaction takes a transaction-scoped advisory
lock with ``pg_try_advisory_xact_lock`` and stops when another process holds it (``purge``
returns None when that happens before anything was purged); on SQLite the write transaction
(``BEGIN IMMEDIATE``) serializes them. Rows are chosen by id and age only, so columns added
to these tables do not change the statements.

What is not guarded: a request that read an expiring response (its ``previous_response_id``)
or an item that only expiring responses list (``item_reference``), started more than a
minute before a sweep's pass and saving between that pass and the deletion of those items,
lists items the purge removes; its continuations then miss them. Requests started later
keep what they list (the check again above). Only long requests on responses at the edge of
their retention, in flight across a purge, are exposed.

``dry_run``: the same batches in read-only transactions; what earlier batches would remove
(``_Gone``) is left out of the references later batches and sweeps see, so the report is
what a purge would remove now.
"""

from __future__ import annotations

import contextlib
from typing import Any

from sqlalchemy import select

from app.core.jobs import ACTIVE_STATUSES
from app.core.ports import ResponseStore
from app.core.retention import PeriodicPurge, PurgeReport, RetentionCutoffs, RetentionPolicy
from app.store.retention_run import Protected, PurgeRun
from app.store.retention_sql import Key, PurgeLockedError, PurgeSql
from app.store.sql import SqlResponseStore
from app.store.sql_database import SqlDatabase
from app.store.tables import background_jobs


class SqlRetention:
    """The purge on a ``SqlDatabase`` (the store's, or one the CLI opens)."""

    def __init__(self, db: SqlDatabase, *, batch_size: int = 500) -> None:
        self._db = db
        self._sql = PurgeSql(db)
        self._batch_size = batch_size

    async def purge(
        self, cutoffs: RetentionCutoffs, *, dry_run: bool = False
    ) -> PurgeReport | None:
        report = PurgeReport(dry_run=dry_run)
        if cutoffs.empty:
            return report
        protected = await self._protected()
        run = PurgeRun(self._sql, cutoffs, report, protected, batch_size=self._batch_size)
        try:
            await run.all_steps()
        except PurgeLockedError:
            return None if run.batches == 0 else report
        return report

    async def _protected(self) -> Protected:
        """What the active background jobs continue (their ``previous_response_id`` and
        ``conversation``, their tenant's): kept while they run."""
        async with self._db.read() as conn:
            rows = await conn.execute(
                select(background_jobs.c.tenant, background_jobs.c.request).where(
                    background_jobs.c.status.in_(sorted(ACTIVE_STATUSES))
                )
            )
            requests = [(str(row[0]), row[1]) for row in rows if isinstance(row[1], dict)]
        previous = {(t, r.get("previous_response_id")) for t, r in requests}
        conversation = {(t, _conversation_id(r.get("conversation"))) for t, r in requests}
        return Protected(responses=_known(previous), conversations=_known(conversation))


def _known(keys: set[tuple[str, Any]]) -> list[Key]:
    return sorted((tenant, value) for tenant, value in keys if isinstance(value, str))


def _conversation_id(value: Any) -> str | None:
    if isinstance(value, dict):
        value = value.get("id")
    return value if isinstance(value, str) else None


def start_purging(
    store: ResponseStore, policy: RetentionPolicy | None, stack: contextlib.AsyncExitStack
) -> PeriodicPurge | None:
    """The gateway's periodic purge of ``store`` (the SQL store; None for another one, or when
    ``policy`` is None), started, and stopped by ``stack``."""
    if policy is None or not isinstance(store, SqlResponseStore):
        return None
    periodic = PeriodicPurge(SqlRetention(store.db, batch_size=policy.batch_size), policy)
    periodic.start()
    stack.push_async_callback(periodic.aclose)
    return periodic
