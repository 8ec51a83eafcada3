"""``app.upstream.events.ReadDeadline``: an open upstream stream's read timeout, kept by one
timer instead of aiohttp's per-chunk one. Against a real aiohttp server on a local port, read
through ``UpstreamEvents`` as the gateway reads it."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable

import aiohttp
import pytest
from aiohttp import web

from app.errors import UpstreamTimeoutError
from app.upstream.events import ReadDeadline, UpstreamEvents

TIMEOUT = 0.4


def frame(n: int) -> bytes:
    return b'data: {"type":"response.output_text.delta","delta":"%d"}\n\n' % n


Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


def paced(gaps: list[float]) -> Handler:
    """A stream of one frame, then one more after each gap, then ``[DONE]``."""

    async def handler(request: web.Request) -> web.StreamResponse:
        response = web.StreamResponse(headers={"content-type": "text/event-stream"})
        await response.prepare(request)
        await response.write(frame(0))
        for n, gap in enumerate(gaps, 1):
            await asyncio.sleep(gap)
            await response.write(frame(n))
        await response.write(b"data: [DONE]\n\n")
        await response.write_eof()
        return response

    return handler


@pytest.fixture
async def serve() -> AsyncIterator[Callable[[Handler], Awaitable[str]]]:
    runners: list[web.AppRunner] = []

    async def start(handler: Handler) -> str:
        app = web.Application()
        app.router.add_post("/stream", handler)
        runner = web.AppRunner(app)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        runners.append(runner)
        port = runner.addresses[0][1]
        return f"http://127.0.0.1:{port}/stream"

    yield start
    for runner in runners:
        await runner.cleanup()


async def read_all(
    session: aiohttp.ClientSession, url: str, pause: float = 0.0
) -> list[dict[str, object]]:
    """The stream's events; ``pause``: a consumer that holds each event that long."""
    resp = await session.post(url)
    events = []
    async for event in UpstreamEvents(resp):
        events.append(event)
        await asyncio.sleep(pause)
    return events


def session() -> aiohttp.ClientSession:
    return aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(sock_read=TIMEOUT))


async def test_a_stream_slower_in_total_than_the_timeout_but_never_silent_that_long_ends_well(
    serve: Callable[[Handler], Awaitable[str]],
) -> None:
    url = await serve(paced([TIMEOUT / 3] * 6))  # 2 x TIMEOUT in all
    async with session() as http:
        events = await read_all(http, url)
    assert len(events) == 8 and events[-1]["type"] == "[DONE]"


async def test_a_silence_longer_than_the_timeout_fails_the_stream_as_an_upstream_timeout(
    serve: Callable[[Handler], Awaitable[str]],
) -> None:
    url = await serve(paced([0.0, TIMEOUT * 3]))
    async with session() as http:
        seen: list[dict[str, object]] = []
        resp = await http.post(url)
        with pytest.raises(UpstreamTimeoutError):
            async for event in UpstreamEvents(resp):
                seen.append(event)
    assert len(seen) == 2  # what came before the silence was read
    assert resp.closed  # the connection is dropped: the upstream learns to stop


async def test_a_consumer_slower_than_the_timeout_is_not_an_upstream_timeout(
    serve: Callable[[Handler], Awaitable[str]],
) -> None:
    url = await serve(paced([0.0, 0.0]))
    async with session() as http:
        events = await read_all(http, url, pause=TIMEOUT * 1.5)
    assert len(events) == 4


async def test_aiohttp_keeps_no_timer_per_chunk_and_the_next_request_has_its_timeout_back(
    serve: Callable[[Handler], Awaitable[str]],
) -> None:
    url = await serve(paced([0.05] * 3))
    async with session() as http:
        resp = await http.post(url)
        assert resp.connection is not None
        protocol = resp.connection.protocol
        assert protocol is not None
        events = UpstreamEvents(resp)
        iterator = events.__aiter__()
        await iterator.__anext__()
        assert protocol.read_timeout is None  # taken over
        async for _ in iterator:
            pass
        # The connection went back to the pool; the next request sets its own read timeout.
        again = await http.post(url)
        assert again.connection is not None and again.connection.protocol is protocol
        assert protocol.read_timeout == TIMEOUT
        async for _ in UpstreamEvents(again):
            pass


async def test_a_response_without_a_read_timeout_is_left_alone(
    serve: Callable[[Handler], Awaitable[str]],
) -> None:
    url = await serve(paced([0.0]))
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(sock_read=None)) as http:
        resp = await http.post(url)
        assert ReadDeadline.take_over(resp) is None
        resp.close()
