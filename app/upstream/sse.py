"""Bytes of an upstream SSE stream -> parsed events. Unknown event types pass through."""

from __future__ import annotations

from collections.abc import AsyncIterable, AsyncIterator, Callable

import orjson

from app.errors import UpstreamError, UpstreamEventTooLargeError, UpstreamProtocolError
from app.protocol.events import STREAM_DONE
from app.protocol.json_types import JsonObject

# One line or event, when the upstream's options do not say ([limits] max_upstream_event_bytes).
DEFAULT_MAX_EVENT_BYTES = 32 * 1024 * 1024


class SSEDecoder:
    """Bytes of an upstream SSE stream in, parsed events out: pure and incremental, one call per
    network chunk (the hot path: no generator per line or per event, bench/README.md "Issue 19").

    ``feed(chunk)`` returns the events the chunk completes; ``end()`` those the last bytes leave
    (a last line without its newline, a frame without its blank line). A line longer than
    ``max_bytes``, or an event whose data is, raises ``UpstreamEventTooLargeError`` as soon as it
    is known to be (a line without end must not grow without end). A frame's ``event:`` name fills
    ``type`` when the JSON lacks one; ``data: [DONE]`` is reported as one ``{"type": STREAM_DONE}``
    event and sets ``done`` (nothing after it is read); llama.cpp's ``error: {...}`` field is read
    as ``data: {"error": {...}}``; comments and ``id:``/``retry:`` fields are ignored; multi-line
    ``data`` is joined with newlines.
    """

    __slots__ = (
        "_data",
        "_data_size",
        "_error",
        "_max",
        "_name",
        "_partial",
        "_partial_size",
        "done",
    )

    def __init__(self, max_bytes: int = DEFAULT_MAX_EVENT_BYTES) -> None:
        self._max = max_bytes
        self._partial: list[bytes] = []  # the pieces of a line not yet ended
        self._partial_size = 0
        self._name: bytes | None = None  # the frame's ``event:`` (decoded only when needed)
        self._data: list[bytes] = []  # the frame's ``data:`` lines
        self._data_size = 0
        self._error: UpstreamError | None = None  # raised by the next call (``feed``)
        self.done = False

    def feed(self, chunk: bytes) -> list[JsonObject]:
        """The events ``chunk`` completes. When a frame in it is bad (not JSON, too large), the
        events before it come back first and the error is raised by the next call, as a
        line-at-a-time parser would have it."""
        return self._safely(self._feed, chunk)

    def end(self) -> list[JsonObject]:
        """The events the stream's last bytes complete."""
        return self._safely(self._end, b"")

    def _safely(
        self, step: Callable[[bytes, list[JsonObject]], None], chunk: bytes
    ) -> list[JsonObject]:
        if self._error is not None:
            raise self._error
        out: list[JsonObject] = []
        if self.done:
            return out
        try:
            step(chunk, out)
        except UpstreamError as exc:
            if not out:
                raise
            self._error = exc  # raised by the next call, once the events before it are out
            self.done = True
        return out

    def _feed(self, chunk: bytes, out: list[JsonObject]) -> None:
        if not chunk:
            return
        if self._partial:
            end = chunk.find(b"\n")
            if end < 0:
                self._grow_partial(chunk)
                return
            self._partial.append(chunk[:end])
            line = b"".join(self._partial)
            self._partial, self._partial_size = [], 0
            if len(line) >= self._max:
                raise UpstreamEventTooLargeError(self._max)
            self._lines([line], out)
            if self.done:
                return
            chunk = chunk[end + 1 :]
        lines = chunk.split(b"\n")
        tail = lines.pop()  # what follows the last newline: the start of a line
        self._lines(lines, out)
        if tail and not self.done:
            self._grow_partial(tail)

    def _end(self, _: bytes, out: list[JsonObject]) -> None:
        if self._partial:
            line = b"".join(self._partial)
            self._partial, self._partial_size = [], 0
            self._lines([line], out)
        if self._data and not self.done:
            self._dispatch(out)

    def _grow_partial(self, piece: bytes) -> None:
        self._partial_size += len(piece)
        if self._partial_size >= self._max:
            raise UpstreamEventTooLargeError(self._max)
        self._partial.append(piece)

    def _lines(self, lines: list[bytes], out: list[JsonObject]) -> None:
        limit = self._max
        data = self._data
        for line in lines:
            if len(line) >= limit:  # with its newline, longer than the limit
                raise UpstreamEventTooLargeError(limit)
            if line.endswith(b"\r"):
                line = line.rstrip(b"\r")
            if not line:
                if data:
                    self._dispatch(out)
                    if self.done:
                        return
                    data = self._data
                self._name = None
            elif line.startswith(b"data:"):
                value = line[6:] if line.startswith(b"data: ") else line[5:]
                data.append(value)
                self._data_size += len(value)
                if self._data_size > limit:
                    raise UpstreamEventTooLargeError(limit)
            elif line.startswith(b"event:"):
                self._name = line[6:]
            elif line.startswith(b"error:"):
                # llama.cpp's server reports a failure mid-stream as an ``error: {...}`` field,
                # which SSE parsers ignore; it becomes the ``{"error": {...}}`` others send.
                data.append(b'{"error":' + line[6:].strip() + b"}")

    def _dispatch(self, out: list[JsonObject]) -> None:
        data = self._data
        payload = data[0] if len(data) == 1 else b"\n".join(data)
        self._data, self._data_size = [], 0
        if not payload.startswith(b"{") and payload.strip() == b"[DONE]":
            out.append({"type": STREAM_DONE})
            self.done = True
            return
        event = _decode(payload)
        if "type" not in event and self._name is not None:
            name = self._name.strip().decode(errors="replace")
            if name:
                event["type"] = name
        out.append(event)


async def parse_sse_lines(
    lines: AsyncIterable[bytes], max_event: int = DEFAULT_MAX_EVENT_BYTES
) -> AsyncIterator[JsonObject]:
    """SSE lines (or any chunks of an SSE stream) -> events: :class:`SSEDecoder` over an
    iterable (the hot path feeds the decoder itself, ``app.upstream.events``)."""
    decoder = SSEDecoder(max_event)
    async for chunk in lines:
        for event in decoder.feed(chunk):
            yield event
        if decoder.done:
            decoder.end()  # raises what a bad frame after the events above left
            return
    for event in decoder.end():
        yield event


def _decode(payload: bytes) -> JsonObject:
    try:
        event = orjson.loads(payload)
    except orjson.JSONDecodeError as exc:
        raise UpstreamProtocolError(f"upstream sent an SSE frame that is not JSON: {exc}") from exc
    if not isinstance(event, dict):
        raise UpstreamProtocolError("upstream sent an SSE frame that is not a JSON object")
    return event
