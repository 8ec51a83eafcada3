"""Failures after the stream started: an ``error`` event, then ``response.failed``, then [DONE].

The HTTP status is already 200 when these happen, so the stream itself must say what went
wrong, and must still be one valid lifecycle (``tests/lifecycle.assert_lifecycle``).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterator
from typing import Any

import httpx
import openai
import pytest
from starlette.requests import Request
from starlette.responses import Response
from starlette.types import Receive, Scope, Send

from app.core.response import RESPONSE_ERROR_CODES
from app.protocol.json_types import JsonObject
from tests.api.upstreams import (
    MESSAGE_ID,
    UpstreamLog,
    build_upstream,
    event_stream,
    opening_events,
    serve_gateway,
    sse_frame,
    stream_events,
    upstream_response,
)
from tests.helpers import serve_in_thread
from tests.lifecycle import assert_lifecycle

READ_TIMEOUT = 0.5


class CutResponse(Response):
    """An event stream whose connection is dropped after ``chunks``: no terminating chunk."""

    def __init__(self, chunks: list[bytes]) -> None:
        super().__init__(media_type="text/event-stream")
        self.chunks = chunks

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        await send(
            {
                "type": "http.response.start",
                "status": 200,
                "headers": [(b"content-type", b"text/event-stream")],
            }
        )
        for chunk in self.chunks:
            await send({"type": "http.response.body", "body": chunk, "more_body": True})
        # Returning without ``more_body: False`` makes uvicorn close the socket mid-body.


def _frames(events: list[JsonObject]) -> list[bytes]:
    return [sse_frame(event) for event in events]


def _cut_after(count: int) -> Any:
    async def scenario(request: Request, body: JsonObject) -> Response:
        return CutResponse(_frames(opening_events()[:count]))

    return scenario


def _then(*tail: bytes, head: int = 5) -> Any:
    """The first ``head`` opening events, then ``tail`` as it is, then a clean end of body."""

    async def scenario(request: Request, body: JsonObject) -> Response:
        async def chunks() -> AsyncIterator[bytes]:
            for frame in _frames(opening_events()[:head]):
                yield frame
            for frame in tail:
                yield frame

        return event_stream(chunks())

    return scenario


def _stall_after_created(log: UpstreamLog) -> Any:
    async def scenario(request: Request, body: JsonObject) -> Response:
        async def chunks() -> AsyncIterator[bytes]:
            yield sse_frame(opening_events()[0])
            try:
                await asyncio.sleep(30)
            except BaseException:
                log.disconnected.set()
                raise

        return event_stream(chunks())

    return scenario


UPSTREAM_ERROR = sse_frame(
    {
        "type": "error",
        "code": "context_length_exceeded",
        "message": "Your input exceeds the context window of this model.",
        "param": "input",
    }
)
FAILED = upstream_response("failed")
FAILED["error"] = {"code": "server_error", "message": "The model crashed."}
RESPONSE_FAILED = sse_frame({"type": "response.failed", "response": FAILED})


def _scenarios(log: UpstreamLog) -> dict[str, Any]:
    return {
        "cut-0": _cut_after(0),
        "cut-2": _cut_after(2),
        "cut-5": _cut_after(5),
        "eof-5": _then(head=5),
        "error-0": _then(UPSTREAM_ERROR, head=0),
        "error-5": _then(UPSTREAM_ERROR, head=5),
        "bad-json-5": _then(b"event: response.output_text.delta\ndata: {not json\n\n", head=5),
        "not-object-5": _then(b"data: [1, 2]\n\n", head=5),
        "failed-5": _then(RESPONSE_FAILED, head=5),
        "failed-2": _then(RESPONSE_FAILED, head=2),
        "stall": _stall_after_created(log),
    }


@pytest.fixture(scope="module")
def upstream() -> Iterator[tuple[str, UpstreamLog]]:
    log = UpstreamLog()
    app, _ = build_upstream(_scenarios(log), log=log)
    with serve_in_thread(app) as url:
        yield url, log


@pytest.fixture(scope="module")
def gateway(upstream: tuple[str, UpstreamLog]) -> Iterator[str]:
    with serve_gateway(upstream[0], upstream_read_timeout=READ_TIMEOUT) as url:
        yield url


def _stream(gateway: str, model: str) -> list[JsonObject]:
    body = {"model": model, "input": "hi", "stream": True}
    with httpx.Client(timeout=30) as client:
        response = client.post(f"{gateway}/v1/responses", json=body)
    assert response.status_code == 200, response.text
    assert response.headers["content-type"].startswith("text/event-stream")
    return stream_events(response.text)


def assert_failed_stream(events: list[JsonObject], code: str) -> tuple[JsonObject, JsonObject]:
    """One ``error`` event, then ``response.failed`` as the only terminal; returns both."""
    final = assert_lifecycle(events)
    types = [event["type"] for event in events]
    assert types[-2:] == ["error", "response.failed"], types
    assert types.count("error") == 1, types
    error = events[-2]
    assert error["code"] == code, error
    assert isinstance(error["message"], str) and error["message"]
    assert final["status"] == "failed"
    # ``Response.error.code`` takes OpenAI's codes only; the ``error`` event carries any.
    assert final["error"]["code"] == (code if code in RESPONSE_ERROR_CODES else "server_error")
    assert final["error"]["message"] == error["message"]
    assert final["completed_at"] is None
    return error, final


@pytest.mark.parametrize("count", [0, 2, 5])
def test_upstream_connection_cut(gateway: str, count: int) -> None:
    events = _stream(gateway, f"cut-{count}")
    _, final = assert_failed_stream(events, "upstream_protocol_error")
    if count == 5:
        _assert_partial_message(final)
    else:
        assert final["output"] == []


def test_upstream_stream_ends_without_terminal_event(gateway: str) -> None:
    events = _stream(gateway, "eof-5")
    _, final = assert_failed_stream(events, "upstream_protocol_error")
    _assert_partial_message(final)


@pytest.mark.parametrize("head", [0, 5])
def test_upstream_error_event(gateway: str, head: int) -> None:
    events = _stream(gateway, f"error-{head}")
    error, final = assert_failed_stream(events, "context_length_exceeded")
    assert error["message"] == "Your input exceeds the context window of this model."
    if head == 5:
        _assert_partial_message(final)


@pytest.mark.parametrize("model", ["bad-json-5", "not-object-5"])
def test_upstream_sends_a_frame_that_is_not_a_json_object(gateway: str, model: str) -> None:
    events = _stream(gateway, model)
    _, final = assert_failed_stream(events, "upstream_protocol_error")
    _assert_partial_message(final)


@pytest.mark.parametrize("head", [2, 5])
def test_upstream_response_failed(gateway: str, head: int) -> None:
    events = _stream(gateway, f"failed-{head}")
    error, final = assert_failed_stream(events, "server_error")
    assert error["message"] == "The model crashed."
    texts = [part["text"] for item in final["output"] for part in item["content"]]
    assert texts == (["Hel"] if head == 5 else [])


def test_upstream_stalls_mid_stream(gateway: str, upstream: tuple[str, UpstreamLog]) -> None:
    events = _stream(gateway, "stall")
    assert_failed_stream(events, "upstream_timeout")
    # The gateway gave up on the upstream connection rather than leaving it generating.
    assert upstream[1].disconnected.wait(5)


def test_openai_sdk_reads_a_failed_stream(gateway: str) -> None:
    client = openai.OpenAI(base_url=f"{gateway}/v1", api_key="sk-client", max_retries=0)
    with client.responses.create(model="error-5", input="hi", stream=True) as stream:
        events = list(stream)
    assert [e.type for e in events[-2:]] == ["error", "response.failed"]
    error, failed = events[-2:]
    assert error.type == "error" and error.code == "context_length_exceeded"
    assert failed.type == "response.failed"
    assert failed.response.status == "failed"
    assert failed.response.error is not None
    # The SDK types ``Response.error.code`` as OpenAI's own codes: another is server_error
    # there (and carried as it is in the ``error`` event).
    assert failed.response.error.code == "server_error"
    assert [e.sequence_number for e in events] == list(range(len(events)))


def _assert_partial_message(final: JsonObject) -> None:
    """What the upstream streamed before failing is kept, closed as incomplete."""
    (message,) = final["output"]
    assert message["type"] == "message"
    assert message["status"] == "incomplete"
    # The gateway names the items it emits; the upstream's id is not reused.
    assert message["id"].startswith("msg_") and message["id"] != MESSAGE_ID
    assert [part["text"] for part in message["content"]] == ["Hel"]
