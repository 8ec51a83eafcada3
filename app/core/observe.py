"""The tool-call event bus: every gateway tool call, to the log and to subscribed hooks.

Every call the tool loop runs (MCP, web search, file search, every tool engine) emits
``tool_call.started`` and then ``tool_call.completed`` (the call gave a result: ``ok``,
``duration_ms``, a bounded ``preview``) or ``tool_call.failed`` (an error result:
``error_kind``, a bounded ``message``, ``duration_ms``). ``ToolEvents`` owns the bus: the log
line is written at once; hooks (``subscribe``; metrics, traces, an operator's callable) get the
event later, so that a slow or failing hook never breaks or slows a response:

- ``emit`` never blocks: the event goes into a bounded queue drained by one background task
  of the running event loop. A full queue drops the event (``stats.dropped``, and a warning at
  most every ``DROP_WARNING_INTERVAL`` seconds).
- The task hands each event to every hook at once and waits for all of them before the next
  event, so each hook sees the events in order. An async hook is awaited with
  ``hook_timeout``; a sync hook runs on one of at most ``hook_threads`` daemon threads and is
  waited for with the same timeout (a call that overruns is left to finish on its own, so a
  sync hook that overruns may run alongside its next call). A hook that raises or times out
  is logged and counted (``stats``), never raised.
- ``drain()`` waits until every queued event is delivered (tests); ``aclose()`` drains (within
  a timeout) and stops the task. The bus stays usable: a later ``emit`` starts a new task.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import logging
import queue
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any, Final, Literal

from app.core.tracing import NO_TRACING, CallTracer

logger = logging.getLogger(__name__)

PREVIEW_CHARS = 200
MESSAGE_CHARS = 500
DEFAULT_QUEUE_SIZE = 1000
DEFAULT_HOOK_TIMEOUT = 5.0
DEFAULT_HOOK_THREADS = 4
DEFAULT_CLOSE_TIMEOUT = 10.0
DROP_WARNING_INTERVAL = 10.0
"""Seconds between two warnings about dropped events (the drops in between are summed)."""

STARTED: Final = "tool_call.started"
COMPLETED: Final = "tool_call.completed"
FAILED: Final = "tool_call.failed"
ToolEventType = Literal["tool_call.started", "tool_call.completed", "tool_call.failed"]


@dataclass(frozen=True, slots=True)
class ToolCallEvent:
    """One step of one gateway tool call.

    ``tool`` is the function name the loop has (the upstream's name, ``mcp__server__tool``);
    ``item_id`` the id of the item the client sees. ``ok`` is ``None`` on ``started``;
    ``preview`` is set on ``completed``, ``error_kind`` and ``message`` on ``failed``. ``at`` is
    the wall-clock time of the step (delivery to hooks is later)."""

    type: ToolEventType
    response_id: str
    round: int
    tool: str
    item_id: str
    ok: bool | None = None
    duration_ms: float | None = None
    preview: str | None = None
    error_kind: str | None = None
    message: str | None = None
    at: float = field(default_factory=time.time)

    def to_json(self) -> dict[str, Any]:
        """The event as a JSON object (fields that are not set are left out)."""
        out: dict[str, Any] = {
            "type": self.type,
            "response_id": self.response_id,
            "round": self.round,
            "tool": self.tool,
            "item_id": self.item_id,
            "at": self.at,
        }
        for key in ("ok", "duration_ms", "preview", "error_kind", "message"):
            value = getattr(self, key)
            if value is not None:
                out[key] = value
        return out


ToolEventHook = Callable[[ToolCallEvent], object]
"""A hook: a plain function (run in a thread) or an ``async def`` (awaited in the loop)."""


def preview_of(text: str, limit: int = PREVIEW_CHARS) -> str:
    """A short single-line preview of a tool's output for logs and hooks."""
    flat = " ".join(text.split())
    return flat if len(flat) <= limit else flat[: limit - 1] + "…"


@dataclass(slots=True)
class ToolEventStats:
    """Counts since the bus was made: hook calls that returned, raised, timed out; events
    dropped (a full queue, no running event loop, not delivered when the task stopped)."""

    delivered: int = 0
    hook_failures: int = 0
    hook_timeouts: int = 0
    dropped: int = 0


@dataclass(frozen=True, slots=True)
class _Subscription:
    hook: ToolEventHook
    is_async: bool


def _is_async(hook: ToolEventHook) -> bool:
    call = getattr(hook, "__call__", None)  # noqa: B004 - an object with an async __call__
    return inspect.iscoroutinefunction(hook) or inspect.iscoroutinefunction(call)


def _name(hook: ToolEventHook) -> str:
    return str(getattr(hook, "__qualname__", None) or type(hook).__qualname__)


class _Delivery:
    """The queue, the background task and the hook threads of one event loop.

    Sync hooks run on at most ``threads`` daemon threads, started as needed and fed from one
    job queue; ``slots`` lets at most that many hook calls be under way (a call holds its slot
    until its thread is done with it, even after a timeout), so a job never waits for a thread.
    """

    def __init__(self, loop: asyncio.AbstractEventLoop, size: int, threads: int) -> None:
        self.loop = loop
        self.queue: asyncio.Queue[ToolCallEvent] = asyncio.Queue(size)
        self.slots = asyncio.Semaphore(threads)
        self.task: asyncio.Task[None] | None = None
        self._jobs: queue.SimpleQueue[Callable[[], None] | None] = queue.SimpleQueue()
        self._threads = 0
        self._max_threads = threads

    def run_in_thread(self, job: Callable[[], None]) -> None:
        if self._threads < self._max_threads:
            threading.Thread(target=self._work, name="tool-event-hook", daemon=True).start()
            self._threads += 1
        self._jobs.put(job)

    def _work(self) -> None:
        while (job := self._jobs.get()) is not None:
            job()

    def close(self) -> None:
        """Let the threads end (one still in a hook ends when the hook returns)."""
        for _ in range(self._threads):
            self._jobs.put(None)
        self._threads = 0


class ToolEvents:
    """The tool-call event bus (see the module docstring)."""

    def __init__(
        self,
        hooks: Iterable[ToolEventHook] = (),
        *,
        queue_size: int = DEFAULT_QUEUE_SIZE,
        hook_timeout: float = DEFAULT_HOOK_TIMEOUT,
        hook_threads: int = DEFAULT_HOOK_THREADS,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._subscriptions: list[_Subscription] = []
        self._queue_size = queue_size
        self._hook_timeout = hook_timeout
        self._hook_threads = hook_threads
        self._clock = clock
        self._delivery: _Delivery | None = None
        self._unwarned_drops = 0
        self._warned_at: float | None = None
        self.stats = ToolEventStats()
        # Spans around each call (core.tracing), made inline where the call runs.
        self.tracer: CallTracer = NO_TRACING
        for hook in hooks:
            self.subscribe(hook)

    @property
    def hooks(self) -> tuple[ToolEventHook, ...]:
        return tuple(s.hook for s in self._subscriptions)

    def subscribe(self, hook: ToolEventHook) -> Callable[[], None]:
        """Attach ``hook``; returns a function that detaches it."""
        subscription = _Subscription(hook, _is_async(hook))
        self._subscriptions.append(subscription)

        def unsubscribe() -> None:
            if subscription in self._subscriptions:
                self._subscriptions.remove(subscription)

        return unsubscribe

    def emit(self, event: ToolCallEvent) -> None:
        """Log ``event`` and queue it for the hooks; never blocks, never raises."""
        _log(event)
        if not self._subscriptions:
            return
        delivery = self._running_delivery()
        if delivery is None:
            self._drop("no running event loop")
            return
        try:
            delivery.queue.put_nowait(event)
        except asyncio.QueueFull:
            self._drop("the hook queue is full")

    async def drain(self) -> None:
        """Wait until every event emitted so far has been handed to the hooks."""
        delivery = self._delivery
        if delivery is not None and delivery.loop is asyncio.get_running_loop():
            await delivery.queue.join()

    async def aclose(self, timeout: float = DEFAULT_CLOSE_TIMEOUT) -> None:  # noqa: ASYNC109
        """Deliver what is queued (waiting at most ``timeout`` seconds), then stop the task;
        what is still queued then is dropped."""
        delivery, self._delivery = self._delivery, None
        if delivery is None or delivery.task is None:
            return
        if delivery.loop is not asyncio.get_running_loop():  # that loop is gone
            self.stats.dropped += delivery.queue.qsize()
            delivery.close()
            return
        try:
            async with asyncio.timeout(timeout):
                await delivery.queue.join()
        except TimeoutError:
            logger.warning("tool event hooks: not drained within %g s", timeout)
        self.stats.dropped += delivery.queue.qsize()
        delivery.task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await delivery.task
        delivery.close()

    # ------------------------------------------------------------------ delivery

    def _running_delivery(self) -> _Delivery | None:
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            return None
        delivery = self._delivery
        if delivery is None or delivery.loop is not loop:
            # First use, or the loop it ran on is gone (a new server, a new test): what was
            # queued there can no longer be delivered.
            if delivery is not None:
                self.stats.dropped += delivery.queue.qsize()
                delivery.close()
            delivery = self._delivery = _Delivery(loop, self._queue_size, self._hook_threads)
        if delivery.task is None or delivery.task.done():
            delivery.task = loop.create_task(self._deliver_all(delivery), name="tool-event-hooks")
        return delivery

    async def _deliver_all(self, delivery: _Delivery) -> None:
        while True:
            event = await delivery.queue.get()
            try:
                subscriptions = list(self._subscriptions)
                await asyncio.gather(*(self._call(s, event, delivery) for s in subscriptions))
            except asyncio.CancelledError:  # stopped (aclose, the loop ending) mid-delivery
                self.stats.dropped += 1
                raise
            finally:
                delivery.queue.task_done()

    async def _call(self, sub: _Subscription, event: ToolCallEvent, delivery: _Delivery) -> None:
        try:
            async with asyncio.timeout(self._hook_timeout):
                if sub.is_async:
                    result = sub.hook(event)
                else:
                    result = await _in_thread(sub.hook, event, delivery)
                if inspect.isawaitable(result):
                    await result
            self.stats.delivered += 1
        except TimeoutError:
            self.stats.hook_timeouts += 1
            logger.warning(
                "tool event hook %s did not finish within %g s (%s)",
                _name(sub.hook),
                self._hook_timeout,
                event.type,
            )
        except Exception:  # a broken hook must not break the bus
            self.stats.hook_failures += 1
            logger.exception("tool event hook %s failed (%s)", _name(sub.hook), event.type)

    def _drop(self, why: str) -> None:
        self.stats.dropped += 1
        self._unwarned_drops += 1
        now = self._clock()
        if self._warned_at is None or now - self._warned_at >= DROP_WARNING_INTERVAL:
            logger.warning(
                "tool event hooks: dropped %d event(s): %s (%d dropped in all)",
                self._unwarned_drops,
                why,
                self.stats.dropped,
            )
            self._warned_at = now
            self._unwarned_drops = 0


async def _in_thread(hook: ToolEventHook, event: ToolCallEvent, delivery: _Delivery) -> object:
    """``hook(event)`` on one of ``delivery``'s daemon threads: a hook that never returns holds
    its thread and its slot, never the process's exit nor the event loop."""
    loop = delivery.loop
    future: asyncio.Future[object] = loop.create_future()
    await delivery.slots.acquire()

    def settle(value: object, error: BaseException | None) -> None:
        delivery.slots.release()
        if future.done():  # timed out meanwhile
            return
        if error is None:
            future.set_result(value)
        else:
            future.set_exception(error if isinstance(error, Exception) else RuntimeError(error))

    def run() -> None:
        value: object = None
        error: BaseException | None = None
        try:
            value = hook(event)
        except BaseException as exc:
            error = exc
        with contextlib.suppress(RuntimeError):  # the event loop closed meanwhile
            loop.call_soon_threadsafe(settle, value, error)

    try:
        delivery.run_in_thread(run)
    except BaseException:
        delivery.slots.release()
        raise
    return await future


def _log(event: ToolCallEvent) -> None:
    if not logger.isEnabledFor(logging.WARNING if event.type == FAILED else logging.INFO):
        return
    extra = {
        "event": event.type,
        "response_id": event.response_id,
        "round": event.round,
        "tool": event.tool,
        "item_id": event.item_id,
        "ok": event.ok,
        "duration_ms": event.duration_ms,
        "error_kind": event.error_kind,
    }
    if event.type == STARTED:
        logger.info("tool call started: %s", event.tool, extra=extra)
    elif event.type == COMPLETED:
        logger.info(
            "tool call completed: %s in %.1f ms: %s",
            event.tool,
            event.duration_ms or 0.0,
            event.preview or "",
            extra=extra,
        )
    else:
        logger.warning(
            "tool call failed: %s (%s) in %.1f ms: %s",
            event.tool,
            event.error_kind or "error",
            event.duration_ms or 0.0,
            event.message or "",
            extra=extra,
        )
