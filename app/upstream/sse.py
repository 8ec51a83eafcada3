"""Bytes of an upstream SSE stream -> parsed events. Unknown event types pass through."""

from __future__ import annotations

from collections.abc import AsyncIterable, AsyncIterator

import orjson

from app.errors import UpstreamProtocolError
from app.protocol.events import STREAM_DONE
from app.protocol.json_types import JsonObject


async def split_lines(chunks: AsyncIterable[bytes]) -> AsyncIterator[bytes]:
    """Network chunks -> lines ending in ``\\n`` (the last may lack it), with no length cap:
    an SSE frame carrying a whole response can be longer than a client library's line limit."""
    buffer = b""
    async for chunk in chunks:
        buffer += chunk
        start = 0
        while True:
            end = buffer.find(b"\n", start)
            if end < 0:
                break
            yield buffer[start : end + 1]
            start = end + 1
        buffer = buffer[start:]
    if buffer:
        yield buffer


async def parse_sse_lines(lines: AsyncIterable[bytes]) -> AsyncIterator[JsonObject]:
    """Parse SSE lines (each ending in ``\\n``) into JSON events.

    A frame's ``event:`` name fills ``type`` when the JSON lacks one; ``data: [DONE]`` ends the
    stream and is reported as one ``{"type": STREAM_DONE}`` event; llama.cpp's ``error: {...}``
    field is read as ``data: {"error": {...}}``; comments and ``id:``/``retry:`` fields are
    ignored; multi-line ``data`` is joined.
    """
    event_name: str | None = None
    data: list[bytes] = []
    async for raw in lines:
        line = raw.rstrip(b"\r\n")
        if line:
            if line.startswith(b"data:"):
                chunk = line[5:]
                data.append(chunk[1:] if chunk.startswith(b" ") else chunk)
            elif line.startswith(b"event:"):
                event_name = line[6:].strip().decode()
            elif line.startswith(b"error:"):
                # llama.cpp's server reports a failure mid-stream as an ``error: {...}`` field,
                # which SSE parsers ignore; it becomes the ``{"error": {...}}`` others send.
                data.append(b'{"error":' + line[6:].strip() + b"}")
            continue
        if data:
            payload = data[0] if len(data) == 1 else b"\n".join(data)
            data = []
            if payload.strip() == b"[DONE]":
                yield {"type": STREAM_DONE}
                return
            yield _decode(payload, event_name)
        event_name = None
    if data:
        payload = b"\n".join(data)
        done = payload.strip() == b"[DONE]"
        yield {"type": STREAM_DONE} if done else _decode(payload, event_name)


def _decode(payload: bytes, event_name: str | None) -> JsonObject:
    try:
        event = orjson.loads(payload)
    except orjson.JSONDecodeError as exc:
        raise UpstreamProtocolError(f"upstream sent an SSE frame that is not JSON: {exc}") from exc
    if not isinstance(event, dict):
        raise UpstreamProtocolError("upstream sent an SSE frame that is not a JSON object")
    if "type" not in event and event_name:
        event["type"] = event_name
    return event
