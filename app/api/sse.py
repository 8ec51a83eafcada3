"""Events -> SSE frames, sent with sse-starlette.

Frames are encoded here (``event: <type>\\ndata: <json>\\n\\n``) as bytes, which sse-starlette
writes unchanged; the stream ends with ``data: [DONE]``. The events come from
``ResponsesService.open_stream``, which already turns any failure after the start into an
``error`` event and ``response.failed``; this layer adds framing, and the closing events of a
stream cut when the process's drain lapses (``app.api.drain``).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any, Protocol

import orjson
from sse_starlette import EventSourceResponse

from app.api.drain import OPEN_STREAMS, closing_events

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


def event_stream_response(
    events: AsyncIterator[dict[str, Any]],
    on_final: OnFinal | None = None,
    watch: StreamWatch | None = None,
) -> EventSourceResponse:
    """``on_final``: told the final Response at the end; ``watch``: told of the first delta
    and of an ``error`` event (the metrics; one check per event)."""
    return EventSourceResponse(_frames(events, on_final, watch), ping=15, sep="\n")
