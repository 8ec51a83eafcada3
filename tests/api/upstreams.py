"""Small Starlette upstreams that misbehave on purpose, and helpers to read the gateway's SSE.

The upstream is chosen per request by the body's ``model`` field (the gateway forwards the body
unchanged), so one upstream serves every scenario of a test module. Each scenario is a function
``(request, body) -> Response``; ``ScriptedUpstream.log`` records what the gateway sent.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import threading
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse, Response, StreamingResponse
from starlette.routing import Route

from app.main import create_app
from app.protocol.json_types import JsonObject
from app.settings import Settings
from tests.helpers import serve_in_thread

Scenario = Callable[[Request, JsonObject], Awaitable[Response]]

UPSTREAM_RESPONSE_ID = "resp_upstream"
MESSAGE_ID = "msg_upstream"


# ---------------------------------------------------------------------------- recording


@dataclass
class RecordedRequest:
    method: str
    path: str
    headers: dict[str, str]
    body: bytes

    def json(self) -> Any:
        return json.loads(self.body)


@dataclass
class UpstreamLog:
    requests: list[RecordedRequest] = field(default_factory=list)
    # Set by streaming scenarios when the gateway went away before the stream ended.
    disconnected: threading.Event = field(default_factory=threading.Event)
    # Set by streaming scenarios when their generator ran to the end.
    finished: threading.Event = field(default_factory=threading.Event)

    def posts(self) -> list[RecordedRequest]:
        return [r for r in self.requests if r.path == "/v1/responses"]


# ---------------------------------------------------------------------------- wire data


def sse_frame(event: JsonObject) -> bytes:
    return f"event: {event['type']}\ndata: {json.dumps(event)}\n\n".encode()


def upstream_response(status: str = "in_progress", text: str | None = None) -> JsonObject:
    output: list[JsonObject] = []
    if text is not None:
        output.append(
            {
                "type": "message",
                "id": MESSAGE_ID,
                "role": "assistant",
                "status": "completed",
                "content": [{"type": "output_text", "text": text, "annotations": []}],
            }
        )
    return {
        "id": UPSTREAM_RESPONSE_ID,
        "object": "response",
        "created_at": 1700000000,
        "status": status,
        "model": "test-model",
        "output": output,
        "usage": None,
    }


def opening_events(first_delta: str = "Hel") -> list[JsonObject]:
    """An upstream stream up to the first text delta of an open message."""
    return [
        {"type": "response.created", "response": upstream_response()},
        {"type": "response.in_progress", "response": upstream_response()},
        {
            "type": "response.output_item.added",
            "output_index": 0,
            "item": {
                "type": "message",
                "id": MESSAGE_ID,
                "role": "assistant",
                "status": "in_progress",
                "content": [],
            },
        },
        {
            "type": "response.content_part.added",
            "item_id": MESSAGE_ID,
            "output_index": 0,
            "content_index": 0,
            "part": {"type": "output_text", "text": "", "annotations": []},
        },
        text_delta(first_delta),
    ]


def text_delta(delta: str) -> JsonObject:
    return {
        "type": "response.output_text.delta",
        "item_id": MESSAGE_ID,
        "output_index": 0,
        "content_index": 0,
        "delta": delta,
    }


def closing_events(text: str) -> list[JsonObject]:
    part = {"type": "output_text", "text": text, "annotations": []}
    done = upstream_response("completed", text)
    done["usage"] = {"input_tokens": 3, "output_tokens": 2, "total_tokens": 5}
    return [
        {
            "type": "response.output_text.done",
            "item_id": MESSAGE_ID,
            "output_index": 0,
            "content_index": 0,
            "text": text,
        },
        {
            "type": "response.content_part.done",
            "item_id": MESSAGE_ID,
            "output_index": 0,
            "content_index": 0,
            "part": part,
        },
        {"type": "response.output_item.done", "output_index": 0, "item": done["output"][0]},
        {"type": "response.completed", "response": done},
    ]


def completed_response(text: str = "Hello") -> JsonObject:
    body = upstream_response("completed", text)
    body["usage"] = {"input_tokens": 3, "output_tokens": 2, "total_tokens": 5}
    return body


# ---------------------------------------------------------------------------- scenarios


def event_stream(chunks: AsyncIterator[bytes]) -> StreamingResponse:
    return StreamingResponse(chunks, media_type="text/event-stream")


async def ok(request: Request, body: JsonObject) -> Response:
    """A well-behaved upstream: a JSON Response, or a complete event stream."""
    if not body.get("stream"):
        return JSONResponse(completed_response())

    async def chunks() -> AsyncIterator[bytes]:
        for event in [*opening_events("Hel"), text_delta("lo"), *closing_events("Hello")]:
            yield sse_frame(event)
        yield b"data: [DONE]\n\n"

    return event_stream(chunks())


async def stall_until_disconnected(request: Request, seconds: float = 10.0) -> None:
    """Wait (answering nothing) until the client goes away or ``seconds`` pass."""
    for _ in range(int(seconds / 0.02)):
        if await request.is_disconnected():
            return
        await asyncio.sleep(0.02)


def build_upstream(
    scenarios: dict[str, Scenario],
    *,
    health_status: int = 200,
    log: UpstreamLog | None = None,
) -> tuple[Starlette, UpstreamLog]:
    """A Starlette upstream serving ``/v1/responses`` (by scenario), ``/v1/models``, ``/health``.

    The scenario is the request's ``model``; an unknown model gets ``ok``. Requests are recorded
    in ``log`` (a new one unless given: scenarios that report to a log pass theirs).
    """
    log = log if log is not None else UpstreamLog()

    async def record(request: Request) -> bytes:
        raw = await request.body()
        log.requests.append(
            RecordedRequest(request.method, request.url.path, dict(request.headers), raw)
        )
        return raw

    async def responses(request: Request) -> Response:
        body = json.loads(await record(request))
        scenario = scenarios.get(str(body.get("model")), ok)
        return await scenario(request, body)

    async def models(request: Request) -> Response:
        await record(request)
        if request.headers.get("authorization") == "Bearer sk-denied":
            return JSONResponse(
                {
                    "error": {
                        "message": "Incorrect API key provided",
                        "type": "invalid_request_error",
                        "param": None,
                        "code": "invalid_api_key",
                    }
                },
                status_code=401,
            )
        return JSONResponse({"object": "list", "data": [{"id": "test-model", "object": "model"}]})

    async def health(request: Request) -> Response:
        await record(request)
        return PlainTextResponse("ok" if health_status < 400 else "down", status_code=health_status)

    app = Starlette(
        routes=[
            Route("/v1/responses", responses, methods=["POST"]),
            Route("/v1/models", models, methods=["GET"]),
            Route("/health", health, methods=["GET"]),
        ]
    )
    return app, log


# ---------------------------------------------------------------------------- gateway


@contextlib.contextmanager
def serve_gateway(upstream_url: str, **settings: Any) -> Iterator[str]:
    """The gateway in front of ``upstream_url``, on a real port; yields its base URL."""
    app = create_app(Settings(upstream_url=upstream_url, **settings))
    with serve_in_thread(app) as url:
        yield url


class BackgroundServer:
    """``serve_in_thread`` entered from a thread of its own, so that it can start later."""

    def __init__(self, app: Any, port: int) -> None:
        self._app = app
        self._port = port
        self._stop = threading.Event()
        self.started = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        with serve_in_thread(self._app, self._port):
            self.started.set()
            self._stop.wait()

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread.ident is not None:
            self._thread.join(timeout=15)


# ---------------------------------------------------------------------------- client side


@dataclass
class SseFrame:
    event: str | None
    data: str


def parse_sse(text: str) -> list[SseFrame]:
    """Split an SSE body into frames (comments such as pings are dropped)."""
    frames: list[SseFrame] = []
    for block in text.replace("\r\n", "\n").split("\n\n"):
        event: str | None = None
        data: list[str] = []
        for line in block.split("\n"):
            if line.startswith("event:"):
                event = line[len("event:") :].strip()
            elif line.startswith("data:"):
                data.append(line[len("data:") :].removeprefix(" "))
        if data:
            frames.append(SseFrame(event, "\n".join(data)))
    return frames


def stream_events(text: str) -> list[JsonObject]:
    """The events of a complete gateway stream; checks the framing and the final ``[DONE]``."""
    frames = parse_sse(text)
    assert frames, "empty stream"
    assert frames[-1] == SseFrame(None, "[DONE]"), frames[-1]
    events: list[JsonObject] = []
    for frame in frames[:-1]:
        event = json.loads(frame.data)
        assert frame.event == event["type"], (frame.event, event["type"])
        events.append(event)
    return events
