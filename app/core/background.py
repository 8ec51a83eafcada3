"""``BackgroundResponses``: OpenAI's background mode, durable in the store.

- ``create`` (``background: true``) records a job (``core.jobs``: the request, the ``queued``
  response, this process's lease) with event 0 of its stream, ``response.created`` in status
  ``queued``, starts a ``core.job_runner.JobRun`` and answers at once: the queued Response, or
  with ``stream: true`` the run's events as they are logged. A client that disconnects stops
  following; the run goes on.
- ``get`` answers from the stored response (completed, incomplete), else from the job record
  (queued, in progress, failed, cancelled): every poll is a whole Response object.
- ``stream`` (``GET ...?stream=true&starting_after=N``) replays the logged events after N and
  follows the live ones until the terminal event: from the run when this process runs it, else
  by reading the log (another process runs it) whenever an ``events`` signal about it comes
  (``core.job_signals``), and at the latest every ``poll_interval`` (``signalled_poll_interval``
  when signals reach other processes). A response that was not created in background answers
  OpenAI's 400; one whose log was purged (retention) says so.
- ``cancel`` stops this process's run (the task: the upstream request and running tool calls),
  marks the job ``cancelled`` (compare-and-set: a job that finished first stays as it is, and is
  returned unchanged), deletes a response row the run stored just before it stopped, and logs
  the terminal event. A job another process runs is marked the same way, then a ``cancelled``
  signal tells that process, which stops its run at once (without signals, or if the signal is
  lost: at its next lease renewal, within a third of the lease). ``delete`` signals the same.
- ``sweep`` (at ``start`` and every ``sweep_interval``) takes over jobs whose lease lapsed (their
  process died or stalled) and purges the event logs of jobs finished more than the retention
  period ago. A job taken over is, in order: finished from its stored response when its run had
  stored one; failed with a clear error when it cannot be restarted safely (its request carried
  secret tool fields, which are never stored; it was started ``max_attempts`` times; or a
  gateway tool call ran that the restart would run again, see below); else restarted: from the
  tool loop's last checkpoint when it has one, else from the start. A restarted run continues
  the event log's numbers (a number is never given twice) and begins with a
  ``response.in_progress`` whose output is the checkpoint's (empty without one): a client
  following the stream sees there that the response went back to that point.

  Tool calls are never run twice silently. A checkpoint (``core.checkpoint``) is saved at the
  end of each round whose gateway tool calls all have results, once those results are logged,
  and records the number of the last event it covers; a restart from it re-runs the round after
  it (upstream inference is stateless). Before a round's gateway calls start, the run marks its
  last checkpoint (``START`` before the first) ``calls_started``, so a job whose process died
  while calls could have been running is failed with a clear error, never re-run; so is one
  whose log shows a gateway call completed or failed after its checkpoint (a second guard).
  A job whose process died while the upstream was answering (no call started since the last
  checkpoint) re-runs that round.

Every job is its tenant's (``core.tenancy``): ``get``, ``stream``, ``cancel`` and ``delete``
take the caller's tenant and answer another tenant's response as an unknown one (404), without
touching its run; a job taken over keeps its tenant, so its run reads and stores under it.

Several processes on one database share jobs through the store; the signals (PostgreSQL
``LISTEN/NOTIFY``, Redis pub/sub) only make them prompt: every log write publishes ``events``
(``SignalledJobs``), every cancel and delete ``cancelled``.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import socket
import time
import uuid
from collections.abc import AsyncIterator, Callable, Mapping
from dataclasses import dataclass

from app.core.checkpoint import LoopCheckpoint
from app.core.ids import new_id
from app.core.job_restart import unsafe_to_restart
from app.core.job_runner import JobContext, JobRun, is_terminal
from app.core.job_signals import CANCELLED, JobSignalling, JobSignals, SignalledJobs, wait_at_most
from app.core.jobs import BackgroundJob, JobStore, LoggedEvent
from app.core.limits import check_request_limits
from app.core.response import ResponseOutcome, build_response
from app.core.service import ResponsesService
from app.core.stream import ResponseLifecycle
from app.errors import InvalidRequestError, NotFoundError
from app.protocol import events as ev
from app.protocol.json_types import JsonObject
from app.protocol.requests import ParsedRequest

logger = logging.getLogger(__name__)

NOT_BACKGROUND_STREAM = (
    "This response cannot be streamed because it was not created with background=true."
)
NOT_BACKGROUND_CANCEL = "Only responses created with background=true can be cancelled."
_READ_BATCH = 500
_CLAIM_BATCH = 16


@dataclass(frozen=True, slots=True)
class BackgroundOptions:
    """``lease_seconds``: how long a job stays its process's without a renewal (renewed every
    third of it); ``event_retention_seconds``: how long the events of a finished job are kept;
    ``sweep_interval``: how often lapsed jobs are looked for (default half the lease);
    ``poll_interval``: how often a follower reads the log of a job another process runs, and
    ``signalled_poll_interval`` the same when signals reach other processes (a fallback: a
    signal wakes it first); ``max_attempts``: how many times a job may be started."""

    lease_seconds: float = 30.0
    event_retention_seconds: float = 600.0
    sweep_interval: float | None = None
    poll_interval: float = 0.25
    max_attempts: int = 3
    signalled_poll_interval: float = 2.0


def process_owner() -> str:
    """This process's name in the job records: host, pid and a random suffix."""
    return f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"


class BackgroundResponses:
    """Background responses of one gateway process (see the module docstring)."""

    def __init__(
        self,
        service: ResponsesService,
        jobs: JobStore,
        options: BackgroundOptions | None = None,
        *,
        owner: str | None = None,
        clock: Callable[[], float] = time.time,
        signals: JobSignals | None = None,
    ) -> None:
        """``signals``: the job signals of the processes on this database (None: none; the
        caller opens and closes them)."""
        self.options = options or BackgroundOptions()
        if signals is not None:
            jobs = SignalledJobs(jobs, signals)
        self.jobs = jobs
        self._service = service
        self._context = JobContext(
            service=service,
            jobs=jobs,
            store=service.store,
            owner=owner or process_owner(),
            lease_seconds=self.options.lease_seconds,
            clock=clock,
        )
        self._clock = clock
        self._runs: dict[str, JobRun] = {}
        self._sweeper: asyncio.Task[None] | None = None
        self._signalling = JobSignalling(signals, self._runs)
        spans = signals is not None and signals.spans_processes
        options = self.options
        self._poll = options.signalled_poll_interval if spans else options.poll_interval

    @property
    def owner(self) -> str:
        return self._context.owner

    # ------------------------------------------------------------------ lifetime

    async def start(self) -> None:
        """Listen to the job signals, take over what lapsed now, then sweep every
        ``sweep_interval``."""
        await self._signalling.start()
        await self.sweep()
        self._sweeper = asyncio.create_task(self._sweep_forever(), name="background sweep")

    async def aclose(self) -> None:
        """Stop sweeping and stop this process's runs, handing their jobs back (lease ended:
        the next sweep of any process takes them over)."""
        if self._sweeper is not None:
            self._sweeper.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._sweeper
        await self._signalling.aclose()
        for run in list(self._runs.values()):
            await run.stop()
            await self.jobs.renew_lease(run.response_id, self.owner, 0.0, tenant=run.tenant)
            await run.release()

    async def _sweep_forever(self) -> None:
        interval = self.options.sweep_interval or self.options.lease_seconds / 2
        while True:
            await asyncio.sleep(interval)
            try:
                await self.sweep()
            except Exception:
                logger.exception("background sweep failed")

    # ------------------------------------------------------------------ create

    async def _queue(self, request: ParsedRequest, headers: Mapping[str, str]) -> JobRun:
        body = request.body
        check_request_limits(body, self._service.limits)  # a 400 now, not a failed job later
        echoed = self._service.echoed(body)
        response_id = new_id("resp")
        created_at = int(self._clock())
        queued = build_response(
            echoed, response_id, created_at, ResponseOutcome(status="queued", output=[])
        )
        queued["usage"] = None
        first = ResponseLifecycle().stamp({"type": ev.RESPONSE_CREATED, "response": queued})
        job = BackgroundJob(
            response_id=response_id,
            status="queued",
            request={k: v for k, v in echoed.items() if k != "stream"},
            response=queued,
            resumable=echoed is body,
            owner=self.owner,
            lease_until=self._clock() + self.options.lease_seconds,
            attempts=1,
            created_at=created_at,
            tenant=request.tenant,
        )
        await self.jobs.add_job(job, first)
        run = self._new_run(response_id, queued, first=1, tenant=request.tenant)
        run.events.append(first)
        run.logged_from = 0
        run.start(_streamed(request), headers)
        return run

    async def create(self, request: ParsedRequest, headers: Mapping[str, str]) -> JsonObject:
        """``background: true``: the queued Response, at once."""
        run = await self._queue(request, headers)
        return run.events[0]["response"]  # type: ignore[no-any-return]

    async def open_stream(
        self, request: ParsedRequest, headers: Mapping[str, str]
    ) -> AsyncIterator[JsonObject]:
        """``background: true, stream: true``: the events from number 0, as they are logged."""
        run = await self._queue(request, headers)
        return self._follow(run.response_id, -1, request.tenant)

    def _new_run(
        self, response_id: str, snapshot: JsonObject, *, first: int, tenant: str
    ) -> JobRun:
        run = JobRun(self._context, response_id, snapshot, first, tenant)
        run.on_done = self._forget
        self._runs[response_id] = run
        return run

    def _forget(self, response_id: str) -> None:
        self._runs.pop(response_id, None)

    def _run_of(self, response_id: str, tenant: str) -> JobRun | None:
        """This process's run of ``tenant``'s response (another tenant's run is not named)."""
        run = self._runs.get(response_id)
        return run if run is not None and run.tenant == tenant else None

    # ------------------------------------------------------------------ retrieve

    async def get(self, response_id: str, *, tenant: str) -> JsonObject:
        try:
            return await self._service.get(response_id, tenant=tenant)
        except NotFoundError:
            job = await self.jobs.get_job(response_id, tenant=tenant)
            if job is None:
                raise
            return job.response

    async def stream(
        self, response_id: str, starting_after: int, *, tenant: str
    ) -> AsyncIterator[JsonObject]:
        """``GET /v1/responses/{id}?stream=true``; raises before the stream starts."""
        job = await self.jobs.get_job(response_id, tenant=tenant)
        if job is None:
            await self._service.get(response_id, tenant=tenant)  # unknown: 404
            raise InvalidRequestError(NOT_BACKGROUND_STREAM, param="stream")
        last = await self.jobs.last_sequence_number(response_id, tenant=tenant)
        if not job.active and last is None:
            minutes = self.options.event_retention_seconds / 60
            raise InvalidRequestError(
                "This response can no longer be streamed because it finished more than "
                f"{minutes:g} minutes ago.",
                param="stream",
            )
        return self._follow(response_id, starting_after, tenant)

    async def _follow(self, response_id: str, after: int, tenant: str) -> AsyncIterator[JsonObject]:
        last = after
        run = self._run_of(response_id, tenant)
        if run is not None:
            # What earlier runs logged (a run taken over starts after them): from the log.
            while last < run.logged_from - 1:
                earlier = await self.jobs.read_events(response_id, last, _READ_BATCH, tenant=tenant)
                earlier = [e for e in earlier if e.sequence_number < run.logged_from]
                if not earlier:
                    break
                for entry in earlier:
                    yield entry.event
                last = earlier[-1].sequence_number
            async for event in run.follow(last):
                yield event
                last = int(event["sequence_number"])
                if is_terminal(event):
                    return
        # Run by another process, or this run ended without its terminal event: the log, read
        # again on each signal about the job (woken: set after the read began).
        settled = False
        with self._signalling.watch(response_id) as woken:
            while True:
                woken.clear()
                logged = await self.jobs.read_events(response_id, last, _READ_BATCH, tenant=tenant)
                for entry in logged:
                    yield entry.event
                    last = entry.sequence_number
                    if is_terminal(entry.event):
                        return
                if logged:  # more waiting (a whole batch, or a signal came): read on
                    if len(logged) < _READ_BATCH and not woken.is_set():
                        await wait_at_most(woken, self._poll)
                    continue
                job = await self.jobs.get_job(response_id, tenant=tenant)
                if job is None or (not job.active and settled):
                    return
                settled = not job.active  # one more read: the terminal event may be on its way
                local = self._run_of(response_id, tenant)
                if local is not None:
                    async for event in local.follow(last):
                        yield event
                        last = int(event["sequence_number"])
                        if is_terminal(event):
                            return
                    continue
                await wait_at_most(woken, self._poll)

    # ------------------------------------------------------------------ cancel

    async def cancel(self, response_id: str, *, tenant: str) -> JsonObject:
        job = await self.jobs.get_job(response_id, tenant=tenant)
        if job is None:
            await self._service.get(response_id, tenant=tenant)  # unknown: 404
            raise InvalidRequestError(NOT_BACKGROUND_CANCEL, param="response_id")
        store = self._service.store
        stored = await store.get_response(response_id, tenant=tenant)
        if not job.active or stored is not None:  # finished (stored, or finishing): unchanged
            return stored.response if stored is not None else job.response
        run = self._run_of(response_id, tenant)
        if run is not None:
            await run.stop()
        snapshot = run.snapshot if run is not None else job.response
        cancelled: JsonObject = {**snapshot, "status": "cancelled", "completed_at": None}
        now = int(self._clock())
        if not await self.jobs.cancel_job(response_id, cancelled, now, tenant=tenant):
            if run is not None:
                await run.release()
            return await self.get(response_id, tenant=tenant)  # it finished first
        await store.delete_response(response_id, tenant=tenant)
        if run is not None:
            await run.close_with(cancelled)
        else:
            closing = await self._after_last(job, lambda lc: [lc.closing(cancelled)])
            await self.jobs.append_events(response_id, closing, tenant=tenant)
            # After the closing event: the owner stops without logging after it.
            self._signalling.publish(CANCELLED, response_id)
        return cancelled

    async def _after_last(
        self, job: BackgroundJob, build: Callable[[ResponseLifecycle], list[JsonObject]]
    ) -> list[LoggedEvent]:
        """The events ``build`` makes, numbered after the last one logged for ``job``."""
        last = await self.jobs.last_sequence_number(job.response_id, tenant=job.tenant)
        events = build(ResponseLifecycle(0 if last is None else last + 1))
        return [LoggedEvent(int(e["sequence_number"]), e) for e in events]

    async def delete(self, response_id: str, *, tenant: str) -> JsonObject:
        """``DELETE /v1/responses/{id}``: a background response's job and log go with it (a
        run of this process is stopped first)."""
        run = self._run_of(response_id, tenant)
        if run is not None:
            await run.stop()
        had_job = await self.jobs.delete_job(response_id, tenant=tenant)
        if run is not None:
            await run.release()
        elif had_job:
            self._signalling.publish(CANCELLED, response_id)
        try:
            return await self._service.delete(response_id, tenant=tenant)
        except NotFoundError:
            if not had_job:
                raise
            return {"id": response_id, "object": "response", "deleted": True}

    # ------------------------------------------------------------------ takeover, retention

    async def sweep(self) -> int:
        """Take over the jobs whose lease lapsed and purge expired event logs; how many jobs
        were taken over."""
        now = self._clock()
        claimed = await self.jobs.claim_lapsed(
            self.owner, now, now + self.options.lease_seconds, _CLAIM_BATCH
        )
        for job in claimed:
            try:
                await self._take_over(job)
            except Exception:
                logger.exception("taking over %s failed", job.response_id)
        cutoff = int(now - self.options.event_retention_seconds)
        await self.jobs.purge_finished(cutoff)
        return len(claimed)

    async def _take_over(self, job: BackgroundJob) -> None:
        response_id, tenant = job.response_id, job.tenant
        logger.info("taking over background job %s (attempt %d)", response_id, job.attempts)
        stored = await self._service.store.get_response(response_id, tenant=tenant)
        if stored is not None:  # its run stored the response, then stopped
            final = stored.response
            closing = await self._after_last(job, lambda lc: [lc.closing(final)])
            now = int(self._clock())
            await self.jobs.update_job(response_id, self.owner, final, now, closing, tenant=tenant)
            return
        saved = await self.jobs.get_checkpoint(response_id, tenant=tenant)
        checkpoint = None if saved is None else LoopCheckpoint.from_json(saved)
        reason = await unsafe_to_restart(self.jobs, job, checkpoint, self.options.max_attempts)
        if reason is not None:
            await self._fail(job, reason)
            return
        last = await self.jobs.last_sequence_number(response_id, tenant=tenant)
        output = [] if checkpoint is None else checkpoint.output
        queued = {**job.response, "status": "queued", "output": output}
        run = self._new_run(response_id, queued, first=(last or 0) + 1, tenant=tenant)
        request = ParsedRequest.from_body({**job.request, "stream": True}, tenant)
        run.start(request, {}, resume_from=checkpoint)

    async def _fail(self, job: BackgroundJob, reason: str) -> None:
        message = (
            "The gateway process that ran this background response stopped, and the "
            f"response could not be restarted: {reason}."
        )
        error: JsonObject = {"code": "server_error", "message": message}
        failed: JsonObject = {**job.response, "status": "failed", "error": error}
        closing = await self._after_last(job, lambda lc: lc.failure(error, failed))
        now = int(self._clock())
        await self.jobs.update_job(
            job.response_id, self.owner, failed, now, closing, tenant=job.tenant
        )


def running_count(background: BackgroundResponses) -> int:
    """How many background responses ``background`` runs now (queued or in progress): the
    metrics' gauge (a function, not a method: the class is at its method limit)."""
    return len(background._runs)


def _streamed(request: ParsedRequest) -> ParsedRequest:
    """The request as a background run sends it: always streamed (its events are logged)."""
    body = {**request.body, "stream": True}
    return ParsedRequest(request.params.model_copy(update={"stream": True}), body, request.tenant)
