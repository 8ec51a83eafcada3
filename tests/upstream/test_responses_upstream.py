"""``ResponsesUpstream`` in front of servers that have no ``/v1/responses``: the error says to
use the chat kind, and the gateway's log says so once; other 404s pass through unchanged."""

from __future__ import annotations

import logging
from collections.abc import Iterator

import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from app.errors import UpstreamHTTPError
from app.upstream.responses import NoResponsesApiError, ResponsesUpstream
from tests.helpers import serve_in_thread


async def _chat_only(request: Request) -> Response:
    return JSONResponse({"object": "chat.completion", "choices": []})


async def _model_not_found(request: Request) -> Response:
    error = {"message": "The model `nope` does not exist.", "type": "invalid_request_error"}
    return JSONResponse({"error": {**error, "param": "model", "code": "model_not_found"}}, 404)


@pytest.fixture(scope="module")
def chat_only_server() -> Iterator[str]:
    """Like Ollama or llama.cpp: ``/v1/chat/completions`` only (Starlette's own 404 else)."""
    app = Starlette(routes=[Route("/v1/chat/completions", _chat_only, methods=["POST"])])
    with serve_in_thread(app) as url:
        yield url


@pytest.fixture(scope="module")
def strict_server() -> Iterator[str]:
    app = Starlette(routes=[Route("/v1/responses", _model_not_found, methods=["POST"])])
    with serve_in_thread(app) as url:
        yield url


async def test_a_chat_only_server_is_explained_and_logged_once(
    chat_only_server: str, caplog: pytest.LogCaptureFixture
) -> None:
    upstream = ResponsesUpstream(chat_only_server)
    caplog.set_level(logging.ERROR, logger="app.upstream.responses")
    try:
        for _ in range(2):
            with pytest.raises(NoResponsesApiError) as json_error:
                await upstream.create_response({"model": "m", "input": "hi"}, {})
            with pytest.raises(NoResponsesApiError):
                await upstream.stream_response({"model": "m", "input": "hi", "stream": True}, {})
    finally:
        await upstream.aclose()
    assert json_error.value.status_code == 502
    assert json_error.value.to_error()["code"] == "upstream_has_no_responses_api"
    assert "--upstream-kind chat" in json_error.value.message
    told = [r.getMessage() for r in caplog.records if "--upstream-kind chat" in r.getMessage()]
    assert len(told) == 1
    assert chat_only_server in told[0]


async def test_a_404_about_a_model_is_forwarded_as_it_is(strict_server: str) -> None:
    upstream = ResponsesUpstream(strict_server)
    try:
        with pytest.raises(UpstreamHTTPError) as caught:
            await upstream.create_response({"model": "nope", "input": "hi"}, {})
    finally:
        await upstream.aclose()
    assert not isinstance(caught.value, NoResponsesApiError)
    assert caught.value.status_code == 404
    assert caught.value.to_error()["code"] == "model_not_found"
