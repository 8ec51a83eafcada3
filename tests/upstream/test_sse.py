"""Upstream SSE bytes -> events."""

from __future__ import annotations

from collections.abc import AsyncIterator

import orjson
import pytest

from app.errors import UpstreamProtocolError
from app.protocol.events import STREAM_DONE
from app.upstream.sse import SSEDecoder, parse_sse_lines


async def chunks(*parts: bytes) -> AsyncIterator[bytes]:
    for part in parts:
        yield part


async def test_lines_split_across_chunks_and_longer_than_a_readline_limit() -> None:
    long_text = "x" * 300_000
    frame = b"event: response.completed\ndata: " + orjson.dumps(
        {"type": "response.completed", "response": {"output_text": long_text}}
    )
    raw = frame + b"\n\ndata: [DONE]\n\n"
    pieces = [raw[i : i + 4096] for i in range(0, len(raw), 4096)]
    events = [e async for e in parse_sse_lines(chunks(*pieces))]
    assert events[0]["response"]["output_text"] == long_text
    assert events[1] == {"type": "[DONE]"}


async def test_event_name_fills_a_missing_type_and_comments_are_ignored() -> None:
    raw = b': ping\r\nevent: vendor.thing\r\ndata: {"a": 1}\r\n\r\ndata: {"type": "x"}\n\n'
    events = [e async for e in parse_sse_lines(chunks(raw))]
    assert events == [{"a": 1, "type": "vendor.thing"}, {"type": "x"}]


async def test_a_last_frame_without_its_blank_line_or_newline_is_kept() -> None:
    events = [
        e async for e in parse_sse_lines(chunks(b'data: {"type": "a"}\n\ndata: {"ty', b'pe": "b"}'))
    ]
    assert events == [{"type": "a"}, {"type": "b"}]


async def test_events_before_a_bad_frame_of_the_same_chunk_come_first() -> None:
    good = b'data: {"type": "a"}\n\ndata: {"type": "b"}\n\n'
    got: list[object] = []
    with pytest.raises(UpstreamProtocolError):
        async for event in parse_sse_lines(chunks(good + b"data: {not json\n\n" + good)):
            got.append(event)
    assert got == [{"type": "a"}, {"type": "b"}]


def test_the_decoder_raises_a_bad_frame_on_the_call_after_its_events() -> None:
    decoder = SSEDecoder()
    events = decoder.feed(b'data: {"type": "a"}\n\ndata: [1]\n\n')
    assert events == [{"type": "a"}]
    with pytest.raises(UpstreamProtocolError):
        decoder.feed(b'data: {"type": "b"}\n\n')
    with pytest.raises(UpstreamProtocolError):
        decoder.end()


@pytest.mark.parametrize("size", [1, 2, 5, 17, 1000])
def test_the_decoder_gives_the_same_events_whatever_the_chunks(size: int) -> None:
    raw = (
        b': comment\r\nevent: response.created\r\ndata: {"type": "response.created"}\r\n\r\n'
        b'event: x.y\ndata: {"a": 1}\n\n'
        b'data: {"b":\ndata:  2}\n\n'
        b'error: {"message": "boom"}\n\n'
        b"id: 7\nretry: 10\n"
        b'data: {"type": "last"}'
    )
    decoder = SSEDecoder()
    events = [event for i in range(0, len(raw), size) for event in decoder.feed(raw[i : i + size])]
    events += decoder.end()
    assert events == [
        {"type": "response.created"},
        {"a": 1, "type": "x.y"},
        {"b": 2},
        {"error": {"message": "boom"}},
        {"type": "last"},
    ]


def test_done_stops_the_decoder() -> None:
    decoder = SSEDecoder()
    assert decoder.feed(b'data: {"type": "a"}\n\ndata: [DONE]\n\ndata: {"type": "b"}\n\n') == [
        {"type": "a"},
        {"type": STREAM_DONE},
    ]
    assert decoder.done and decoder.feed(b'data: {"type": "c"}\n\n') == [] and decoder.end() == []
