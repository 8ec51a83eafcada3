"""``UpstreamEvents``, the one stream every upstream kind answers with: SSE parsed from a live
aiohttp response, the kind's translation step applied, the connection released at the end and
dropped (the upstream sees the disconnect) when the stream is closed before its end."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import AsyncIterator, Iterator

import aiohttp
import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import StreamingResponse
from starlette.routing import Route

from app.protocol.events import STREAM_DONE
from app.protocol.json_types import JsonObject
from app.upstream.events import UpstreamEvents
from tests.helpers import serve_in_thread

FRAMES = b'data: {"n": 1}\n\ndata: {"n": 2, "stop": true}\n\ndata: {"n": 3}\n\ndata: [DONE]\n\n'
disconnected = threading.Event()


async def _frames(request: Request) -> StreamingResponse:
    frames = FRAMES if request.query_params.get("done") else FRAMES[: FRAMES.index(b"data: [")]

    async def body() -> AsyncIterator[bytes]:
        yield frames

    async def held() -> AsyncIterator[bytes]:
        try:
            yield frames
            await asyncio.sleep(30)  # a generation still under way
        finally:
            disconnected.set()

    held_open = request.query_params.get("hold")
    return StreamingResponse(held() if held_open else body(), media_type="text/event-stream")


@pytest.fixture(scope="module")
def server() -> Iterator[str]:
    app = Starlette(routes=[Route("/sse", _frames)])
    with serve_in_thread(app) as url:
        yield url


class Numbers:
    """A translation step: each event ``n`` becomes ``number``; ``stop`` ends the stream."""

    def __init__(self) -> None:
        self.done = False
        self.fed: list[JsonObject] = []

    def feed(self, event: JsonObject) -> list[JsonObject]:
        self.fed.append(event)
        self.done = bool(event.get("stop"))
        return [{"type": "number", "n": event["n"]}]

    def finish(self) -> list[JsonObject]:
        return [] if self.done else [{"type": "end"}]


async def _events(url: str, translator: Numbers | None = None) -> list[JsonObject]:
    async with aiohttp.ClientSession() as session:
        resp = await session.get(url)
        stream = UpstreamEvents(resp, translator)
        events = [event async for event in stream]
        assert resp.closed
        return events


async def test_without_a_step_the_events_pass_as_parsed(server: str) -> None:
    events = await _events(f"{server}/sse?done=1")
    assert events == [{"n": 1}, {"n": 2, "stop": True}, {"n": 3}, {"type": STREAM_DONE}]


async def test_the_step_translates_until_it_is_done(server: str) -> None:
    translator = Numbers()
    events = await _events(f"{server}/sse?done=1", translator)
    assert events == [{"type": "number", "n": 1}, {"type": "number", "n": 2}]
    assert [event["n"] for event in translator.fed] == [1, 2]


async def test_the_step_finishes_a_stream_that_ends_without_done(server: str) -> None:
    class NeverStops(Numbers):
        def feed(self, event: JsonObject) -> list[JsonObject]:
            return super().feed({**event, "stop": False})

    events = await _events(f"{server}/sse", NeverStops())
    assert [event["type"] for event in events] == ["number"] * 3 + ["end"]


async def test_closing_before_the_end_drops_the_connection(server: str) -> None:
    disconnected.clear()
    async with aiohttp.ClientSession() as session:
        resp = await session.get(f"{server}/sse?hold=1")
        stream = UpstreamEvents(resp)
        events = aiter(stream)
        assert await anext(events) == {"n": 1}
        await events.aclose()  # type: ignore[attr-defined]
        assert resp.closed
    assert await asyncio.to_thread(disconnected.wait, 10), "the upstream saw no disconnect"
