"""``app.api.sse_response.EventStreamResponse`` and ``app.api.sse.GatewayEventSource``.

Driven as ASGI apps: a recording ``send`` (:class:`Client`), a ``receive`` the test controls,
and frames iterators that wait on futures the test resolves. The iterators and ``send`` write
to one ``trace``, so a test asserts the order in which frames are made and sent (what was sent
before the iterator waited), never how long anything took. The pings and the send timeout run
on the response's timer: those tests wait (bounded) for what they expect. Last, the gateway's
stream through a real uvicorn server, read with the openai SDK and as raw bytes with httpx.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import AsyncIterator, Callable, Iterator
from typing import Any

import httpx
import openai
import pytest
from starlette.background import BackgroundTask
from starlette.types import Message, Scope

from app.api.drain import OPEN_STREAMS
from app.api.sse import GatewayEventSource, event_stream_response
from app.api.sse_response import (
    FLUSH_BYTES,
    PING_FRAME,
    EventStreamResponse,
    StreamSendTimeout,
)
from app.main import create_app
from app.settings import Settings
from tests.api.upstreams import build_upstream, parse_sse, serve_gateway, stream_events
from tests.fakes import FakeUpstream, message, round_events
from tests.helpers import serve_in_thread

GET: Scope = {"type": "http", "method": "GET", "path": "/v1/responses", "headers": []}
HEAD: Scope = {**GET, "method": "HEAD"}
STALLED = "the client read nothing of its stream for"
# Bounds the waits of a test that is going wrong (a hang fails instead); never asserted on.
PATIENCE = 5.0


class Client:
    """The connection as the response sees it.

    ``send`` records each message and, for a body message, ``send <body>`` (``, end`` for the
    last one) in ``trace``. A body message can be made to wait: on ``hold`` (the next one
    only, until the test resolves it) or forever with ``stall`` (a client that stopped reading;
    ``on_stall`` is called as such a send begins). ``receive`` gives the request's (read) body,
    then waits for :meth:`disconnect`.
    """

    def __init__(self, trace: list[str] | None = None) -> None:
        self.trace: list[str] = [] if trace is None else trace
        self.messages: list[Message] = []
        self.hold: asyncio.Future[None] | None = None
        self.stall = False
        self.on_stall: Callable[[], None] | None = None
        self._inbox: asyncio.Queue[Message] = asyncio.Queue()
        self._inbox.put_nowait({"type": "http.request", "body": b"", "more_body": False})

    async def send(self, message: Message) -> None:
        self.messages.append(message)
        if message["type"] != "http.response.body":
            return
        end = "" if message.get("more_body", False) else ", end"
        self.trace.append(f"send {message['body'].decode()}{end}")
        waiting, self.hold = self.hold, None
        if self.stall:
            waiting = asyncio.get_running_loop().create_future()
            if self.on_stall is not None:
                self.on_stall()
        if waiting is not None:
            try:
                await waiting
            except asyncio.CancelledError:
                self.trace.append("send cancelled")
                raise

    async def receive(self) -> Message:
        return await self._inbox.get()

    def disconnect(self) -> None:
        self._inbox.put_nowait({"type": "http.disconnect"})

    @property
    def start(self) -> Message:
        assert self.messages[0]["type"] == "http.response.start"
        return self.messages[0]

    @property
    def bodies(self) -> list[Message]:
        return [m for m in self.messages if m["type"] == "http.response.body"]

    def body(self) -> bytes:
        return b"".join(m["body"] for m in self.bodies)

    def pings(self) -> int:
        return sum(m["body"] == PING_FRAME for m in self.bodies)


def serve(response: EventStreamResponse, client: Client, scope: Scope = GET) -> asyncio.Task[None]:
    """The response sent to ``client`` in a task of its own (as a server runs it)."""
    return asyncio.create_task(response(scope, client.receive, client.send))


async def until(condition: Callable[[], bool]) -> None:
    """Let the loop run until ``condition`` holds (bounded: a test going wrong fails)."""
    async with asyncio.timeout(PATIENCE):
        while not condition():  # noqa: ASYNC110 (polls what the response's tasks change)
            await asyncio.sleep(0.001)


def future() -> asyncio.Future[None]:
    return asyncio.get_running_loop().create_future()


async def wait_on(gate: asyncio.Future[None], trace: list[str]) -> None:
    """Wait for ``gate`` as an iterator waits for its upstream, tracing a cancellation."""
    trace.append("waits")
    try:
        await gate
    except asyncio.CancelledError:
        trace.append("cancelled where it waits")
        raise
    trace.append("resumed")


async def one_then_wait(gate: asyncio.Future[None], trace: list[str]) -> AsyncIterator[bytes]:
    """``a``, then a wait for ``gate``, then ``b``."""
    try:
        yield b"a"
        await wait_on(gate, trace)
        yield b"b"
    finally:
        trace.append("closed")


@pytest.fixture
def cut_restored() -> Iterator[None]:
    """``OPEN_STREAMS.cutting`` as it was after the test (a test cuts the open streams)."""
    cutting = OPEN_STREAMS.cutting
    yield
    OPEN_STREAMS.cutting = cutting


# ---------------------------------------------------------------------------- coalescing


async def test_frames_made_without_waiting_go_out_in_one_message_when_the_iterator_waits() -> None:
    trace: list[str] = []
    gate = future()

    async def frames() -> AsyncIterator[bytes]:
        try:
            for name in ("a", "b", "c"):
                trace.append(f"made {name}")
                yield name.encode()
            await wait_on(gate, trace)
            yield b"d"
            yield b"e"
        finally:
            trace.append("closed")

    client = Client(trace)
    task = serve(EventStreamResponse(frames()), client)
    await until(lambda: len(client.bodies) == 1)
    # The three frames went out in one write once the iterator waited on the test's gate.
    assert trace == ["made a", "made b", "made c", "waits", "send abc"]
    assert not task.done()
    gate.set_result(None)
    await task
    # The last message ends the body and carries the frames pending at the end.
    assert trace[5:] == ["resumed", "closed", "send de, end"]
    assert [(m["body"], m["more_body"]) for m in client.bodies] == [
        (b"abc", True),
        (b"de", False),
    ]


async def test_a_frame_made_after_a_wait_is_sent_before_the_iterator_waits_again() -> None:
    """A paced stream (a token at a time): each frame goes out as soon as it is made, whatever
    the iterator waits on (here a sleep, a future, an event)."""
    trace: list[str] = []
    event = asyncio.Event()

    async def frames() -> AsyncIterator[bytes]:
        yield b"a"
        trace.append("sleeps")
        await asyncio.sleep(0)
        yield b"b"
        await wait_on(future_b, trace)
        yield b"c"
        trace.append("waits for an event")
        await event.wait()
        yield b"d"

    future_b = future()
    client = Client(trace)
    task = serve(EventStreamResponse(frames()), client)
    await until(lambda: "send b" in trace)
    future_b.set_result(None)
    await until(lambda: "send c" in trace)
    event.set()
    await task
    assert trace == [
        "sleeps",
        "send a",
        "waits",
        "send b",
        "resumed",
        "waits for an event",
        "send c",
        "send d, end",
    ]


async def test_a_long_burst_is_split_once_flush_bytes_are_pending() -> None:
    frame = b"x" * 1000
    count = 200  # 200 kB made without waiting

    async def frames() -> AsyncIterator[bytes]:
        for _ in range(count):
            yield frame

    client = Client()
    await serve(EventStreamResponse(frames()), client)
    *full, last = client.bodies
    per_write = -(-FLUSH_BYTES // len(frame))  # the frame that reaches FLUSH_BYTES is sent too
    assert [len(m["body"]) for m in full] == [per_write * len(frame)] * (count // per_write)
    assert all(m["more_body"] for m in full)
    assert len(last["body"]) == (count % per_write) * len(frame)
    assert last["more_body"] is False
    assert client.body() == frame * count


async def test_with_first_at_once_the_first_frame_goes_out_alone_then_frames_coalesce() -> None:
    """Nothing waits here: the first frame is still sent before the iterator goes on."""
    trace: list[str] = []

    async def frames() -> AsyncIterator[bytes]:
        for name in ("a", "b", "c"):
            trace.append(f"made {name}")
            yield name.encode()

    response = EventStreamResponse(frames())
    response.first_at_once = True
    client = Client(trace)
    await serve(response, client)
    assert trace == ["made a", "send a", "made b", "made c", "send bc, end"]


@pytest.mark.parametrize(
    ("path", "body", "first", "last"),
    [
        (
            "/v1/responses",
            b'{"model": "m", "input": "hi", "stream": true, "store": false}',
            "response.created",
            b"data: [DONE]\n\n",
        ),
        (
            "/v1/messages",
            b'{"model": "m", "max_tokens": 64, "stream": true,'
            b' "messages": [{"role": "user", "content": "hi"}]}',
            "message_start",
            b"event: message_stop\n",
        ),
    ],
)
async def test_the_gateway_sends_its_first_event_at_once_when_the_whole_answer_is_read(
    tmp_path: Any, path: str, body: bytes, first: str, last: bytes
) -> None:
    """An upstream whose whole answer is already read (a fast model, a short answer): the
    stream's frames are all made without waiting, yet its first event goes out alone, first,
    not with the rest at the end (its time to first byte)."""
    upstream = FakeUpstream(events=round_events([message("hello")]))
    app = create_app(
        Settings(upstream_url="http://127.0.0.1:1", data_dir=tmp_path), upstream=upstream
    )
    scope: Scope = {
        **GET,
        "method": "POST",
        "path": path,
        "headers": [(b"content-type", b"application/json"), (b"content-length", b"%d" % len(body))],
    }
    client = Client()
    client._inbox = asyncio.Queue()
    client._inbox.put_nowait({"type": "http.request", "body": body, "more_body": False})
    async with app.router.lifespan_context(app):
        await app(scope, client.receive, client.send)
    opening, *rest = client.bodies
    assert [frame.event for frame in parse_sse(opening["body"].decode())] == [first]
    assert len(rest) == 1 and rest[0]["more_body"] is False  # the rest: one write
    assert last in rest[0]["body"]


async def test_an_empty_stream_is_one_empty_last_message() -> None:
    async def frames() -> AsyncIterator[bytes]:
        return
        yield b""  # an async generator

    client = Client()
    await serve(EventStreamResponse(frames()), client)
    assert [(m["body"], m["more_body"]) for m in client.bodies] == [(b"", False)]


# ---------------------------------------------------------------------------- the end


async def test_the_background_runs_after_the_last_message() -> None:
    trace: list[str] = []

    async def after() -> None:
        trace.append("background")

    async def frames() -> AsyncIterator[bytes]:
        yield b"a"

    client = Client(trace)
    await serve(EventStreamResponse(frames(), background=BackgroundTask(after)), client)
    assert trace == ["send a, end", "background"]


async def test_an_exception_from_the_iterator_propagates_and_the_iterator_is_closed() -> None:
    trace: list[str] = []
    gate = future()

    async def frames() -> AsyncIterator[bytes]:
        try:
            yield b"a"
            await wait_on(gate, trace)
            raise RuntimeError("the frames failed")
            yield b"b"
        finally:
            trace.append("closed")

    client = Client(trace)
    task = serve(EventStreamResponse(frames()), client)
    await until(lambda: "send a" in trace)
    gate.set_result(None)
    with pytest.raises(RuntimeError, match="the frames failed"):
        await task
    # What was made before is sent; the body is not ended (the server closes the connection).
    assert trace == ["waits", "send a", "resumed", "closed"]
    assert all(m["more_body"] for m in client.bodies)


async def test_an_exception_before_any_frame_propagates() -> None:
    async def frames() -> AsyncIterator[bytes]:
        raise ValueError("no frames")
        yield b""

    client = Client()
    with pytest.raises(ValueError, match="no frames"):
        await serve(EventStreamResponse(frames()), client)
    assert client.start["status"] == 200
    assert client.bodies == []


# ---------------------------------------------------------------------------- client gone


async def test_a_client_gone_cancels_the_iterator_where_it_waits_and_the_response_returns() -> None:
    trace: list[str] = []
    gate = future()
    client = Client(trace)

    async def leave() -> None:
        await until(lambda: "send a" in trace)
        client.disconnect()

    leaving = asyncio.create_task(leave())
    # Run in the test's own task: it returns (no exception) and is not left cancelled.
    await EventStreamResponse(one_then_wait(gate, trace))(GET, client.receive, client.send)
    await leaving
    assert trace == ["waits", "send a", "cancelled where it waits", "closed"]
    assert gate.cancelled()
    assert [m["more_body"] for m in client.bodies] == [True]  # no last message: nobody reads
    task = asyncio.current_task()
    assert task is not None and task.cancelling() == 0


async def test_a_client_gone_while_the_last_message_is_sent_ends_the_response_quietly() -> None:
    trace: list[str] = []
    client = Client(trace)
    client.stall = True
    client.on_stall = client.disconnect

    async def frames() -> AsyncIterator[bytes]:
        try:
            yield b"a"
        finally:
            trace.append("closed")

    await EventStreamResponse(frames())(GET, client.receive, client.send)
    assert trace == ["closed", "send a, end", "send cancelled"]
    task = asyncio.current_task()
    assert task is not None and task.cancelling() == 0


async def test_a_client_gone_while_cancelled_from_outside_too_stays_cancelled() -> None:
    """The client gone is not the only reason: the outside cancellation goes on."""
    trace: list[str] = []
    gate = future()
    client = Client(trace)
    task = serve(EventStreamResponse(one_then_wait(gate, trace)), client)
    await until(lambda: "send a" in trace)
    client.disconnect()
    await asyncio.sleep(0)  # the response's watcher takes the disconnect (and cancels)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert trace[-2:] == ["cancelled where it waits", "closed"]


# ---------------------------------------------------------------------------- cancellation


async def test_a_cancellation_from_outside_is_thrown_into_the_iterator_where_it_waits() -> None:
    """As the drain's cut does (``OPEN_STREAMS.cut``): the response passes it through."""
    trace: list[str] = []
    gate = future()
    client = Client(trace)
    task = serve(EventStreamResponse(one_then_wait(gate, trace)), client)
    await until(lambda: "send a" in trace)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert task.cancelled()
    assert trace == ["waits", "send a", "cancelled where it waits", "closed"]


def created(response_id: str, **extra: Any) -> dict[str, Any]:
    response = {"id": response_id, "object": "response", "status": "in_progress", **extra}
    return {"type": "response.created", "response": response, "sequence_number": 0}


async def test_a_stream_cut_by_the_drain_ends_with_error_response_failed_and_done(
    cut_restored: None,
) -> None:
    trace: list[str] = []
    gate = future()

    async def events() -> AsyncIterator[dict[str, Any]]:
        try:
            yield created("resp_cut")
            await wait_on(gate, trace)  # the upstream's next event
        finally:
            trace.append("events closed")

    client = Client(trace)
    task = serve(event_stream_response(events()), client)
    await until(lambda: len(client.bodies) == 1)
    assert OPEN_STREAMS.cut() == 1
    await task
    assert not task.cancelled()
    text = client.body().decode()
    assert text.endswith("data: [DONE]\n\n")
    sent = stream_events(text)
    assert [e["type"] for e in sent] == ["response.created", "error", "response.failed"]
    assert [e["sequence_number"] for e in sent] == [0, 1, 2]
    assert sent[1]["code"] == "server_shutting_down"
    assert sent[2]["response"]["id"] == "resp_cut"
    assert sent[2]["response"]["status"] == "failed"
    assert client.bodies[-1]["more_body"] is False
    # response.created went out at once (the first event), before the iterator waited.
    assert trace[0].startswith("send event: response.created")
    assert trace[1:4] == ["waits", "cancelled where it waits", "events closed"]
    assert task.cancelling() == 0
    assert OPEN_STREAMS.cut() == 0  # the stream left the open streams


# ---------------------------------------------------------------------------- send timeout


def stalled_lines(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if STALLED in r.getMessage()]


async def test_a_stalled_send_ends_a_gateway_stream_with_one_line_and_closes_the_iterator(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.WARNING, logger="app.api.sse")
    trace: list[str] = []

    async def frames() -> AsyncIterator[bytes]:
        try:
            yield b"x" * FLUSH_BYTES  # sent at once, with the iterator at its yield
            yield b"never made"
        finally:
            trace.append("closed")

    client = Client(trace)
    client.stall = True
    response = GatewayEventSource(frames(), send_timeout=0.2)
    await response(GET, client.receive, client.send)  # returns: the line says what happened
    assert trace[-2:] == ["send cancelled", "closed"]
    [line] = stalled_lines(caplog)
    assert line == f"GET /v1/responses: {STALLED} 0.2 s; the stream was ended"
    task = asyncio.current_task()
    assert task is not None and task.cancelling() == 0


async def test_a_stalled_last_message_raises_stream_send_timeout_from_the_plain_response() -> None:
    trace: list[str] = []

    async def frames() -> AsyncIterator[bytes]:
        try:
            yield b"a"
        finally:
            trace.append("closed")

    client = Client(trace)
    client.stall = True
    with pytest.raises(StreamSendTimeout):
        await EventStreamResponse(frames(), send_timeout=0.2)(GET, client.receive, client.send)
    assert trace == ["closed", "send a, end", "send cancelled"]
    task = asyncio.current_task()
    assert task is not None and task.cancelling() == 0


async def test_a_slow_send_within_the_send_timeout_is_waited_for() -> None:
    async def frames() -> AsyncIterator[bytes]:
        for name in (b"a", b"b", b"c"):
            await asyncio.sleep(0)
            yield name

    async def slow_send(message: Message) -> None:
        await client.send(message)
        await asyncio.sleep(0.01)  # far below the send timeout

    client = Client()
    await EventStreamResponse(frames(), send_timeout=2)(GET, client.receive, slow_send)
    assert client.body() == b"abc"
    assert client.bodies[-1]["more_body"] is False


# ---------------------------------------------------------------------------- pings


async def test_an_idle_stream_is_pinged_and_no_ping_follows_the_last_message() -> None:
    trace: list[str] = []
    gate = future()
    client = Client(trace)
    task = serve(EventStreamResponse(one_then_wait(gate, trace), ping=0.2), client)
    await until(lambda: client.pings() >= 1)  # the iterator waits: the stream is idle
    gate.set_result(None)
    await task
    bodies = [(m["body"], m["more_body"]) for m in client.bodies]
    assert bodies[0] == (b"a", True)
    assert set(bodies[1:-1]) == {(PING_FRAME, True)}
    assert bodies[-1] == (b"b", False)
    sent = len(client.messages)
    await asyncio.sleep(0.5)  # more than two ping periods after the end
    assert len(client.messages) == sent


async def test_a_stream_busier_than_the_ping_period_gets_no_ping() -> None:
    async def frames() -> AsyncIterator[bytes]:
        for _ in range(25):  # a frame every 20 ms for at least 0.5 s: two ping periods
            await asyncio.sleep(0.02)
            yield b"data: token\n\n"

    client = Client()
    await EventStreamResponse(frames(), ping=0.25)(GET, client.receive, client.send)
    assert client.pings() == 0
    assert client.body() == b"data: token\n\n" * 25


async def test_no_ping_is_sent_while_a_send_waits() -> None:
    trace: list[str] = []
    gate = future()
    client = Client(trace)
    client.hold = future()
    held = client.hold
    task = serve(EventStreamResponse(one_then_wait(gate, trace), ping=0.1), client)
    await until(lambda: "send a" in trace)
    await asyncio.sleep(0.5)  # five ping periods with the send under way
    assert trace == ["waits", "send a"]
    assert client.pings() == 0
    held.set_result(None)
    gate.set_result(None)
    await task
    assert client.body().replace(PING_FRAME, b"") == b"ab"


# ---------------------------------------------------------------------------- HEAD, headers


async def test_head_gets_the_headers_and_an_empty_body_and_the_iterator_never_starts() -> None:
    started: list[bool] = []

    async def frames() -> AsyncIterator[bytes]:
        started.append(True)
        yield b"a"

    client = Client()
    await serve(EventStreamResponse(frames(), headers={"x-extra": "1"}), client, HEAD)
    assert client.start["status"] == 200
    headers = dict(client.start["headers"])
    assert headers[b"content-type"] == b"text/event-stream; charset=utf-8"
    assert headers[b"cache-control"] == b"no-store"
    assert headers[b"x-accel-buffering"] == b"no"
    assert headers[b"x-extra"] == b"1"
    assert [(m["body"], m["more_body"]) for m in client.bodies] == [(b"", False)]
    assert started == []


async def test_headers_given_override_the_defaults() -> None:
    async def frames() -> AsyncIterator[bytes]:
        yield b"a"

    client = Client()
    response = EventStreamResponse(frames(), status_code=201, headers={"cache-control": "x"})
    await serve(response, client)
    assert client.start["status"] == 201
    assert dict(client.start["headers"])[b"cache-control"] == b"x"


# ---------------------------------------------------------------------------- through uvicorn


def test_a_streamed_response_through_uvicorn_has_every_event_in_order_and_ends_with_done() -> None:
    upstream, _ = build_upstream({})
    body = {"model": "test-model", "input": "hi", "stream": True}
    with serve_in_thread(upstream) as upstream_url, serve_gateway(upstream_url) as gateway:
        client = openai.OpenAI(base_url=f"{gateway}/v1", api_key="sk-test", max_retries=0)
        with client.responses.create(model="test-model", input="hi", stream=True) as stream:
            events = list(stream)
        with httpx.stream("POST", f"{gateway}/v1/responses", json=body, timeout=10) as raw:
            assert raw.status_code == 200
            assert raw.headers["content-type"].startswith("text/event-stream")
            assert raw.headers["cache-control"] == "no-store"
            wire = b"".join(raw.iter_raw())
    assert [e.sequence_number for e in events] == list(range(len(events)))
    assert events[0].type == "response.created"
    assert events[-1].type == "response.completed"
    assert events[-1].response.output_text == "Hello"
    assert wire.endswith(b"\n\ndata: [DONE]\n\n")
    assert PING_FRAME not in wire
    sent = stream_events(wire.decode())  # every frame whole, [DONE] last
    assert [e["type"] for e in sent] == [e.type for e in events]
    assert [e["sequence_number"] for e in sent] == list(range(len(sent)))


# ------------------------------------------- a send interrupted while the iterator waits
#
# What is pending is sent just before the iterator waits, so the iterator is in the middle of
# a step (its ``__anext__`` started and waiting) while that send is under way: whatever ends
# the send must reach the iterator there, as it would if the iterator were awaited.


def closing_failures(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == "app.api.sse_response"]


async def test_a_send_stalled_while_the_iterator_waits_cancels_and_closes_the_iterator(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.WARNING)
    trace: list[str] = []
    client = Client(trace)
    client.stall = True
    response = GatewayEventSource(one_then_wait(future(), trace), send_timeout=0.2)
    response.first_at_once = False  # the first frame goes out as the iterator waits
    await response(GET, client.receive, client.send)
    assert trace == ["waits", "send a", "send cancelled", "cancelled where it waits", "closed"]
    assert len(stalled_lines(caplog)) == 1
    assert closing_failures(caplog) == []
    task = asyncio.current_task()
    assert task is not None and task.cancelling() == 0


async def test_a_client_gone_while_a_send_waits_cancels_and_closes_the_iterator(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.WARNING)
    trace: list[str] = []
    client = Client(trace)
    client.stall = True
    client.on_stall = client.disconnect
    await EventStreamResponse(one_then_wait(future(), trace))(GET, client.receive, client.send)
    assert trace == ["waits", "send a", "send cancelled", "cancelled where it waits", "closed"]
    assert closing_failures(caplog) == []
    task = asyncio.current_task()
    assert task is not None and task.cancelling() == 0


async def test_a_stream_cut_while_a_send_waits_still_ends_with_the_closing_events(
    cut_restored: None,
) -> None:
    trace: list[str] = []
    gate = future()

    async def events() -> AsyncIterator[dict[str, Any]]:
        try:
            yield created("resp_cut")
            await gate  # the upstream's first delta
            yield {"type": "response.in_progress", "sequence_number": 1}
            await wait_on(future(), trace)
        finally:
            trace.append("events closed")

    client = Client(trace)
    task = serve(event_stream_response(events()), client)
    await until(lambda: len(client.bodies) == 1)  # response.created, at once
    client.hold = future()  # the next write waits on the client
    gate.set_result(None)
    await until(lambda: len(client.bodies) == 2)
    assert OPEN_STREAMS.cut() == 1
    await task
    assert trace[1:5] == ["waits", trace[2], "send cancelled", "cancelled where it waits"]
    assert "events closed" in trace
    # The interrupted write is the client's loss; the closing events and [DONE] follow it.
    text = b"".join(m["body"] for m in client.bodies[2:]).decode()
    assert [e["type"] for e in stream_events(text)] == ["error", "response.failed"]
    assert client.bodies[-1]["more_body"] is False
    assert not task.cancelled() and task.cancelling() == 0


async def test_a_stream_cut_while_its_first_event_is_sent_ends_with_the_closing_events(
    cut_restored: None,
) -> None:
    """The first event is sent where the iterator yielded it (``first_at_once``), before it
    goes on: a cut then is raised in the iterator there, which ends the stream with its closing
    events."""
    trace: list[str] = []

    async def events() -> AsyncIterator[dict[str, Any]]:
        try:
            yield created("resp_cut")
            trace.append("went on")
            await wait_on(future(), trace)
        finally:
            trace.append("events closed")

    client = Client(trace)
    client.hold = future()  # the first write (response.created) waits on the client
    task = serve(event_stream_response(events()), client)
    await until(lambda: len(client.bodies) == 1)
    assert OPEN_STREAMS.cut() == 1
    await task
    assert trace[1:3] == ["send cancelled", "events closed"]  # never went on
    text = b"".join(m["body"] for m in client.bodies[1:]).decode()
    assert [e["type"] for e in stream_events(text)] == ["error", "response.failed"]
    assert text.endswith("data: [DONE]\n\n")
    assert client.bodies[-1]["more_body"] is False
    assert not task.cancelled() and task.cancelling() == 0


async def test_a_send_cancelled_while_the_iterator_is_at_a_bare_yield_cancels_it_there() -> None:
    """``asyncio.sleep(0)`` waits on no future: the cancellation is thrown in where it waits."""
    trace: list[str] = []

    async def frames() -> AsyncIterator[bytes]:
        try:
            yield b"a"
            trace.append("waits")
            try:
                await asyncio.sleep(0)
            except asyncio.CancelledError:
                trace.append("cancelled where it waits")
                raise
            yield b"b"
        finally:
            trace.append("closed")

    client = Client(trace)
    client.stall = True
    client.on_stall = client.disconnect
    await EventStreamResponse(frames())(GET, client.receive, client.send)
    assert trace == ["waits", "send a", "send cancelled", "cancelled where it waits", "closed"]


async def test_a_send_failing_while_the_iterator_waits_raises_and_closes_the_iterator() -> None:
    trace: list[str] = []
    gate = future()

    async def failing_send(message: Message) -> None:
        if message["type"] == "http.response.body":
            raise RuntimeError("the send failed")

    response = EventStreamResponse(one_then_wait(gate, trace))
    with pytest.raises(RuntimeError, match="the send failed"):
        await response(GET, Client().receive, failing_send)
    assert trace == ["waits", "cancelled where it waits", "closed"]
    assert gate.cancelled()


async def test_an_iterator_going_on_after_its_send_was_cancelled_is_not_taken_for_stalled() -> None:
    """The interrupted send is not one under way: the send timeout does not count it."""
    trace: list[str] = []
    later = future()

    async def frames() -> AsyncIterator[bytes]:
        yield b"a"
        with contextlib.suppress(asyncio.CancelledError):  # ends the stream its own way
            await wait_on(future(), trace)
        await wait_on(later, trace)
        yield b"b"

    client = Client(trace)
    client.hold = future()
    task = serve(EventStreamResponse(frames(), send_timeout=0.2), client)
    await until(lambda: "send a" in trace)
    task.cancel()
    await until(lambda: trace[-1] == "waits")
    await asyncio.sleep(0.5)  # more than the send timeout, with no send under way
    later.set_result(None)
    await task
    assert trace[-3:] == ["waits", "resumed", "send b, end"]


# ---------------------------------------------------------------- an end after a wait


async def test_an_iterator_that_ends_after_a_wait_ends_the_body() -> None:
    """The end of the iterator (``StopAsyncIteration``) can come after it waited: e.g. closing
    its upstream in its ``finally`` after the last frame, or a rate limit's charge."""
    trace: list[str] = []
    gate = future()

    async def frames() -> AsyncIterator[bytes]:
        try:
            yield b"a"
            await wait_on(gate, trace)
        finally:
            trace.append("closed")

    client = Client(trace)
    task = serve(EventStreamResponse(frames()), client)
    await until(lambda: "send a" in trace)
    gate.set_result(None)
    await task
    assert trace == ["waits", "send a", "resumed", "closed", "send , end"]


async def test_a_background_stream_cut_by_the_drain_ends_without_closing_events(
    cut_restored: None,
) -> None:
    """Its job goes on in another gateway (``app.api.drain``): the stream just ends, here after
    its events' ``finally`` waited (closing the upstream)."""
    trace: list[str] = []

    async def events() -> AsyncIterator[dict[str, Any]]:
        try:
            yield created("resp_background", background=True)
            await wait_on(future(), trace)
        finally:
            await asyncio.sleep(0)
            trace.append("events closed")

    client = Client(trace)
    task = serve(event_stream_response(events()), client)
    await until(lambda: len(client.bodies) == 1)
    assert OPEN_STREAMS.cut() == 1
    await task
    assert trace[2:] == ["cancelled where it waits", "events closed", "send , end"]
    assert [frame.event for frame in parse_sse(client.body().decode())] == ["response.created"]
    assert not task.cancelled() and task.cancelling() == 0


async def test_frames_made_before_an_exception_are_sent_before_it_propagates() -> None:
    trace: list[str] = []
    gate = future()

    async def frames() -> AsyncIterator[bytes]:
        try:
            yield b"a"
            await wait_on(gate, trace)
            yield b"b"
            yield b"c"
            raise RuntimeError("the frames failed")
        finally:
            trace.append("closed")

    client = Client(trace)
    task = serve(EventStreamResponse(frames()), client)
    await until(lambda: "send a" in trace)
    gate.set_result(None)
    with pytest.raises(RuntimeError, match="the frames failed"):
        await task
    assert trace == ["waits", "send a", "resumed", "closed", "send bc"]
    assert all(m["more_body"] for m in client.bodies)  # the body is not ended


async def test_a_client_gone_as_its_send_times_out_ends_the_stream_once(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """The disconnect and the send timeout's timer handled in one pass of the loop: both cancel
    the stream's task, both for the response's own reasons, so it ends as a send timeout (one
    line), not with a CancelledError and its task left cancelled."""
    caplog.set_level(logging.WARNING, logger="app.api.sse")
    trace: list[str] = []
    client = Client(trace)
    client.stall = True
    loop = asyncio.get_running_loop()

    def block_the_loop() -> None:
        client.disconnect()
        time.sleep(0.3)  # past the send timeout: the disconnect and the timer come together

    def on_stall() -> None:
        loop.call_soon(block_the_loop)

    client.on_stall = on_stall
    response = GatewayEventSource(one_then_wait(future(), trace), send_timeout=0.2)
    response.first_at_once = False  # the first frame goes out as the iterator waits
    await response(GET, client.receive, client.send)
    assert trace == ["waits", "send a", "send cancelled", "cancelled where it waits", "closed"]
    assert len(stalled_lines(caplog)) == 1
    task = asyncio.current_task()
    assert task is not None and task.cancelling() == 0
