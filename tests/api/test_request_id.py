"""Request ids (``app.api.request_id``): every answer carries ``x-request-id`` (JSON, SSE, a
404, a 400, a 401, a 500, a WebSocket's handshake), the client's own when it is sane, else a new
``req_…``; the same id goes to the upstream (``/v1/responses`` JSON and SSE, the chat
passthrough, the Messages front end, WebSocket mode) and is on the log lines of the request.
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route
from starlette.testclient import TestClient

from app.main import create_app
from app.settings import Settings
from tests.api.upstreams import closing_events, completed_response, opening_events, sse_frame
from tests.helpers import in_process, serve_in_thread

GENERATED = re.compile(r"req_[0-9a-f]{32}")
BODY = {"model": "m", "input": "hi"}


class RecordingUpstream:
    """An inference server noting the ``x-request-id`` of every request, by path."""

    def __init__(self) -> None:
        self.seen: list[tuple[str, str | None]] = []

    def app(self) -> Starlette:
        async def responses(request: Request) -> Response:
            self.seen.append((request.url.path, request.headers.get("x-request-id")))
            body = json.loads(await request.body())
            if not body.get("stream"):
                return JSONResponse(completed_response("hello"))

            async def events() -> AsyncIterator[bytes]:
                for event in [*opening_events("hello"), *closing_events("hello")]:
                    yield sse_frame(event)

            return StreamingResponse(events(), media_type="text/event-stream")

        async def chat(request: Request) -> Response:
            self.seen.append((request.url.path, request.headers.get("x-request-id")))
            message = {"role": "assistant", "content": "hello"}
            choice = {"index": 0, "message": message, "finish_reason": "stop"}
            return JSONResponse(
                {"id": "c", "object": "chat.completion", "created": 1, "choices": [choice]}
            )

        async def health(request: Request) -> Response:
            return JSONResponse({})

        return Starlette(
            routes=[
                Route("/v1/responses", responses, methods=["POST"]),
                Route("/v1/chat/completions", chat, methods=["POST"]),
                Route("/health", health, methods=["GET"]),
            ]
        )


@pytest.fixture
def gateway(tmp_path: Path) -> Iterator[tuple[TestClient, RecordingUpstream]]:
    upstream = RecordingUpstream()
    with serve_in_thread(upstream.app()) as url:
        settings = Settings(data_dir=tmp_path / "data", upstream_url=url)
        with in_process(create_app(settings)) as http:
            yield http, upstream


def test_a_json_answer_carries_a_new_id_which_the_upstream_got(
    gateway: tuple[TestClient, RecordingUpstream],
) -> None:
    http, upstream = gateway
    reply = http.post("/v1/responses", json=BODY)
    assert reply.status_code == 200
    request_id = reply.headers["x-request-id"]
    assert GENERATED.fullmatch(request_id)
    assert upstream.seen == [("/v1/responses", request_id)]
    again = http.post("/v1/responses", json=BODY).headers["x-request-id"]
    assert again != request_id


def test_the_clients_id_is_returned_and_sent_upstream(
    gateway: tuple[TestClient, RecordingUpstream],
) -> None:
    http, upstream = gateway
    reply = http.post("/v1/responses", json=BODY, headers={"x-request-id": "client-1.a:b/c=+"})
    assert reply.headers["x-request-id"] == "client-1.a:b/c=+"
    assert upstream.seen == [("/v1/responses", "client-1.a:b/c=+")]


@pytest.mark.parametrize("sent", ["x" * 129, "has space", "semi;colon", "ünï", ""])
def test_an_insane_client_id_is_replaced(
    gateway: tuple[TestClient, RecordingUpstream], sent: str
) -> None:
    http, upstream = gateway
    reply = http.post("/v1/responses", json=BODY, headers=[(b"x-request-id", sent.encode())])
    assert reply.status_code == 200
    request_id = reply.headers["x-request-id"]
    assert GENERATED.fullmatch(request_id)
    assert upstream.seen == [("/v1/responses", request_id)]


def test_a_stream_carries_the_id(gateway: tuple[TestClient, RecordingUpstream]) -> None:
    http, upstream = gateway
    with http.stream("POST", "/v1/responses", json={**BODY, "stream": True}) as reply:
        assert reply.headers["content-type"].startswith("text/event-stream")
        request_id = reply.headers["x-request-id"]
        text = "".join(reply.iter_text())
    assert "response.completed" in text
    assert GENERATED.fullmatch(request_id)
    assert upstream.seen == [("/v1/responses", request_id)]


def test_the_chat_passthrough_and_messages_send_the_id(
    gateway: tuple[TestClient, RecordingUpstream],
) -> None:
    http, upstream = gateway
    chat = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}
    reply = http.post("/v1/chat/completions", json=chat, headers={"x-request-id": "chat-1"})
    assert reply.status_code == 200
    assert reply.headers["x-request-id"] == "chat-1"
    message = {"model": "m", "max_tokens": 8, "messages": [{"role": "user", "content": "hi"}]}
    reply = http.post("/v1/messages", json=message, headers={"x-request-id": "msg-1"})
    assert reply.status_code == 200, reply.text
    assert reply.headers["x-request-id"] == "msg-1"
    assert upstream.seen == [("/v1/chat/completions", "chat-1"), ("/v1/responses", "msg-1")]


@pytest.mark.parametrize(
    ("method", "path", "body", "status"),
    [
        ("GET", "/v1/nothing-here", None, 404),
        ("GET", "/v1/responses/resp_unknown", None, 404),
        ("POST", "/v1/responses", {"model": "m", "input": 3}, 400),
        ("POST", "/v1/responses", {"model": "m", "input": "hi", "temperature": "hot"}, 400),
    ],
)
def test_errors_carry_the_id_and_their_log_line_too(
    gateway: tuple[TestClient, RecordingUpstream],
    caplog: pytest.LogCaptureFixture,
    method: str,
    path: str,
    body: Any,
    status: int,
) -> None:
    http, upstream = gateway
    with caplog.at_level(logging.INFO, logger="app.api.errors"):
        reply = http.request(method, path, json=body)
    assert reply.status_code == status
    assert "error" in reply.json()
    request_id = reply.headers["x-request-id"]
    assert GENERATED.fullmatch(request_id)
    lines = [r for r in caplog.records if r.name == "app.api.errors"]
    assert [getattr(r, "request_id", None) for r in lines] == [request_id]
    assert upstream.seen == []


def test_a_refused_key_and_an_unexpected_error_carry_the_id(tmp_path: Path) -> None:
    settings = Settings(data_dir=tmp_path / "data", auth={"mode": "on"})
    app = create_app(settings)

    @app.get("/v1/boom")
    async def boom() -> None:
        raise RuntimeError("a bug")

    with in_process(app) as http:
        refused = http.get("/v1/responses/resp_1", headers={"x-request-id": "who-1"})
        assert refused.status_code == 401
        assert refused.headers["x-request-id"] == "who-1"
    off = Settings(data_dir=tmp_path / "data2")
    app = create_app(off)
    app.add_api_route("/v1/boom", boom)
    with in_process(app) as http:
        failed = http.get("/v1/boom", headers={"x-request-id": "bug-1"})
        assert failed.status_code == 500
        assert failed.json()["error"]["message"] == (
            "The server had an error while processing your request."
        )
        assert failed.headers["x-request-id"] == "bug-1"


def test_a_websocket_handshake_carries_the_id_and_its_turns_send_it(
    gateway: tuple[TestClient, RecordingUpstream],
) -> None:
    http, upstream = gateway
    with http.websocket_connect("/v1/responses", headers={"x-request-id": "ws-1"}) as socket:
        assert (b"x-request-id", b"ws-1") in (socket.extra_headers or [])
        socket.send_json({"type": "response.create", **BODY})
        while socket.receive_json()["type"] != "response.completed":
            pass
    assert upstream.seen == [("/v1/responses", "ws-1")]
