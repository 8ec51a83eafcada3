"""``SqlJobs``: background jobs and their event logs in the SQL store (``app.core.jobs.JobStore``),
the ``background_jobs`` and ``background_events`` tables.

- Every owner-only write is one conditional ``UPDATE ... WHERE response_id = :id AND owner =
  :owner AND status IN ('queued', 'in_progress')``: its row count says whether the job was still
  the caller's (a compare-and-set, the same on SQLite and PostgreSQL). ``cancel_job`` is the same
  without the owner.
- ``claim_lapsed`` reads the candidates (active, lease ended) and claims each with a conditional
  ``UPDATE`` that repeats the lease test: of several processes racing for one job, one update
  matches, so each job is claimed by one process only.
- ``lease_until`` is stored in milliseconds since the epoch.
- A job and its events carry the job's ``tenant``; every statement about one job names it, so
  another tenant's job is not found (``claim_lapsed`` and ``purge_finished`` span tenants).

Every store on the same database sees the others' writes (several gateway processes).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy import delete, insert, select, update

from app.core.jobs import ACTIVE_STATUSES, FINAL_STATUSES, BackgroundJob, LoggedEvent
from app.protocol.json_types import JsonObject
from app.store.engine import json_loads
from app.store.sql_database import SqlDatabase
from app.store.tables import background_events, background_jobs

_ACTIVE = sorted(ACTIVE_STATUSES)
_JOB_COLUMNS = (
    background_jobs.c.response_id,
    background_jobs.c.status,
    background_jobs.c.request,
    background_jobs.c.response,
    background_jobs.c.resumable,
    background_jobs.c.owner,
    background_jobs.c.lease_until,
    background_jobs.c.attempts,
    background_jobs.c.created_at,
    background_jobs.c.finished_at,
    background_jobs.c.tenant,
)


def _ms(seconds: float) -> int:
    return int(seconds * 1000)


def _job(row: Sequence[Any]) -> BackgroundJob:
    response_id, status, request, response, resumable, owner = row[:6]
    lease, attempts, created, done, tenant = row[6:]
    return BackgroundJob(
        response_id=response_id,
        status=status,
        request=request,
        response=response,
        resumable=bool(resumable),
        owner=owner,
        lease_until=int(lease) / 1000,
        attempts=int(attempts),
        created_at=int(created),
        finished_at=None if done is None else int(done),
        tenant=tenant,
    )


class SqlJobs:
    """Background jobs and event logs on a ``SqlDatabase``."""

    def __init__(self, db: SqlDatabase) -> None:
        self._db = db

    async def add_job(self, job: BackgroundJob, first_event: JsonObject) -> None:
        row = {
            "response_id": job.response_id,
            "status": job.status,
            "request": job.request,
            "response": job.response,
            "resumable": job.resumable,
            "owner": job.owner,
            "lease_until": _ms(job.lease_until),
            "attempts": job.attempts,
            "created_at": job.created_at,
            "finished_at": job.finished_at,
            "tenant": job.tenant,
        }
        event = {
            "response_id": job.response_id,
            "sequence_number": 0,
            "event": first_event,
            "tenant": job.tenant,
        }
        async with self._db.write() as conn:
            await conn.execute(insert(background_jobs), row)
            await conn.execute(insert(background_events), event)

    async def get_job(self, response_id: str, *, tenant: str) -> BackgroundJob | None:
        """A fast read (``SqlDatabase.fetch``: the poll of a background response)."""
        rows = await self._db.fetch("get_job", response_id=response_id, tenant=tenant)
        if not rows:
            return None
        row = list(rows[0])
        row[2], row[3] = json_loads(row[2]), json_loads(row[3])
        return _job(row)

    async def renew_lease(
        self, response_id: str, owner: str, lease_until: float, *, tenant: str
    ) -> bool:
        values = {"lease_until": _ms(lease_until)}
        return await self._update_active(_Job(tenant, response_id), owner, values)

    async def update_job(
        self,
        response_id: str,
        owner: str,
        response: JsonObject,
        now: int,
        events: Sequence[LoggedEvent] = (),
        *,
        tenant: str,
    ) -> bool:
        status = str(response["status"])
        values: dict[str, Any] = {"status": status, "response": response}
        if status in FINAL_STATUSES:  # a finished job is not continued: its checkpoint goes
            values.update(finished_at=now, checkpoint=None)
        return await self._update_active(_Job(tenant, response_id), owner, values, events)

    async def cancel_job(
        self, response_id: str, response: JsonObject, now: int, *, tenant: str
    ) -> bool:
        values: dict[str, Any] = {"status": "cancelled", "response": response}
        values.update(finished_at=now, checkpoint=None)
        return await self._update_active(_Job(tenant, response_id), None, values)

    async def _update_active(
        self,
        job: _Job,
        owner: str | None,
        values: dict[str, Any],
        events: Sequence[LoggedEvent] = (),
    ) -> bool:
        statement = update(background_jobs).where(
            background_jobs.c.response_id == job.response_id,
            background_jobs.c.tenant == job.tenant,
            background_jobs.c.status.in_(_ACTIVE),
        )
        if owner is not None:
            statement = statement.where(background_jobs.c.owner == owner)
        async with self._db.write() as conn:
            result = await conn.execute(statement.values(**values))
            if result.rowcount and events:
                await conn.execute(insert(background_events), _event_rows(job, events))
        return bool(result.rowcount)

    async def log_events(
        self, response_id: str, owner: str, events: Sequence[LoggedEvent], *, tenant: str
    ) -> bool:
        # A no-op update: it checks the owner and locks the row for the inserts.
        touch: dict[str, Any] = {"owner": background_jobs.c.owner}
        return await self._update_active(_Job(tenant, response_id), owner, touch, events)

    async def save_checkpoint(
        self, response_id: str, owner: str, checkpoint: JsonObject, *, tenant: str
    ) -> bool:
        values = {"checkpoint": checkpoint}
        return await self._update_active(_Job(tenant, response_id), owner, values)

    async def get_checkpoint(self, response_id: str, *, tenant: str) -> JsonObject | None:
        async with self._db.read() as conn:
            checkpoint = await conn.scalar(
                select(background_jobs.c.checkpoint).where(
                    background_jobs.c.response_id == response_id,
                    background_jobs.c.tenant == tenant,
                )
            )
        return checkpoint if isinstance(checkpoint, dict) else None

    async def claim_lapsed(
        self, owner: str, now: float, lease_until: float, limit: int
    ) -> list[BackgroundJob]:
        lapsed = (
            background_jobs.c.status.in_(_ACTIVE),
            background_jobs.c.lease_until < _ms(now),
        )
        claimed: list[BackgroundJob] = []
        async with self._db.write() as conn:
            rows = await conn.execute(
                select(*_JOB_COLUMNS)
                .where(*lapsed)
                .order_by(background_jobs.c.created_at)
                .limit(limit)
            )
            for row in rows.all():
                job = _job(row)
                result = await conn.execute(
                    update(background_jobs)
                    .where(background_jobs.c.response_id == job.response_id, *lapsed)
                    .values(
                        owner=owner,
                        lease_until=_ms(lease_until),
                        attempts=background_jobs.c.attempts + 1,
                    )
                )
                if result.rowcount:
                    claimed.append(
                        dataclasses.replace(
                            job,
                            owner=owner,
                            lease_until=_ms(lease_until) / 1000,
                            attempts=job.attempts + 1,
                        )
                    )
        return claimed

    async def append_events(
        self, response_id: str, events: Sequence[LoggedEvent], *, tenant: str
    ) -> None:
        if not events:
            return
        rows = _event_rows(_Job(tenant, response_id), events)
        async with self._db.write() as conn:
            await conn.execute(insert(background_events), rows)

    async def read_events(
        self, response_id: str, after: int, limit: int, *, tenant: str
    ) -> list[LoggedEvent]:
        async with self._db.read() as conn:
            rows = await conn.execute(
                select(background_events.c.sequence_number, background_events.c.event)
                .where(
                    background_events.c.response_id == response_id,
                    background_events.c.tenant == tenant,
                    background_events.c.sequence_number > after,
                )
                .order_by(background_events.c.sequence_number)
                .limit(limit)
            )
            return [LoggedEvent(int(number), event) for number, event in rows.all()]

    async def last_sequence_number(self, response_id: str, *, tenant: str) -> int | None:
        async with self._db.read() as conn:
            number = await conn.scalar(
                select(background_events.c.sequence_number)
                .where(
                    background_events.c.response_id == response_id,
                    background_events.c.tenant == tenant,
                )
                .order_by(background_events.c.sequence_number.desc())
                .limit(1)
            )
        return None if number is None else int(number)

    async def delete_job(self, response_id: str, *, tenant: str) -> bool:
        async with self._db.write() as conn:
            # The job first: its row lock waits for a write of its owner under way (PostgreSQL),
            # so the events that write logs are there to be deleted next, not left behind.
            result = await conn.execute(
                delete(background_jobs).where(
                    background_jobs.c.response_id == response_id,
                    background_jobs.c.tenant == tenant,
                )
            )
            await conn.execute(
                delete(background_events).where(
                    background_events.c.response_id == response_id,
                    background_events.c.tenant == tenant,
                )
            )
        return bool(result.rowcount)

    async def purge_finished(self, finished_before: int) -> int:
        finished = select(background_jobs.c.response_id).where(
            background_jobs.c.finished_at < finished_before
        )
        async with self._db.write() as conn:
            result = await conn.execute(
                delete(background_events).where(background_events.c.response_id.in_(finished))
            )
        return int(result.rowcount or 0)


@dataclass(frozen=True, slots=True)
class _Job:
    """Which job a statement is about: a tenant's response id."""

    tenant: str
    response_id: str


def _event_rows(job: _Job, events: Sequence[LoggedEvent]) -> list[dict[str, Any]]:
    return [
        {
            "response_id": job.response_id,
            "sequence_number": e.sequence_number,
            "event": e.event,
            "tenant": job.tenant,
        }
        for e in events
    ]
