"""The one stream class every upstream kind answers with: a streaming aiohttp response read as
SSE events (``sse``), passed through the kind's translation step, with transport failures mapped
onto the gateway's errors (``app.net.http``) and the connection released at the end or on
``aclose`` (dropping it when the body was not read out, which stops the upstream generating).

The translation step is an ``EventTranslator``. The responses kind has none: its events are
Responses events already and pass as they are parsed, ``[DONE]`` included (the core reads it).
The chat kind's is ``chat_stream.ChatStreamTranslator``: chat-completion chunks in, Responses
events out. Both run in the one generator below, so neither pays an extra async-generator hop
per event (this is the hot path; bench/README.md).
"""

from __future__ import annotations

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
        try:
            while True:
                chunk = await read()
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
            await self.aclose()

    async def aclose(self) -> None:
        release(self._resp)
