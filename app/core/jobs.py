"""The background-job port: the durable record of each ``background: true`` response and its
stream's event log (``JobStore``), which ``core.background`` runs on.

A job record holds the request to run (as the response echoes it: without the tool fields the
toolkit calls secret, so it is never more than what the gateway stores anyway), the response as
it stands (``queued`` → ``in_progress`` → a terminal status), and the lease of the process that
runs it: ``owner`` and ``lease_until``. Every write that only the owner may make names the owner
and is refused (``False``) when the job is no longer its own: a process that lost its lease (it
stalled, and another took the job over) cannot overwrite the new owner's work, and a cancelled
job cannot be revived.

While a tool loop runs, the record also keeps its last checkpoint (``core.checkpoint``: what
the next round needs, saved at the end of each completed round, compare-and-set on the owner
like every owner-only write): a process that takes the job over continues from there. It is
read apart from the record (``get_checkpoint``), so that polls do not carry it.

Tenancy (``core.tenancy``): a job belongs to the tenant of the request that queued it
(``BackgroundJob.tenant``; its event log and checkpoint with it). Every method that names a job
takes the caller's ``tenant`` and finds only that tenant's job: another tenant's is missing, as
an unknown id is. The two maintenance methods, ``claim_lapsed`` and ``purge_finished``, work on
every tenant's jobs; a job taken over keeps its tenant, so its run stores under it.

The event log keeps each event of the response's stream under its ``sequence_number`` (never
reused), so that ``GET /v1/responses/{id}?stream=true&starting_after=N`` can replay them from any
process; events of jobs that finished before a retention cut-off are purged.

Adapters: ``app.store.sql_jobs`` (SQLite, PostgreSQL, through ``SqlResponseStore``) and
``tests.fakes.MemoryJobs``; tests/store/test_job_store_contract.py holds them to one behaviour.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

from app.protocol.json_types import JsonObject

# The statuses of a job that is still to run or running; any other status is final.
ACTIVE_STATUSES = frozenset({"queued", "in_progress"})
FINAL_STATUSES = frozenset({"completed", "incomplete", "failed", "cancelled"})


@dataclass(frozen=True, slots=True)
class BackgroundJob:
    """One background response's job record.

    ``request``: the create body to run (secret tool fields removed); ``resumable``: whether
    ``request`` is the whole of what the client sent (False when secrets were removed: such a
    job cannot be restarted by another process). ``response``: the Response object as it
    stands. ``attempts``: how many times a process claimed it (1 for the first run).
    ``finished_at``: when it reached a final status (retention of its events), else None.
    ``tenant``: whose response it is (``owner`` is the process holding the lease).
    """

    response_id: str
    status: str
    request: JsonObject
    response: JsonObject
    resumable: bool
    owner: str | None
    lease_until: float
    attempts: int
    created_at: int
    tenant: str
    finished_at: int | None = None

    @property
    def active(self) -> bool:
        return self.status in ACTIVE_STATUSES


@dataclass(frozen=True, slots=True)
class LoggedEvent:
    """One event of a background response's stream, as logged."""

    sequence_number: int
    event: JsonObject


@runtime_checkable
class JobStore(Protocol):
    """Background jobs and their event logs (see the module docstring)."""

    async def add_job(self, job: BackgroundJob, first_event: JsonObject) -> None:
        """Record a new job (owned by ``job.owner``, ``job.tenant``'s) and its stream's first
        event (number 0)."""
        ...

    async def get_job(self, response_id: str, *, tenant: str) -> BackgroundJob | None: ...

    async def renew_lease(
        self, response_id: str, owner: str, lease_until: float, *, tenant: str
    ) -> bool:
        """Extend ``owner``'s lease; False when the job is not active or not ``owner``'s."""
        ...

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
        """Set the response (and its ``status``) of ``owner``'s active job, and log ``events``,
        in one transaction (a final status also sets ``finished_at`` = ``now``); False, and
        nothing written, when the job is not active or not ``owner``'s."""
        ...

    async def cancel_job(
        self, response_id: str, response: JsonObject, now: int, *, tenant: str
    ) -> bool:
        """Mark an active job ``cancelled`` with ``response``, whoever owns it; False when it
        is unknown or already final (nothing written)."""
        ...

    async def save_checkpoint(
        self, response_id: str, owner: str, checkpoint: JsonObject, *, tenant: str
    ) -> bool:
        """Replace the checkpoint of ``owner``'s active job; False, and nothing written, when
        the job is not active or not ``owner``'s. A job that reaches a final status
        (``update_job``, ``cancel_job``) loses its checkpoint."""
        ...

    async def get_checkpoint(self, response_id: str, *, tenant: str) -> JsonObject | None:
        """The job's last checkpoint (None: none saved, or no such job)."""
        ...

    async def claim_lapsed(
        self, owner: str, now: float, lease_until: float, limit: int
    ) -> list[BackgroundJob]:
        """Take over up to ``limit`` active jobs (of every tenant) whose lease ended before
        ``now``: each one claimed by one caller only (its ``attempts`` counted up), returned as
        claimed (with its tenant)."""
        ...

    async def log_events(
        self, response_id: str, owner: str, events: Sequence[LoggedEvent], *, tenant: str
    ) -> bool:
        """Log ``owner``'s events while the job is active and ``owner``'s, in one transaction
        with that check (on PostgreSQL it locks the job row, so a cancel made meanwhile waits
        for it, or refuses it); False, and nothing written, otherwise."""
        ...

    async def append_events(
        self, response_id: str, events: Sequence[LoggedEvent], *, tenant: str
    ) -> None:
        """Add events to the log (their sequence numbers are new for this response), without
        an owner check: for the closing event of whoever ended the job (a cancel)."""
        ...

    async def read_events(
        self, response_id: str, after: int, limit: int, *, tenant: str
    ) -> list[LoggedEvent]:
        """Up to ``limit`` logged events numbered above ``after``, in order."""
        ...

    async def last_sequence_number(self, response_id: str, *, tenant: str) -> int | None:
        """The highest logged sequence number (None: no event logged)."""
        ...

    async def delete_job(self, response_id: str, *, tenant: str) -> bool:
        """Delete a job record and its event log; False when there was none."""
        ...

    async def purge_finished(self, finished_before: int) -> int:
        """Delete the event logs of jobs (of every tenant) that finished before
        ``finished_before``; how many events went (the job records stay: they answer ``GET``
        and ``cancel``)."""
        ...
