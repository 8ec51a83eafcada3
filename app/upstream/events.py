"""The one stream class every upstream kind answers with: a streaming aiohttp response read as
SSE events (``sse``), passed through the kind's translation step, with transport failures mapped
onto the gateway's errors (``app.net.http``) and the connection released at the end or on
``aclose`` (dropping it when the body was not read out, which stops the upstream generating).

The translation step is an ``EventTranslator``. The responses kind has none: its events are
Responses events already and pass as they are parsed, ``[DONE]`` included (the core reads it).
The chat kind's is ``chat_stream.ChatStreamTranslator``: chat-completion chunks in, Responses
events out. Both run in the one generator below, so neither pays an extra async-generator hop
per event (this is the hot path; bench/README.md).

The read timeout (``read_timeout``, aiohttp's ``sock_read``) is kept by ``ReadDeadline``
once the stream is open: aiohttp re-arms a timer for every network chunk (a cancelled handle
and a new ``call_later``, ~4 µs a chunk, a chunk per token on a paced stream), where this one
timer notes the loop time as each read begins and re-arms itself only when it fires. The
timeout counts while the stream waits for the upstream, not while a slow client holds it up
(its own ``send_timeout`` covers that).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterable
from typing import Protocol

import aiohttp

from app.errors import UpstreamError
from app.net.http import map_transport_error, release
from app.protocol.events import STREAM_DONE
from app.protocol.json_types import JsonObject
from app.upstream.sse import DEFAULT_MAX_EVENT_BYTES, SSEDecoder


class EventTranslator(Protocol):
    """A kind's translation step: each parsed upstream event in, the Responses events it makes
    out. The stream ends at ``[DONE]``, at its last byte, or once ``done`` is true; ``finish``
    then yields what the upstream left unsaid (nothing once ``done``)."""

    @property
    def done(self) -> bool: ...

    def feed(self, event: JsonObject) -> Iterable[JsonObject]: ...

    def finish(self) -> Iterable[JsonObject]: ...


class UpstreamEvents:
    """``core.ports.UpstreamEventStream`` over a streaming aiohttp response; ``translator`` is
    the kind's translation step (None: the events are Responses events already)."""

    def __init__(
        self,
        resp: aiohttp.ClientResponse,
        translator: EventTranslator | None = None,
        max_bytes: int = DEFAULT_MAX_EVENT_BYTES,
    ) -> None:
        self._resp = resp
        self._translator = translator
        # One SSE line or event ([limits] max_upstream_event_bytes): ``sse``.
        self._max_bytes = max_bytes

    def __aiter__(self) -> AsyncIterator[JsonObject]:
        return self._events()

    async def _events(self) -> AsyncIterator[JsonObject]:
        translator = self._translator
        # Not aiohttp's readline: it caps line length (see ``sse.SSEDecoder``).
        decoder = SSEDecoder(self._max_bytes)
        read = self._resp.content.readany
        deadline = ReadDeadline.take_over(self._resp)
        try:
            while True:
                if deadline is None:
                    chunk = await read()
                else:
                    deadline.since = deadline.loop.time()
                    chunk = await read()
                    deadline.since = None
                # The last bytes may complete an event (a frame without its blank line).
                for upstream_event in decoder.feed(chunk) if chunk else decoder.end():
                    if translator is None:
                        yield upstream_event
                    elif upstream_event.get("type") != STREAM_DONE:
                        for event in translator.feed(upstream_event):
                            yield event
                        if translator.done:
                            return
                if not chunk:
                    break
                if decoder.done:
                    decoder.end()  # raises what a bad frame after the events above left
                    break
            if translator is not None:
                for event in translator.finish():
                    yield event
        except UpstreamError:
            raise
        except Exception as exc:
            raise map_transport_error(exc) from exc
        finally:
            if deadline is not None:
                deadline.stop()
            await self.aclose()

    async def aclose(self) -> None:
        release(self._resp)


class ReadDeadline:
    """The read timeout of an open stream (see the module docstring): the stream fails with
    aiohttp's own read timeout error when one read waits ``timeout`` seconds."""

    __slots__ = ("_handle", "_resp", "loop", "since", "timeout")

    def __init__(self, resp: aiohttp.ClientResponse, timeout: float) -> None:
        self._resp = resp
        self.timeout = timeout
        self.loop = asyncio.get_running_loop()
        # The loop time the read under way began; None between reads.
        self.since: float | None = None
        self._handle: asyncio.TimerHandle | None = self.loop.call_later(timeout, self._check)

    @classmethod
    def take_over(cls, resp: aiohttp.ClientResponse) -> ReadDeadline | None:
        """Keep ``resp``'s read timeout here instead of in aiohttp (None: it has none, or its
        body is all read already). aiohttp's timer armed at the last chunk stays until the
        next chunk drops it; the next request on the connection sets its own timeout again."""
        connection = resp.connection
        protocol = None if connection is None else connection.protocol
        if protocol is None or not protocol.read_timeout:
            return None
        timeout = protocol.read_timeout
        protocol.read_timeout = None  # public: aiohttp does the same for WebSockets
        return cls(resp, timeout)

    def _check(self) -> None:
        since = self.since
        now = self.loop.time()
        if since is None:  # the stream is busy with what it read (a slow client, say)
            due = now + self.timeout
        elif now - since >= self.timeout:
            self._handle = None
            self._resp.content.set_exception(
                aiohttp.SocketTimeoutError("Timeout on reading data from socket")
            )
            return
        else:
            due = since + self.timeout
        self._handle = self.loop.call_at(due, self._check)

    def stop(self) -> None:
        if self._handle is not None:
            self._handle.cancel()
            self._handle = None
