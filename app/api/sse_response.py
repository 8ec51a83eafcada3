"""The ASGI response that sends an SSE stream: frames that are ready together go out in one
write, one task per stream, no per-event timer.

It replaces sse-starlette's ``EventSourceResponse`` on the gateway's streams (bench/README.md,
"Issue 19": that library spends a task group of four tasks per stream, and an anyio cancel
scope, a lock and an ASGI message per event). What it keeps of it, each covered by a test:

* keep-alive comments (``: ping``) after ``ping`` seconds without a byte sent;
* the client gone (``http.disconnect``) cancels the stream where it waits, so its upstream
  request is dropped, and the response ends quietly;
* one send waiting on the client longer than ``send_timeout`` (a client connected but no
  longer reading) ends the stream with :class:`StreamSendTimeout`;
* ``HEAD`` is answered with the headers and an empty body (the stream never starts);
* the iterator is closed (its ``finally`` runs) whatever ends the stream.

**Coalescing.** The frames iterator is stepped by hand (:func:`_step`): a frame it produces
without waiting joins the ones pending, and what is pending is sent, in one ASGI message, just
before the iterator would wait (for the upstream, a tool) or once ``FLUSH_BYTES`` are pending;
at the end, in the last message, and before an exception of the iterator propagates. With
``first_at_once`` (a class attribute) the first frame is sent at once, alone (the gateway's
streams: the client's first event is not held back when the upstream's whole answer was read
already and nothing waits).
A paced stream (a token at a time) thus sends each event as soon as it is made; a burst (an
upstream chunk carrying many events, the opening events, a tool round's) is one write, not one
per event. Waiting is passed through untouched: the task waits on the iterator's own
future, and a cancellation (the client gone, the drain's cut in ``app.api.drain``, the send
timeout) is thrown into the iterator where it waits, exactly as if it were awaited directly; one
that comes while the frames pending before that wait are sent too (:meth:`_Passed.cancelled`),
so the iterator is never left in the middle of a step, unable to be closed. One that comes
while a write is made with the iterator where it yielded (the first frame, ``FLUSH_BYTES``) is
thrown in there (``athrow``), for the same reason.

**Sends.** The start and the last message go through the ASGI ``send`` the response is given
(every middleware sees them); the chunks in between, through the server's own ``send`` when
``app.api.server_send`` left it in the scope, under the middlewares' wrappers.

**Timers.** One ``call_later`` handle per stream, re-armed every ``tick`` seconds, both
sends the pings (from a short task, only when the stream is idle and not in a send) and ends a
send that has waited ``send_timeout`` (it cancels the stream's task): no timer per event.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncGenerator, AsyncIterator, Generator, Mapping
from typing import Any, cast

from starlette.background import BackgroundTask
from starlette.responses import Response
from starlette.types import Message, Receive, Scope, Send

from app.api.server_send import server_send

logger = logging.getLogger(__name__)

PING_FRAME = b": ping\n\n"
# Pending bytes that are sent without waiting for the iterator to pause (a long burst).
FLUSH_BYTES = 64 * 1024


class StreamSendTimeout(Exception):
    """One send waited on the client longer than the stream's ``send_timeout``."""


class _Stop(Exception):
    """The iterator is exhausted (what StopAsyncIteration says, turned into a value)."""


class _Passed:
    """Awaitable that finishes a suspended ``__anext__`` step: what the step yields to the event
    loop is yielded on, and what the loop sends or throws back is passed to the step: the task
    waits on the step's own future, as ``await step`` would (``yield from``). ``throw``: an
    exception thrown into the step first, where it waits (see :meth:`cancelled`)."""

    __slots__ = ("_first", "_step", "_throw")

    def __init__(
        self, step: Generator[Any, Any, bytes], first: Any, throw: BaseException | None = None
    ) -> None:
        self._step = step
        self._first = first
        self._throw = throw

    def cancelled(self, exc: asyncio.CancelledError) -> _Passed:
        """The rest of the step after a cancellation that came while the step was not awaited
        (what was pending was being sent): delivered as ``Task.cancel`` delivers it, by
        cancelling the future the step waits on, or else thrown in where the step waits."""
        first = self._first
        if asyncio.isfuture(first) and first.cancel():
            return self
        return _Passed(self._step, None, exc)

    def __await__(self) -> Generator[Any, Any, bytes]:
        step = self._step
        if self._throw is None:
            value = self._first
        else:
            try:
                value = step.throw(self._throw)
            except StopIteration as done:
                return done.value  # type: ignore[no-any-return]
        while True:
            try:
                sent = yield value
            except BaseException as exc:
                try:
                    value = step.throw(exc)
                except StopIteration as done:
                    return done.value  # type: ignore[no-any-return]
            else:
                try:
                    value = step.send(sent)
                except StopIteration as done:
                    return done.value  # type: ignore[no-any-return]


def _step(
    frames: AsyncIterator[bytes], throw: BaseException | None = None
) -> tuple[bytes | None, _Passed | None]:
    """Start the next ``__anext__`` of ``frames`` (with ``throw``: ``athrow(throw)``, the
    exception raised where the iterator yielded): ``(frame, None)`` when it produced a frame
    without waiting, ``(None, rest)`` when it waits (``await rest`` gives the frame, or raises
    ``StopAsyncIteration`` when the iterator ends after waiting). Raises ``_Stop`` at the end of
    the iterator, and whatever the iterator raises."""
    if throw is None:
        step = frames.__anext__().__await__()
    else:
        step = cast(AsyncGenerator[bytes, None], frames).athrow(throw).__await__()
    try:
        first = step.send(None)
    except StopIteration as done:
        frame: bytes = done.value
        return frame, None
    except StopAsyncIteration:
        raise _Stop from None
    return None, _Passed(step, first)


async def _close_step(rest: _Passed) -> None:
    """End a step left waiting when sending what was pending before it failed: it is cancelled
    where it waits and run to its end (so that the iterator can be closed); what it makes or
    raises is dropped (the send's failure is what ends the stream)."""
    try:
        await rest.cancelled(asyncio.CancelledError())
    except BaseException:  # the send's failure is raised instead
        logger.debug("an SSE stream's events failed as they were cancelled", exc_info=True)


class EventStreamResponse(Response):
    """``text/event-stream`` of the encoded ``frames`` (each a whole SSE frame, as bytes)."""

    media_type = "text/event-stream"
    # The first frame sent alone, at once (see the module docstring); the gateway's streams
    # (``app.api.sse.GatewayEventSource``) set it.
    first_at_once = False

    def __init__(
        self,
        frames: AsyncIterator[bytes],
        *,
        status_code: int = 200,
        headers: Mapping[str, str] | None = None,
        ping: float = 15.0,
        send_timeout: float | None = None,
        background: BackgroundTask | None = None,
    ) -> None:
        self.body_iterator = frames
        self.status_code = status_code
        self.background = background
        merged = {"cache-control": "no-store", "x-accel-buffering": "no"}
        if headers:
            merged.update(headers)
        self.init_headers(merged)
        self.ping = ping
        self.send_timeout = send_timeout or None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        start: Message = {
            "type": "http.response.start",
            "status": self.status_code,
            "headers": self.raw_headers,
        }
        if scope.get("method") == "HEAD":
            await send(start)
            await send({"type": "http.response.body", "body": b"", "more_body": False})
        else:
            await _Sending(self, send, server_send(scope, send)).run(start, receive)
        if self.background is not None:
            await self.background()


class _Sending:
    """One stream being sent (see the module docstring)."""

    __slots__ = (
        "_cancels",
        "_chunk_send",
        "_closing",
        "_finished",
        "_first_at_once",
        "_idle_ticks",
        "_loop",
        "_ping_task",
        "_send",
        "_send_began",
        "_stalled",
        "_task",
        "_timer",
        "_writes",
        "_writes_seen",
        "frames",
        "ping",
        "send_timeout",
        "tick",
    )

    def __init__(self, response: EventStreamResponse, send: Send, chunk_send: Send) -> None:
        self.frames = response.body_iterator
        self.ping = response.ping
        self.send_timeout = response.send_timeout
        self._first_at_once = response.first_at_once
        periods = [p for p in (self.ping, self.send_timeout) if p]
        # Often enough that a stalled send ends within a quarter of its timeout past it.
        self.tick = min(periods) / 4 if periods else 0.0
        self._send = send  # the start and the last message: through every middleware
        self._chunk_send = chunk_send  # the chunks between (``app.api.server_send``)
        self._loop = asyncio.get_running_loop()
        self._task: asyncio.Task[Any] | None = None
        self._timer: asyncio.TimerHandle | None = None
        self._writes = 0  # ASGI body messages sent (frames and pings)
        self._writes_seen = 0
        self._idle_ticks = 0
        self._send_began: float | None = None  # loop time of the send under way
        self._ping_task: asyncio.Task[None] | None = None
        self._closing = False  # the last message is being sent
        self._stalled = False
        self._finished = False  # the last message is sent
        self._cancels = 0  # the stream's task cancelled by the response itself (gone, stalled)

    async def run(self, start: Message, receive: Receive) -> None:
        self._task = asyncio.current_task()
        await self._send(start)
        watcher = self._loop.create_task(self._watch(receive))
        if self.tick:
            self._timer = self._loop.call_later(self.tick, self._on_tick)
        try:
            await self._pump()
        except asyncio.CancelledError:
            task = self._task
            if not self._cancels or task is None:
                raise
            # The client gone and the send timeout can both have cancelled (in one pass).
            for _ in range(self._cancels - 1):
                task.uncancel()
            if task.uncancel() > 0:
                raise  # cancelled for another reason too
            if self._stalled:
                raise StreamSendTimeout from None
        finally:
            if self._timer is not None:
                self._timer.cancel()
            if self._ping_task is not None:
                self._ping_task.cancel()
            watcher.cancel()
            await self._close_frames()

    async def _pump(self) -> None:
        frames = self.frames
        pending: list[bytes] = []
        size = 0
        throw: asyncio.CancelledError | None = None
        first = self._first_at_once  # the first frame to be sent alone, at once
        while True:
            try:
                frame, rest = _step(frames, throw)
                throw = None
            except _Stop:
                break
            except Exception:
                if pending:  # what the iterator made before it failed goes out first
                    await self._write(b"".join(pending))
                raise
            if rest is not None:
                if pending:
                    body = b"".join(pending) if len(pending) > 1 else pending[0]
                    pending, size = [], 0
                    try:
                        await self._write(body)
                    except asyncio.CancelledError as exc:
                        # The iterator waits: the cancellation is its own, as if it came while
                        # the iterator was awaited (it may end the stream with frames of its own).
                        rest = rest.cancelled(exc)
                    except BaseException:
                        await _close_step(rest)
                        raise
                try:
                    frame = await rest
                except StopAsyncIteration:  # the iterator ended after it waited
                    break
            assert frame is not None
            pending.append(frame)
            size += len(frame)
            if size < FLUSH_BYTES and not first:
                continue
            first = False
            # The first frame, or FLUSH_BYTES pending: sent with the iterator where it yielded.
            body = b"".join(pending)
            pending, size = [], 0
            try:
                await self._write(body)
            except asyncio.CancelledError as exc:
                if not hasattr(frames, "athrow"):
                    raise
                # As when it waits: the cancellation is the iterator's own, raised where it
                # yielded (it may end the stream with frames of its own).
                throw = exc
        last = b"".join(pending)
        self._closing = True  # no ping after (or racing) the last message
        self._send_began = self._loop.time()
        try:
            await self._send({"type": "http.response.body", "body": last, "more_body": False})
        finally:
            self._send_began = None
        self._finished = True

    async def _write(self, body: bytes) -> None:
        self._send_began = self._loop.time()
        try:
            await self._chunk_send({"type": "http.response.body", "body": body, "more_body": True})
        finally:  # an interrupted send is not one under way (the send timeout's timer)
            self._send_began = None
        self._writes += 1

    async def _close_frames(self) -> None:
        aclose = getattr(self.frames, "aclose", None)
        if aclose is None:
            return
        try:
            await aclose()
        except Exception:
            logger.exception("closing an SSE stream's events failed")

    async def _watch(self, receive: Receive) -> None:
        """Cancel the stream when the client goes (``http.disconnect``)."""
        try:
            while True:
                message = await receive()
                if message["type"] == "http.disconnect":
                    break
        except Exception:  # a server's receive that fails: the stream's own send will tell
            logger.debug("watching an SSE stream's client failed", exc_info=True)
            return
        if self._task is not None and not self._finished and not self._task.done():
            self._cancels += 1
            self._task.cancel()

    def _on_tick(self) -> None:
        loop = self._loop
        began = self._send_began
        if began is not None:
            timeout = self.send_timeout
            if timeout is not None and loop.time() - began >= timeout and not self._stalled:
                self._stalled = True
                if self._task is not None:
                    self._cancels += 1
                    self._task.cancel()
                return
        elif self.ping:
            if self._writes == self._writes_seen:
                self._idle_ticks += 1
                pinging = self._ping_task is not None and not self._ping_task.done()
                if self._idle_ticks * self.tick >= self.ping and not pinging:
                    self._idle_ticks = 0
                    self._ping_task = loop.create_task(self._send_ping())
            else:
                self._idle_ticks = 0
        self._writes_seen = self._writes
        self._timer = loop.call_later(self.tick, self._on_tick)

    async def _send_ping(self) -> None:
        if self._closing:
            return
        try:
            await self._chunk_send(
                {"type": "http.response.body", "body": PING_FRAME, "more_body": True}
            )
            self._writes += 1
        except Exception:  # the stream's own send reports a broken connection
            logger.debug("an SSE ping could not be sent", exc_info=True)
