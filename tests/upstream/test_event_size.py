"""``[limits] max_upstream_event_bytes``: an upstream that sends one enormous SSE line (the review
sent 100 MB, which stalled the event loop) or an enormous JSON answer, from a real local server.

The gateway stops reading as soon as the line passes the limit (the upstream gets to send only a
small part of it before the connection is dropped) and fails the response cleanly: ``error`` then
``response.failed`` once the stream has started, a 502 ``upstream_event_too_large`` before it;
over both upstream kinds, and on the ``/v1/chat/completions`` passthrough.
"""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import AsyncIterator, Iterator
from typing import Any

import openai
import orjson
import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response, StreamingResponse
from starlette.routing import Route

from app.errors import UpstreamEventTooLargeError
from app.main import create_app
from app.settings import Settings
from app.upstream.sse import parse_sse_lines
from tests.api.upstreams import closing_events, opening_events, sse_frame
from tests.helpers import in_process, openai_client, serve_in_thread
from tests.lifecycle import assert_lifecycle

LIMIT = 1024 * 1024  # the gateway's limit in these tests
HUGE = 100 * 1024 * 1024  # what the upstream would send
CHUNK = 64 * 1024


class Sent:
    """Bytes the upstream sent of its huge line (from the server's thread)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.bytes = 0

    def add(self, count: int) -> None:
        with self.lock:
            self.bytes += count


async def huge(prefix: bytes, suffix: bytes, sent: Sent) -> AsyncIterator[bytes]:
    """``prefix``, 100 MB of ``x`` in 64 KB chunks, ``suffix``: one line without an end."""
    yield prefix
    block = b"x" * CHUNK
    for _ in range(HUGE // CHUNK):
        sent.add(CHUNK)
        yield block
        await asyncio.sleep(0)
    yield suffix


def upstream_app(sent: Sent) -> Starlette:
    async def responses(request: Request) -> Response:
        body = await request.json()
        if not body.get("stream"):
            text = huge(b'{"status": "completed", "output": [], "x": "', b'"}', sent)
            return StreamingResponse(text, media_type="application/json")

        async def events() -> AsyncIterator[bytes]:
            for event in opening_events("Hel"):
                yield sse_frame(event)
            delta = closing_events("Hello")[0]
            head = f"event: response.output_text.delta\ndata: {json.dumps(delta)[:-1]}, "
            async for chunk in huge(head.encode() + b'"pad": "', b'"}\n\n', sent):
                yield chunk

        return StreamingResponse(events(), media_type="text/event-stream")

    async def chat(request: Request) -> Response:
        body = await request.json()
        if not body.get("stream"):
            text = huge(b'{"object": "chat.completion", "choices": [], "x": "', b'"}', sent)
            return StreamingResponse(text, media_type="application/json")
        first = {
            "object": "chat.completion.chunk",
            "choices": [{"index": 0, "delta": {"role": "assistant", "content": "Hel"}}],
        }
        opening = f"data: {json.dumps(first)}\n\n".encode()
        line = huge(opening + b'data: {"object": "chat.completion.chunk", "x": "', b'"}\n\n', sent)
        return StreamingResponse(line, media_type="text/event-stream")

    return Starlette(
        routes=[
            Route("/v1/responses", responses, methods=["POST"]),
            Route("/v1/chat/completions", chat, methods=["POST"]),
        ]
    )


@pytest.fixture
def upstream() -> Iterator[tuple[str, Sent]]:
    sent = Sent()
    with serve_in_thread(upstream_app(sent)) as url:
        yield url, sent


def gateway(url: str, kind: str = "responses") -> Any:
    settings = Settings(
        upstream_url=url, upstream_kind=kind, limits={"max_upstream_event_bytes": LIMIT}
    )
    return in_process(create_app(settings))


def dump(model: Any) -> dict[str, Any]:
    data: dict[str, Any] = model.model_dump(mode="json", warnings=False)
    return data


@pytest.mark.parametrize("kind", ["responses", "chat"])
def test_an_oversized_event_mid_stream_fails_the_response(
    upstream: tuple[str, Sent], kind: str
) -> None:
    url, sent = upstream
    with gateway(url, kind) as http:
        client = openai_client(http)
        with client.responses.stream(model="m", input="hi") as stream:
            events = [dump(event) for event in stream]
    assert_lifecycle(events)
    assert [e["type"] for e in events[-2:]] == ["error", "response.failed"]
    assert events[-2]["code"] == "upstream_event_too_large"
    assert f"larger than {LIMIT} bytes" in events[-2]["message"]
    assert events[-1]["response"]["status"] == "failed"
    # The gateway stopped reading at the limit and dropped the connection: the upstream got to
    # send a small part of its 100 MB (what the sockets' buffers took meanwhile).
    assert sent.bytes < HUGE // 4


@pytest.mark.parametrize("kind", ["responses", "chat"])
def test_an_oversized_json_answer_is_a_502(upstream: tuple[str, Sent], kind: str) -> None:
    url, sent = upstream
    with gateway(url, kind) as http:
        client = openai_client(http)
        with pytest.raises(openai.APIStatusError) as caught:
            client.responses.create(model="m", input="hi")
    assert caught.value.status_code == 502
    body = caught.value.body
    assert isinstance(body, dict) and body["code"] == "upstream_event_too_large"
    assert body["type"] == "upstream_error"
    assert sent.bytes < HUGE // 4


def test_an_oversized_chat_completion_on_the_passthrough_is_a_502(
    upstream: tuple[str, Sent],
) -> None:
    url, sent = upstream
    with gateway(url, "chat") as http:
        reply = http.post("/v1/chat/completions", json={"model": "m", "messages": []})
    assert reply.status_code == 502
    assert reply.json()["error"]["code"] == "upstream_event_too_large"
    assert sent.bytes < HUGE // 4


def test_a_deeply_nested_chat_completions_body_is_a_400(upstream: tuple[str, Sent]) -> None:
    url, _ = upstream
    body = b'{"model": "m", "messages": [], "deep": ' + b"[" * 300 + b"]" * 300 + b"}"
    with gateway(url, "chat") as http:
        reply = http.post("/v1/chat/completions", content=body)
    assert reply.status_code == 400
    assert reply.json()["error"]["code"] == "json_too_deeply_nested"


# ----------------------------------------------------------------------------- the splitter


async def chunks_of(data: bytes, size: int) -> AsyncIterator[bytes]:
    for start in range(0, len(data), size):
        yield data[start : start + size]


async def collect(lines: AsyncIterator[Any]) -> list[Any]:
    return [line async for line in lines]


@pytest.mark.parametrize("size", [1, 3, 7, 64, 10_000])
async def test_events_are_the_same_whatever_the_chunks_up_to_the_limit(size: int) -> None:
    long = b'{"y": "' + b"y" * 81 + b'"}'  # a 96-byte line with its "data: ", under 97
    data = b"event: a\ndata: {}\n\ndata: " + long + b'\n\ndata: {"last": 1}'
    events = await collect(parse_sse_lines(chunks_of(data, size), max_event=97))
    assert events == [{"type": "a"}, orjson.loads(long), {"last": 1}]


async def test_a_line_longer_than_the_limit_is_refused_before_its_end() -> None:
    read = 0

    async def endless() -> AsyncIterator[bytes]:
        nonlocal read
        while True:
            read += 1000
            yield b"z" * 1000

    with pytest.raises(UpstreamEventTooLargeError):
        await collect(parse_sse_lines(endless(), max_event=10_000))
    assert read <= 11_000


async def test_an_event_of_many_data_lines_is_bounded_as_a_whole() -> None:
    frame = b"".join(b"data: " + b"d" * 50 + b"\n" for _ in range(10)) + b"\n"
    with pytest.raises(UpstreamEventTooLargeError):
        await collect(parse_sse_lines(chunks_of(frame, 16), max_event=400))
