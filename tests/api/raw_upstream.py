"""An upstream on a raw asyncio socket server, for tests that watch its connections.

Each request is answered by its body's ``model``:

- ``hung``: never answered; the connection is held until the gateway closes it (counted in
  ``held`` when the request arrived and in ``released`` when the gateway closed it);
- ``flood``: an event stream that never ends, text deltas as fast as the gateway takes them,
  until the gateway closes the connection (``flooding``, ``flood_closed``);
- anything else: a completed Response (JSON, or a whole event stream when ``stream`` is true).

``open`` is the number of connections open right now. Counters change on the server's thread
and are read by the test's; :meth:`RawUpstream.wait_for` polls them.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time
from collections.abc import Callable, Iterator

import orjson

from tests.api.upstreams import (
    closing_events,
    completed_response,
    opening_events,
    sse_frame,
    text_delta,
)
from tests.helpers import free_port

FLOOD_DELTA = "x" * 16384
FLOOD_HEAD = b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\nconnection: close\r\n\r\n"


class RawUpstream:
    def __init__(self) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.open = 0
        self.held = 0
        self.released = 0
        self.flooding = 0
        self.flood_closed = 0
        self.answered = 0
        self._started = threading.Event()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stop: asyncio.Event | None = None
        self._thread = threading.Thread(target=lambda: asyncio.run(self._serve()), daemon=True)

    def __enter__(self) -> RawUpstream:
        self._thread.start()
        if not self._started.wait(10):
            raise RuntimeError("the raw upstream did not start")
        return self

    def __exit__(self, *exc: object) -> None:
        if self._loop is not None and self._stop is not None:
            self._loop.call_soon_threadsafe(self._stop.set)
        self._thread.join(timeout=10)

    def wait_for(self, condition: Callable[[], bool], timeout: float = 10.0) -> bool:
        """Whether ``condition`` held within ``timeout`` seconds (a bound, not a measure)."""
        deadline = time.monotonic() + timeout
        while not condition():
            if time.monotonic() > deadline:
                return False
            time.sleep(0.01)
        return True

    async def _serve(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._stop = asyncio.Event()
        server = await asyncio.start_server(self._connection, "127.0.0.1", self.port)
        self._started.set()
        async with server:
            await self._stop.wait()
            server.close()

    async def _connection(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.open += 1
        try:
            while True:
                body = await _read_request(reader)
                if body is None:
                    return
                model = body.get("model")
                if model == "hung":
                    await self._hold(reader)
                    return
                if model == "flood":
                    await self._flood(writer)
                    return
                writer.write(_answer(bool(body.get("stream"))))
                await writer.drain()
                self.answered += 1
        except (ConnectionError, OSError, asyncio.IncompleteReadError):
            return
        finally:
            self.open -= 1
            writer.close()

    async def _hold(self, reader: asyncio.StreamReader) -> None:
        self.held += 1
        try:
            while await reader.read(65536):
                pass
        finally:
            self.released += 1

    async def _flood(self, writer: asyncio.StreamWriter) -> None:
        self.flooding += 1
        try:
            head = (
                b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\nconnection: close\r\n\r\n"
            )
            writer.write(head + b"".join(sse_frame(e) for e in opening_events("")))
            while not writer.is_closing():
                writer.write(sse_frame(text_delta(FLOOD_DELTA)))
                await writer.drain()
        finally:
            self.flood_closed += 1


async def _read_request(reader: asyncio.StreamReader) -> dict[str, object] | None:
    """One request's JSON body, or None when the connection ended."""
    with contextlib.suppress(asyncio.IncompleteReadError):
        head = await reader.readuntil(b"\r\n\r\n")
        length = 0
        for line in head.split(b"\r\n")[1:]:
            name, _, value = line.partition(b":")
            if name.strip().lower() == b"content-length":
                length = int(value.strip())
        raw = await reader.readexactly(length)
        body = orjson.loads(raw) if raw else {}
        return body if isinstance(body, dict) else {}
    return None


def _answer(stream: bool) -> bytes:
    if stream:
        events = [*opening_events("Hel"), text_delta("lo"), *closing_events("Hello")]
        payload = b"".join(sse_frame(e) for e in events) + b"data: [DONE]\n\n"
        kind = b"text/event-stream"
    else:
        payload = orjson.dumps(completed_response())
        kind = b"application/json"
    return (
        b"HTTP/1.1 200 OK\r\ncontent-type: "
        + kind
        + b"\r\ncontent-length: "
        + str(len(payload)).encode()
        + b"\r\n\r\n"
        + payload
    )


@contextlib.contextmanager
def raw_upstream() -> Iterator[RawUpstream]:
    with RawUpstream() as upstream:
        yield upstream
