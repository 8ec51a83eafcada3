"""Events -> SSE frames, sent by ``app.api.sse_response``.

Frames are encoded here (``event: <type>\\ndata: <json>\\n\\n``) as bytes, which the response
writes unchanged (those ready together in one write); the stream ends with ``data: [DONE]``.
The events come from ``ResponsesService.open_stream``, which already turns any failure after
the start into an ``error`` event and ``response.failed``; this layer adds framing, the
closing events of a stream cut when the process's drain lapses (``app.api.drain``), and the
end of a stream whose client stopped reading (``stream_send_timeout_seconds``:
:class:`GatewayEventSource`, and :class:`PassthroughStream` for the chat-completions
passthrough).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any, Protocol

import orjson
from starlette.responses import StreamingResponse
from starlette.types import Message, Receive, Scope, Send

from app.api.drain import OPEN_STREAMS, closing_events
from app.api.sse_response import EventStreamResponse, StreamSendTimeout
from app.core.request_id import current_request_id

logger = logging.getLogger(__name__)

DONE_FRAME = b"data: [DONE]\n\n"


def encode_event(event: dict[str, Any]) -> bytes:
    kind: str = event["type"]
    return b"event: " + kind.encode() + b"\ndata: " + orjson.dumps(event) + b"\n\n"


# Told the final Response when a stream ends (the rate limits count its usage).
OnFinal = Callable[[dict[str, Any] | None], Awaitable[None]]


class StreamWatch(Protocol):
    """What the metrics see of a stream besides its end (``app.api.metrics.Exchange``)."""

    def first_token(self) -> None:
        """The first ``*.delta`` event is being sent."""

    def stream_error(self, event: dict[str, Any]) -> None:
        """An ``error`` event is being sent (the stream fails)."""


async def _frames(
    events: AsyncIterator[dict[str, Any]],
    on_final: OnFinal | None = None,
    watch: StreamWatch | None = None,
) -> AsyncIterator[bytes]:
    task = asyncio.current_task()
    if task is not None:
        OPEN_STREAMS.add(task)
    response: dict[str, Any] | None = None
    number = 0
    waiting = True  # for the first delta
    try:
        try:
            async for event in events:
                number = event.get("sequence_number", number - 1) + 1
                if "response" in event:
                    response = event["response"]
                elif watch is not None:
                    kind = event["type"]
                    if waiting and kind.endswith(".delta"):
                        watch.first_token()
                        waiting = False
                    elif kind == "error":
                        watch.stream_error(event)
                yield encode_event(event)
        except asyncio.CancelledError:
            # Cut at the end of a drain (app.api.drain): end the stream as a failure, unless
            # the task is cancelled for another reason too (the client left, a timeout).
            if task is None or not OPEN_STREAMS.cutting or task.uncancel() > 0:
                raise
            closing = closing_events(response, number)
            for event in closing:
                yield encode_event(event)
            if not closing:
                return
        if on_final is not None:
            await on_final(response)
        yield DONE_FRAME
    finally:
        if task is not None:
            OPEN_STREAMS.discard(task)
        aclose = getattr(events, "aclose", None)
        if aclose is not None:
            await aclose()


class GatewayEventSource(EventStreamResponse):
    """The SSE response, ended when one send waits on the client longer than ``send_timeout``
    (``stream_send_timeout_seconds``: a client connected but no longer reading): the body
    iterator is closed (so the upstream request is dropped), one line is logged, and the
    connection is closed (uvicorn closes a response left incomplete, and logs an error line
    saying so: ASGI has no way to abort a response). Its first frame goes out at once
    (``response.created``, ``message_start``)."""

    first_at_once = True

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            await super().__call__(scope, receive, send)
        except StreamSendTimeout:
            log_stalled(scope, self.send_timeout)


class PassthroughStream(StreamingResponse):
    """Starlette's streaming response (the chat-completions passthrough) with the same send
    timeout: the stream ends, its ``background`` (closing the upstream answer) runs."""

    def __init__(self, *args: Any, send_timeout: float | None = None, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.send_timeout = send_timeout or None

    async def stream_response(self, send: Send) -> None:
        if self.send_timeout is None:
            return await super().stream_response(send)
        timeout = self.send_timeout

        async def timed_send(message: Message) -> None:
            try:
                async with asyncio.timeout(timeout):
                    await send(message)
            except TimeoutError:
                raise StreamSendTimeout from None  # not an upstream's timeout

        await super().stream_response(timed_send)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            await super().__call__(scope, receive, send)
        except StreamSendTimeout:
            log_stalled(scope, self.send_timeout)
            if self.background is not None:
                await self.background()


def log_stalled(scope: Scope, send_timeout: float | None) -> None:
    request_id = current_request_id()
    logger.warning(
        "%s %s: the client read nothing of its stream for %s s; the stream was ended%s",
        scope.get("method"),
        scope.get("path"),
        send_timeout,
        f" (request id {request_id})" if request_id else "",
    )


def event_stream(
    frames: AsyncIterator[bytes], send_timeout: float | None = None
) -> GatewayEventSource:
    """An SSE response of encoded ``frames``; ``send_timeout``: None (or 0) waits forever."""
    return GatewayEventSource(frames, ping=15, send_timeout=send_timeout or None)


def event_stream_response(
    events: AsyncIterator[dict[str, Any]],
    on_final: OnFinal | None = None,
    send_timeout: float | None = None,
    watch: StreamWatch | None = None,
) -> GatewayEventSource:
    """``on_final``: told the final Response at the end; ``send_timeout``: see
    :class:`GatewayEventSource`; ``watch``: told of the first delta and of an ``error`` event
    (the metrics; one check per event)."""
    return event_stream(_frames(events, on_final, watch), send_timeout)
