"""``app.api.disconnect.unless_gone``: the client's ``http.disconnect`` cancels the work; any
other cancellation goes on as it came; nothing is left running."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator

import pytest
from starlette.requests import Request
from starlette.types import Message

from app.api.disconnect import ClientGoneError, unless_gone

STAGE = "testing"


class Client:
    """The ASGI ``receive`` of a request whose body was read: blocks until told a message."""

    def __init__(self) -> None:
        self.messages: asyncio.Queue[Message] = asyncio.Queue()
        self.waiting = 0

    async def receive(self) -> Message:
        self.waiting += 1
        try:
            return await self.messages.get()
        finally:
            self.waiting -= 1

    def leave(self) -> None:
        self.messages.put_nowait({"type": "http.disconnect"})

    def request(self) -> Request:
        scope = {
            "type": "http",
            "method": "POST",
            "path": "/v1/responses",
            "scheme": "http",
            "server": ("127.0.0.1", 9000),
            "query_string": b"",
            "headers": [(b"x-request-id", b"req-1")],
        }
        return Request(scope, self.receive)


class Work:
    """Work that waits until released, and records how it ended."""

    def __init__(self) -> None:
        self.started = asyncio.Event()
        self.release = asyncio.Event()
        self.cancelled = False

    async def run(self) -> str:
        self.started.set()
        try:
            await self.release.wait()
        except asyncio.CancelledError:
            self.cancelled = True
            raise
        return "done"


async def test_the_work_result_when_the_client_stays() -> None:
    client, work = Client(), Work()
    task = asyncio.create_task(unless_gone(client.request(), work.run(), STAGE))
    await work.started.wait()
    assert client.waiting == 1
    work.release.set()
    assert await task == "done"
    await asyncio.sleep(0)
    assert client.waiting == 0  # the watcher is gone with the work
    assert task.cancelling() == 0


async def test_a_client_gone_cancels_the_work(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level("INFO", logger="app.api.disconnect")
    client, work = Client(), Work()
    task = asyncio.create_task(unless_gone(client.request(), work.run(), STAGE))
    await work.started.wait()
    client.leave()
    with pytest.raises(ClientGoneError):
        await task
    assert work.cancelled
    [record] = [r for r in caplog.records if r.name == "app.api.disconnect"]
    message = record.getMessage()
    assert "POST /v1/responses" in message and STAGE in message and "req-1" in message


async def test_the_request_task_is_not_left_cancelled() -> None:
    """After a client gone the route's task goes on (the error handler answers)."""
    client, work = Client(), Work()

    async def route() -> str:
        try:
            await unless_gone(client.request(), work.run(), STAGE)
        except ClientGoneError:
            await asyncio.sleep(0)  # would raise CancelledError if a cancel were left over
            return "answered"
        return "unexpected"

    task = asyncio.create_task(route())
    await work.started.wait()
    client.leave()
    assert await task == "answered"


async def test_another_cancellation_goes_on() -> None:
    """A cancel from elsewhere (a drain, the server stopping) is not taken for a client gone."""
    client, work = Client(), Work()
    task = asyncio.create_task(unless_gone(client.request(), work.run(), STAGE))
    await work.started.wait()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert work.cancelled and client.waiting == 0


async def test_a_client_gone_and_another_cancellation_at_once_stay_a_cancellation() -> None:
    client, work = Client(), Work()
    task = asyncio.create_task(unless_gone(client.request(), work.run(), STAGE))
    await work.started.wait()
    client.leave()
    await asyncio.sleep(0)  # the watcher gets the message and cancels the work
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task


async def test_a_message_other_than_disconnect_does_not_cancel() -> None:
    client, work = Client(), Work()
    task = asyncio.create_task(unless_gone(client.request(), work.run(), STAGE))
    await work.started.wait()
    client.messages.put_nowait({"type": "http.request", "body": b"", "more_body": False})
    await asyncio.sleep(0.01)
    assert not task.done()
    work.release.set()
    assert await task == "done"


async def test_a_stream_opened_as_the_client_left_is_closed() -> None:
    """Work that ends (here: swallowing the cancel) after the client left: its result is
    dropped, an opened stream closed."""
    client = Client()
    closed = asyncio.Event()
    opened = asyncio.Event()

    async def events() -> AsyncIterator[str]:
        try:
            yield "event"
        finally:
            closed.set()

    async def stubborn_open() -> AsyncIterator[str]:
        stream = events()
        await stream.__anext__()
        opened.set()
        with contextlib.suppress(asyncio.CancelledError):  # a careless adapter: returns its
            await asyncio.sleep(3600)  # stream anyway
        return stream

    task = asyncio.create_task(unless_gone(client.request(), stubborn_open(), STAGE))
    await opened.wait()
    client.leave()
    with pytest.raises(ClientGoneError):
        await task
    assert closed.is_set()
    assert task.cancelling() == 0
