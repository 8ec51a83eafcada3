"""Bytes of an upstream SSE stream -> parsed events. Unknown event types pass through."""

from __future__ import annotations

from collections.abc import AsyncIterable, AsyncIterator

import orjson

from app.errors import UpstreamEventTooLargeError, UpstreamProtocolError
from app.protocol.events import STREAM_DONE
from app.protocol.json_types import JsonObject

# One line or event, when the upstream's options do not say ([limits] max_upstream_event_bytes).
DEFAULT_MAX_EVENT_BYTES = 32 * 1024 * 1024


async def split_lines(
    chunks: AsyncIterable[bytes], max_line: int = DEFAULT_MAX_EVENT_BYTES
) -> AsyncIterator[bytes]:
    """Network chunks -> lines ending in ``\\n`` (the last may lack it), each at most
    ``max_line`` bytes (``UpstreamEventTooLargeError`` as soon as one is longer: an SSE frame
    carrying a whole response is longer than a client library's usual line limit, but a line
    without end must not grow without end). Each byte is looked at once: a long line arriving in
    many chunks is joined once, not copied at each chunk."""
    parts: list[bytes] = []  # the pieces of the line being received
    size = 0
    async for chunk in chunks:
        start = 0
        end = chunk.find(b"\n")
        while end >= 0:
            piece = chunk[start : end + 1]
            if parts:
                parts.append(piece)
                piece, parts = b"".join(parts), []
            if len(piece) > max_line:
                raise UpstreamEventTooLargeError(max_line)
            size = 0
            yield piece
            start = end + 1
            end = chunk.find(b"\n", start)
        if start < len(chunk):
            size += len(chunk) - start
            if size > max_line:
                raise UpstreamEventTooLargeError(max_line)
            parts.append(chunk[start:] if start else chunk)
    if parts:
        yield b"".join(parts)


async def parse_sse_lines(
    lines: AsyncIterable[bytes], max_event: int = DEFAULT_MAX_EVENT_BYTES
) -> AsyncIterator[JsonObject]:
    """Parse SSE lines (each ending in ``\\n``) into JSON events, each of at most ``max_event``
    bytes of data (``UpstreamEventTooLargeError`` past it).

    A frame's ``event:`` name fills ``type`` when the JSON lacks one; ``data: [DONE]`` ends the
    stream and is reported as one ``{"type": STREAM_DONE}`` event; llama.cpp's ``error: {...}``
    field is read as ``data: {"error": {...}}``; comments and ``id:``/``retry:`` fields are
    ignored; multi-line ``data`` is joined.
    """
    event_name: str | None = None
    data: list[bytes] = []
    size = 0
    async for raw in lines:
        line = raw.rstrip(b"\r\n")
        if line:
            if line.startswith(b"data:"):
                chunk = line[5:]
                data.append(chunk[1:] if chunk.startswith(b" ") else chunk)
                size += len(chunk)
                if size > max_event:
                    raise UpstreamEventTooLargeError(max_event)
            elif line.startswith(b"event:"):
                event_name = line[6:].strip().decode()
            elif line.startswith(b"error:"):
                # llama.cpp's server reports a failure mid-stream as an ``error: {...}`` field,
                # which SSE parsers ignore; it becomes the ``{"error": {...}}`` others send.
                data.append(b'{"error":' + line[6:].strip() + b"}")
            continue
        if data:
            payload = data[0] if len(data) == 1 else b"\n".join(data)
            data, size = [], 0
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
