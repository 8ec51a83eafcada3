"""Job signals: the prompt news that gateway processes on one database send each other about
background jobs (``core.background``), so that nobody has to wait for a lease renewal or a log
poll to learn it.

Two kinds, each about one response id:

- ``cancelled``: the job is no longer its owner's to run (cancelled or deleted by any process):
  the process running it checks its record and stops its run at once.
- ``events``: events were logged for the job (or its status changed): processes following
  its stream read the log now.

A signal is a hint, never the truth: the store is. Receivers re-read the store, a signal may
come twice or late, and one lost while a transport was down is made up for by the slow paths
(the lease renewal stops a cancelled run within a third of the lease; followers still read the
log every ``BackgroundOptions.signalled_poll_interval``).

The port is ``JobSignals``; adapters: ``LocalJobSignals`` (this module: one process, e.g. the
embedded SQLite store, and the tests), ``app.store.pg_signals`` (PostgreSQL ``LISTEN/NOTIFY``)
and ``app.store.redis_signals`` (Redis pub/sub); tests/background/test_job_signals_contract.py
holds them to one behaviour. ``SignalledJobs`` publishes ``events`` after every log write of a
``JobStore``; ``JobSignalling`` is what ``core.background`` does with the signals.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any, Literal, Protocol, runtime_checkable

from app.core.jobs import JobStore, LoggedEvent
from app.protocol.json_types import JsonObject

SignalKind = Literal["cancelled", "events"]
CANCELLED: SignalKind = "cancelled"
EVENTS: SignalKind = "events"
SIGNAL_KINDS: frozenset[str] = frozenset({CANCELLED, EVENTS})
# The receiver of every signal: (kind, response id). Called on the event loop; must not block.
SignalReceiver = Callable[[SignalKind, str], None]


@runtime_checkable
class JobSignals(Protocol):
    """Carries job signals between the processes that share one transport (see the module)."""

    @property
    def spans_processes(self) -> bool:
        """Whether signals reach other processes (False: this process only)."""
        ...

    async def listen(self, receiver: SignalReceiver) -> None:
        """Deliver to ``receiver`` every signal published once this returns, by any process on
        the transport (this one included), until ``aclose``."""
        ...

    def publish(self, kind: SignalKind, response_id: str) -> None:
        """Send a signal soon, in order, without waiting: a signal repeated before it went out
        is sent once; one that cannot be sent (the transport is down) may be lost."""
        ...

    async def aclose(self) -> None:
        """Stop listening and sending (what is queued may be dropped); idempotent."""
        ...


def encode(kind: SignalKind, response_id: str) -> str:
    """A signal as the transports carry it: ``"<kind> <response id>"``."""
    return f"{kind} {response_id}"


def decode(payload: str) -> tuple[SignalKind, str] | None:
    """``encode``'s inverse; None for a payload that is not a signal (ignored)."""
    kind, _, response_id = payload.partition(" ")
    if kind == CANCELLED and response_id:
        return CANCELLED, response_id
    if kind == EVENTS and response_id:
        return EVENTS, response_id
    return None


class LocalJobSignals:
    """Signals within this process: every receiver of this object gets every signal published
    on it (from the event loop, soon after ``publish``)."""

    spans_processes = False

    def __init__(self) -> None:
        self._receivers: list[SignalReceiver] = []

    async def listen(self, receiver: SignalReceiver) -> None:
        self._receivers.append(receiver)

    def publish(self, kind: SignalKind, response_id: str) -> None:
        loop = asyncio.get_running_loop()
        for receiver in self._receivers:
            loop.call_soon(receiver, kind, response_id)

    async def aclose(self) -> None:
        self._receivers.clear()


class SignalledJobs:
    """A ``JobStore`` that publishes ``events`` after each write that logged events (one
    signal per write: a run's batch of events, a cancel's or a takeover's closing event). Every
    other call goes to the store unchanged."""

    def __init__(self, jobs: JobStore, signals: JobSignals) -> None:
        self._jobs = jobs
        self._signals = signals

    async def append_events(
        self, response_id: str, events: Sequence[LoggedEvent], *, tenant: str
    ) -> None:
        await self._jobs.append_events(response_id, events, tenant=tenant)
        if events:
            self._signals.publish(EVENTS, response_id)

    async def log_events(
        self, response_id: str, owner: str, events: Sequence[LoggedEvent], *, tenant: str
    ) -> bool:
        logged = await self._jobs.log_events(response_id, owner, events, tenant=tenant)
        if logged and events:
            self._signals.publish(EVENTS, response_id)
        return logged

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
        updated = await self._jobs.update_job(
            response_id, owner, response, now, events, tenant=tenant
        )
        if updated:  # a status change is news for followers too
            self._signals.publish(EVENTS, response_id)
        return updated

    def __getattr__(self, name: str) -> Any:
        return getattr(self._jobs, name)


class _Run(Protocol):
    async def stop_if_lost(self) -> None: ...


class JobSignalling:
    """What one ``BackgroundResponses`` does with the signals: publishes them, wakes its
    followers waiting on a response (``watch``), and on ``cancelled`` about a job it runs
    (``runs``: this process's runs by response id) has the run check its record and stop if
    the job is no longer its own. Without signals (None): followers are woken by nobody."""

    def __init__(self, signals: JobSignals | None, runs: Mapping[str, _Run]) -> None:
        self._signals = signals
        self._runs = runs
        self._waiting: dict[str, set[asyncio.Event]] = {}
        self._checks: set[asyncio.Task[None]] = set()

    async def start(self) -> None:
        if self._signals is not None:
            await self._signals.listen(self._receive)

    async def aclose(self) -> None:
        """Stop the checks under way (the signals themselves are the caller's to close)."""
        self._runs = {}
        for check in list(self._checks):
            check.cancel()

    def publish(self, kind: SignalKind, response_id: str) -> None:
        if self._signals is not None:
            self._signals.publish(kind, response_id)

    @contextlib.contextmanager
    def watch(self, response_id: str) -> Iterator[asyncio.Event]:
        """An event set by every signal about ``response_id`` while the block runs (clear it
        before reading what it announces, then wait on it)."""
        event = asyncio.Event()
        self._waiting.setdefault(response_id, set()).add(event)
        try:
            yield event
        finally:
            waiting = self._waiting.get(response_id)
            if waiting is not None:
                waiting.discard(event)
                if not waiting:
                    del self._waiting[response_id]

    def _receive(self, kind: SignalKind, response_id: str) -> None:
        for event in self._waiting.get(response_id, ()):
            event.set()
        run = self._runs.get(response_id)
        if kind == CANCELLED and run is not None:
            check = asyncio.create_task(run.stop_if_lost(), name=f"check {response_id}")
            self._checks.add(check)
            check.add_done_callback(self._checks.discard)


async def wait_at_most(event: asyncio.Event, seconds: float) -> None:
    """Until ``event`` is set or ``seconds`` have passed."""
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(event.wait(), seconds)
