"""Events -> SSE frames, sent with sse-starlette.

Frames are encoded here (``event: <type>\\ndata: <json>\\n\\n``) as bytes, which sse-starlette
writes unchanged; the stream ends with ``data: [DONE]``. The events come from
``ResponsesService.open_stream``, which already turns any failure after the start into an
``error`` event and ``response.failed``; this layer adds nothing but framing.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import orjson
from sse_starlette import EventSourceResponse

DONE_FRAME = b"data: [DONE]\n\n"


def encode_event(event: dict[str, Any]) -> bytes:
    kind: str = event["type"]
    return b"event: " + kind.encode() + b"\ndata: " + orjson.dumps(event) + b"\n\n"


async def _frames(events: AsyncIterator[dict[str, Any]]) -> AsyncIterator[bytes]:
    try:
        async for event in events:
            yield encode_event(event)
        yield DONE_FRAME
    finally:
        aclose = getattr(events, "aclose", None)
        if aclose is not None:
            await aclose()


def event_stream_response(events: AsyncIterator[dict[str, Any]]) -> EventSourceResponse:
    return EventSourceResponse(_frames(events), ping=15, sep="\n")
