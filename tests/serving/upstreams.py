"""Scripted upstreams for the tests of real gateway processes stopped mid-request: a stream that
holds its end until released, and JSON answers that hold until released or come at once."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import AsyncIterator

import orjson
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from tests.fakes import message, round_events, text_response


class HeldUpstream:
    """A Responses server. A stream sends its first half of events, then waits for ``release``
    before the rest. A JSON request is answered at once, or, with ``hold_json``, after
    ``release``. ``held`` is set once a request waits; every request is counted."""

    def __init__(self, *, hold_json: bool = False) -> None:
        self.hold_json = hold_json
        self.requests = 0
        self.held = threading.Event()
        self.release = threading.Event()

    async def _wait_release(self) -> None:
        await asyncio.to_thread(self.release.wait, 120)

    def app(self) -> Starlette:
        async def infer(request: Request) -> Response:
            body = await request.json()
            self.requests += 1
            if body.get("stream"):
                return StreamingResponse(self._stream(), media_type="text/event-stream")
            if self.hold_json:
                self.held.set()
                await self._wait_release()
            return JSONResponse(text_response("done"))

        async def health(request: Request) -> Response:
            return Response(status_code=200)

        return Starlette(
            routes=[
                Route("/v1/responses", infer, methods=["POST"]),
                Route("/health", health, methods=["GET"]),
            ]
        )

    async def _stream(self) -> AsyncIterator[bytes]:
        events = round_events([message("hello from a slow stream")])
        half = len(events) // 2
        for index, event in enumerate(events):
            if index == half:
                self.held.set()
                await self._wait_release()
            yield b"event: " + event["type"].encode() + b"\ndata: " + orjson.dumps(event) + b"\n\n"
