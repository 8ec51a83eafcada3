"""Upstream SSE bytes -> events."""

from __future__ import annotations

from collections.abc import AsyncIterator

import orjson

from app.upstream.sse import parse_sse_lines, split_lines


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
    events = [e async for e in parse_sse_lines(split_lines(chunks(*pieces)))]
    assert events[0]["response"]["output_text"] == long_text
    assert events[1] == {"type": "[DONE]"}


async def test_event_name_fills_a_missing_type_and_comments_are_ignored() -> None:
    raw = b': ping\r\nevent: vendor.thing\r\ndata: {"a": 1}\r\n\r\ndata: {"type": "x"}\n\n'
    events = [e async for e in parse_sse_lines(split_lines(chunks(raw)))]
    assert events == [{"a": 1, "type": "vendor.thing"}, {"type": "x"}]


async def test_last_line_without_newline_is_kept() -> None:
    lines = [line async for line in split_lines(chunks(b"a\nb", b"c"))]
    assert lines == [b"a\n", b"bc"]
