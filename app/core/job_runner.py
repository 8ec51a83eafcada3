"""``JobRun``: one background response running in this process, from its job record.

The work is ``ResponsesService.open_stream`` (the plain path or the tool loop, persisted by the
service as a foreground response is), run in a task of its own so that no client connection
owns it. Its events are renumbered by one ``core.stream.ResponseLifecycle`` that continues the
event log (number 0, ``response.created`` with status ``queued``, was logged when the job was
queued; the service's own ``response.created`` is dropped), written to the log in batches
(``JobStore.log_events``: every event that is waiting goes in one write, while the next ones
wait for it; refused, like every write of the run, once the job is no longer its own), and
shown to this process's followers only once logged: a client never sees a number that a
process taking the job over, or a cancel, could give again.

While it runs, the task renews its lease every third of the lease time; a renewal that is
refused (the job was cancelled, or another process took it over after a stall) stops the run.
The job's status changes go with the log writes (``JobStore.update_job``: the response and the
events in one transaction, compare-and-set on the owner): ``in_progress`` with the first events,
the final status and response with the last ones. If one is refused, the job is no longer this
run's: the run stops, and the response row the service may have stored is deleted again, so
nothing is stored twice or half.

A tool loop's run saves a checkpoint at the end of each round whose gateway calls all have
results (``core.checkpoint``): once every event up to there is logged, the loop's state and the
number of the last of those events go to the job record (``JobStore.save_checkpoint``, refused
like ``update_job`` when the job is no longer this run's). A run started with ``resume_from``
(``core.background``, a job taken over) continues the loop from one. Before a round's gateway
tool calls start, the run logs what waits and marks the last checkpoint (or ``START``) with
``calls_started``: a job taken over after that is failed rather than continued, so no call runs
twice (one more write per tool round, background runs only).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Callable, Mapping
from dataclasses import dataclass

from app.core.checkpoint import START, Checkpoints, LoopCheckpoint
from app.core.jobs import JobStore, LoggedEvent
from app.core.ports import ResponseStore
from app.core.response import normalize_error
from app.core.service import ResponsesService
from app.core.stream import ResponseLifecycle
from app.errors import GatewayError
from app.protocol import events as ev
from app.protocol.json_types import JsonObject
from app.protocol.requests import ParsedRequest

logger = logging.getLogger(__name__)

_TERMINAL = frozenset({ev.RESPONSE_COMPLETED, ev.RESPONSE_INCOMPLETE, ev.RESPONSE_FAILED})


@dataclass(frozen=True, slots=True)
class JobContext:
    """What every run of this process shares."""

    service: ResponsesService
    jobs: JobStore
    store: ResponseStore
    owner: str
    lease_seconds: float
    clock: Callable[[], float]


def is_terminal(event: JsonObject) -> bool:
    return event.get("type") in _TERMINAL


class JobRun:
    """One job run by this process: its task, its lease, its logged events (see the module)."""

    def __init__(
        self, context: JobContext, response_id: str, snapshot: JsonObject, first: int, tenant: str
    ) -> None:
        """``snapshot``: the response as it stands (queued); ``first``: the number of the
        first event this run logs; ``tenant``: the job's (every read and write of the run is
        that tenant's)."""
        self._context = context
        self.response_id = response_id
        self.tenant = tenant
        self.snapshot = snapshot
        self._lifecycle = ResponseLifecycle(first)
        self.events: list[JsonObject] = []  # logged: what followers may see
        self.logged_from = first  # the number of ``events[0]`` (earlier ones: in the log only)
        self._pending: list[JsonObject] = []
        self._changed = asyncio.Condition()
        self._flushing: asyncio.Task[None] | None = None
        self._task: asyncio.Task[None] | None = None
        self._stopping = False
        self._update: JsonObject | None = None  # the job's response, written with the next log
        self._lost = False  # the job is no longer this run's (cancelled, taken over)
        self.on_done: Callable[[str], None] | None = None
        self.done = False
        self._resume_from: LoopCheckpoint | None = None
        self._checkpoint: LoopCheckpoint | None = None  # the last one saved

    # ------------------------------------------------------------------ running

    def start(
        self,
        request: ParsedRequest,
        headers: Mapping[str, str],
        resume_from: LoopCheckpoint | None = None,
    ) -> None:
        """Run the job in a task: from the start, or from a tool loop's checkpoint."""
        self._resume_from = self._checkpoint = resume_from
        self._task = asyncio.create_task(
            self._run(request, headers), name=f"background {self.response_id}"
        )

    async def stop(self) -> None:
        """Cancel the work (the upstream request and running tool calls) and wait for it."""
        self._stopping = True
        task = self._task
        if task is not None and not task.done():
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
        await self._flush_all()  # what it produced before it stopped is logged

    async def stop_if_lost(self) -> None:
        """On a ``cancelled`` signal (``core.job_signals``): read the job's record, and when it
        is no longer this run's (cancelled, deleted, taken over) stop the work at once, as a
        refused renewal does, logging nothing more (the canceller logged the closing event)."""
        context = self._context
        try:
            job = await context.jobs.get_job(self.response_id, tenant=self.tenant)
        except Exception:  # the renewal checks again
            logger.exception("checking background job %s failed", self.response_id)
            return
        if job is not None and job.active and job.owner == context.owner:
            return
        logger.info("background job %s was stopped elsewhere: stopping", self.response_id)
        self._lost = True
        if self._task is not None and not self._stopping:
            self._task.cancel()

    async def close_with(self, response: JsonObject) -> None:
        """After ``stop``: log the terminal event of a response that ended outside the run
        (cancelled: the job is no longer active, so the event goes in without an owner check)."""
        self.snapshot = response
        closing = self._lifecycle.closing(response)
        logged = LoggedEvent(int(closing["sequence_number"]), closing)
        await self._context.jobs.append_events(self.response_id, [logged], tenant=self.tenant)
        async with self._changed:
            self.events.append(closing)
            self._changed.notify_all()
        await self.release()

    async def release(self) -> None:
        """End the run's followers (whatever comes next for the job, they read from the log)."""
        if self.done:
            return
        async with self._changed:
            self.done = True
            self._changed.notify_all()
        if self.on_done is not None:
            self.on_done(self.response_id)

    async def _run(self, request: ParsedRequest, headers: Mapping[str, str]) -> None:
        context = self._context
        renewing = asyncio.create_task(self._renew())
        try:
            # In progress from the first logged event on (the upstream accepted the request).
            self.snapshot = self._update = {**self.snapshot, "status": "in_progress"}
            final = await self._produce(request, headers)
            self._update = final
            await self._flush_all()
            # Cancelled or taken over meanwhile: what the service stored is not ours.
            if self._lost:
                await context.store.delete_response(self.response_id, tenant=self.tenant)
            else:
                self.snapshot = final
        except asyncio.CancelledError:
            raise
        except Exception:  # a bug: the job's lease lapses and a sweep takes it over
            logger.exception("background run failed", extra={"response_id": self.response_id})
        finally:
            renewing.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await renewing
            if not self._stopping:  # else ``close_with``/``release`` ends it
                await self.release()

    async def _produce(self, request: ParsedRequest, headers: Mapping[str, str]) -> JsonObject:
        """Run the response through the service; returns the final Response object."""
        service = self._context.service
        lifecycle = self._lifecycle
        try:
            stream = await service.open_stream(
                request,
                headers,
                response_id=self.response_id,
                created_at=int(self.snapshot["created_at"]),
                checkpoints=Checkpoints(
                    self._resume_from, self._save_checkpoint, self._calls_starting
                ),
            )
        except GatewayError as exc:
            # A foreground client would get an HTTP error; this one gets the stream's failure.
            error: JsonObject = {"code": exc.code or exc.type, "message": exc.message}
            failed = {**self.snapshot, "status": "failed", "error": _response_error(error)}
            for event in lifecycle.failure(error, failed):
                self._queue(event)
            return failed
        final: JsonObject = self.snapshot
        try:
            async for event in stream:
                if event.get("type") == ev.RESPONSE_CREATED:
                    continue  # the job's own (queued) is number 0
                self._queue(lifecycle.stamp(event))
                if is_terminal(event):
                    final = event["response"]
        finally:
            aclose = getattr(stream, "aclose", None)
            if aclose is not None:  # stops the upstream request and the running tool calls
                await aclose()
        return final

    async def _save_checkpoint(self, checkpoint: LoopCheckpoint) -> None:
        """At a round's end: log what waits, then record the checkpoint that covers it."""
        await self._flush_all()
        if self._lost:
            return
        try:
            await self._record(checkpoint.covering(self._lifecycle.next_number - 1))
        except asyncio.CancelledError:
            raise
        except Exception:  # the run goes on: a takeover would go back to the previous one
            logger.exception("saving a checkpoint failed", extra={"response_id": self.response_id})

    async def _calls_starting(self) -> None:
        """Before gateway tool calls start: the last checkpoint, marked (``core.background``
        then never continues from it: the calls could run twice). A store error here stops
        the run before the calls start."""
        await self._flush_all()
        if self._lost:
            return
        await self._record((self._checkpoint or START).with_calls_started())

    async def _record(self, checkpoint: LoopCheckpoint) -> None:
        context = self._context
        saved = await context.jobs.save_checkpoint(
            self.response_id, context.owner, checkpoint.to_json(), tenant=self.tenant
        )
        if not saved:
            self._lost = True  # cancelled or taken over: the run stops here
            raise asyncio.CancelledError
        self._checkpoint = checkpoint

    async def _renew(self) -> None:
        context = self._context
        while True:
            await asyncio.sleep(context.lease_seconds / 3)
            lease_until = context.clock() + context.lease_seconds
            renewed = await context.jobs.renew_lease(
                self.response_id, context.owner, lease_until, tenant=self.tenant
            )
            if not renewed:
                logger.info("background job %s is no longer ours: stopping", self.response_id)
                if self._task is not None:
                    self._task.cancel()
                return

    def _now(self) -> int:
        return int(self._context.clock())

    # ------------------------------------------------------------------ the event log

    def _queue(self, event: JsonObject) -> None:
        if self._lost:
            return
        self._pending.append(event)
        if self._flushing is None or self._flushing.done():
            self._flushing = asyncio.create_task(self._flush())

    async def _flush(self) -> None:
        """Log what waits, in one write: with the job's new response when there is one
        (``update_job``, refused when the job is no longer this run's: then the run stops)."""
        context = self._context
        while not self._lost and (self._pending or self._update is not None):
            batch, self._pending = self._pending, []
            update, self._update = self._update, None
            logged = [LoggedEvent(int(e["sequence_number"]), e) for e in batch]
            if update is None:
                written = await context.jobs.log_events(
                    self.response_id, context.owner, logged, tenant=self.tenant
                )
            else:
                written = await context.jobs.update_job(
                    self.response_id, context.owner, update, self._now(), logged, tenant=self.tenant
                )
            if not written:
                self._lost = True
                task = self._task
                if task is not None and not task.done() and not self._stopping:
                    task.cancel()
                return
            async with self._changed:
                self.events.extend(batch)
                self._changed.notify_all()

    async def _flush_all(self) -> None:
        while self._flushing is not None and not self._flushing.done():
            await self._flushing
        if self._pending or self._update is not None:
            await self._flush()

    async def follow(self, after: int) -> AsyncIterator[JsonObject]:
        """The logged events numbered above ``after``, then the next ones as they are logged,
        until the run ends."""
        index = 0
        while True:
            async with self._changed:
                while index >= len(self.events) and not self.done:
                    await self._changed.wait()
                batch = self.events[index:]
                finished = self.done
            index += len(batch)
            for event in batch:
                if int(event["sequence_number"]) > after:
                    yield event
            if finished and index >= len(self.events):
                return


def _response_error(error: JsonObject) -> JsonObject:
    normalized = normalize_error(error)
    assert normalized is not None
    return normalized
