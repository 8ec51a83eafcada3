"""Upstream retries and the circuit breaker, end to end: the ``openai`` SDK against the gateway
against a real HTTP upstream that fails as scripted (``app.upstream.retry``,
``app.upstream.breaker``). The SDK's own retries are off unless a test says otherwise, so every
retry counted is the gateway's."""

from __future__ import annotations

import contextlib
import logging
import socket
import threading
from collections.abc import Iterator
from typing import Any

import httpx
import openai
import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from app.main import create_app
from app.protocol.json_types import JsonObject
from app.settings import Settings
from app.upstream.breaker import CircuitBreaker
from app.upstream.responses import ResponsesUpstream
from app.upstream.retry import RetryPolicy, UpstreamGuard
from app.upstream.router import UpstreamRoute, UpstreamRouter
from tests.api.test_stream_failures import CutResponse
from tests.api.upstreams import (
    UpstreamLog,
    build_upstream,
    ok,
    opening_events,
    serve_gateway,
    sse_frame,
)
from tests.helpers import free_port, in_process, openai_client, serve_in_thread
from tests.lifecycle import assert_lifecycle

# Tiny backoffs keep the tests quick; what they check is how many attempts were made.
FAST = {"upstream_retry_backoff_seconds": 0.01}
OVERLOADED = {"error": {"message": "Server overloaded", "type": "server_error", "code": None}}
COMPLETION = {
    "id": "chatcmpl-1",
    "object": "chat.completion",
    "created": 1,
    "model": "m",
    "choices": [
        {"index": 0, "message": {"role": "assistant", "content": "Hi"}, "finish_reason": "stop"}
    ],
    "usage": {"prompt_tokens": 3, "completion_tokens": 1, "total_tokens": 4},
}


def _failing_first(times: int, status: int, **headers: str) -> Any:
    """Answers ``status`` to the first ``times`` requests of its model, then as ``ok``."""
    seen: list[int] = []

    async def scenario(request: Request, body: JsonObject) -> Response:
        seen.append(1)
        if len(seen) <= times:
            return JSONResponse(OVERLOADED, status_code=status, headers=headers)
        return await ok(request, body)

    return scenario


async def _cut_after_first_event(request: Request, body: JsonObject) -> Response:
    """A stream that began (its first event sent) and then broke."""
    return CutResponse([sse_frame(opening_events()[0])])


def _posts(log: UpstreamLog, model: str) -> int:
    return sum(1 for r in log.posts() if r.json().get("model") == model)


@pytest.fixture(scope="module")
def upstream() -> Iterator[tuple[str, UpstreamLog]]:
    log = UpstreamLog()
    scenarios = {
        "twice-503-json": _failing_first(2, 503),
        "twice-503-stream": _failing_first(2, 503),
        "twice-502-retry-after": _failing_first(2, 502, **{"retry-after": "0"}),
        "always-503": _failing_first(1000, 503),
        "long-retry-after": _failing_first(1000, 503, **{"retry-after": "3600"}),
        "once-504": _failing_first(1, 504),
        "once-400": _failing_first(1, 400),
        "cut": _cut_after_first_event,
    }
    app, _ = build_upstream(scenarios, log=log)
    with serve_in_thread(app) as url:
        yield url, log


@pytest.fixture(scope="module")
def gateway(upstream: tuple[str, UpstreamLog]) -> Iterator[str]:
    # No circuit breaker here: the failing scenarios would open it for the others.
    with serve_gateway(upstream[0], upstream_breaker_threshold=0, **FAST) as url:
        yield url


def _client(gateway: str, retries: int = 0) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{gateway}/v1", api_key="sk-client", max_retries=retries)


def test_503_twice_then_an_answer_is_one_successful_call(
    gateway: str, upstream: tuple[str, UpstreamLog]
) -> None:
    response = _client(gateway).responses.create(model="twice-503-json", input="hi")
    assert response.status == "completed"
    assert response.output_text == "Hello"
    assert _posts(upstream[1], "twice-503-json") == 3


def test_a_stream_is_retried_before_it_starts(
    gateway: str, upstream: tuple[str, UpstreamLog]
) -> None:
    with _client(gateway).responses.stream(model="twice-503-stream", input="hi") as stream:
        final = stream.get_final_response()
    assert final.status == "completed"
    assert final.output_text == "Hello"
    assert _posts(upstream[1], "twice-503-stream") == 3


def test_502_with_retry_after_is_retried(gateway: str, upstream: tuple[str, UpstreamLog]) -> None:
    response = _client(gateway).responses.create(model="twice-502-retry-after", input="hi")
    assert response.status == "completed"
    assert _posts(upstream[1], "twice-502-retry-after") == 3


def test_retries_are_bounded_and_the_sdk_is_told_not_to_add_its_own(
    gateway: str, upstream: tuple[str, UpstreamLog]
) -> None:
    requests: list[httpx.Request] = []
    http = httpx.Client(event_hooks={"request": [requests.append]})
    client = openai.OpenAI(
        base_url=f"{gateway}/v1", api_key="sk-client", max_retries=2, http_client=http
    )
    with pytest.raises(openai.InternalServerError) as failed:
        client.responses.create(model="always-503", input="hi")
    assert failed.value.status_code == 503
    assert "Server overloaded" in failed.value.message
    assert failed.value.response.headers["x-should-retry"] == "false"
    assert _posts(upstream[1], "always-503") == 3  # the first attempt and two retries
    assert len(requests) == 1  # and the SDK, allowed two retries, made none


def test_a_retry_after_beyond_the_cap_is_not_waited_for(
    gateway: str, upstream: tuple[str, UpstreamLog]
) -> None:
    with pytest.raises(openai.InternalServerError) as failed:
        _client(gateway).responses.create(model="long-retry-after", input="hi")
    assert failed.value.status_code == 503
    assert _posts(upstream[1], "long-retry-after") == 1


@pytest.mark.parametrize(("model", "status"), [("once-504", 504), ("once-400", 400)])
def test_504_and_4xx_are_not_retried(
    gateway: str, upstream: tuple[str, UpstreamLog], model: str, status: int
) -> None:
    with pytest.raises(openai.APIStatusError) as failed:
        _client(gateway).responses.create(model=model, input="hi")
    assert failed.value.status_code == status
    assert "x-should-retry" not in failed.value.response.headers
    assert _posts(upstream[1], model) == 1


def test_a_stream_that_began_is_never_replayed(
    gateway: str, upstream: tuple[str, UpstreamLog]
) -> None:
    with _client(gateway).responses.create(model="cut", input="hi", stream=True) as stream:
        events = [event.model_dump(mode="json") for event in stream]
    final = assert_lifecycle(events)
    types = [event["type"] for event in events]
    assert types[-2:] == ["error", "response.failed"], types
    assert events[-2]["code"] == "upstream_protocol_error"
    assert final["status"] == "failed"
    assert _posts(upstream[1], "cut") == 1


# ---------------------------------------------------------------------------- no server


def test_connection_refused_is_retried_then_502(caplog: pytest.LogCaptureFixture) -> None:
    dead = f"http://127.0.0.1:{free_port()}"
    with (
        caplog.at_level(logging.INFO, logger="app.upstream.retry"),
        serve_gateway(dead, upstream_breaker_threshold=0, **FAST) as gateway,
        pytest.raises(openai.InternalServerError) as failed,
    ):
        _client(gateway, retries=2).responses.create(model="m", input="hi")
    assert failed.value.status_code == 502
    assert failed.value.code == "upstream_unreachable"
    assert failed.value.response.headers["x-should-retry"] == "false"
    retries = [r.getMessage() for r in caplog.records if r.name == "app.upstream.retry"]
    assert len(retries) == 2, retries
    assert all("connection failed" in line for line in retries)


@contextlib.contextmanager
def closing_server() -> Iterator[tuple[str, list[int]]]:
    """A TCP server that accepts each connection and closes it without a word (a server that
    went away with the request sent); yields its URL and a count of connections."""
    accepted: list[int] = []
    listener = socket.create_server(("127.0.0.1", 0))
    stop = threading.Event()

    def serve() -> None:
        listener.settimeout(0.05)
        while not stop.is_set():
            try:
                conn, _ = listener.accept()
            except TimeoutError:
                continue
            accepted.append(1)
            conn.recv(65536)
            conn.close()

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{listener.getsockname()[1]}", accepted
    finally:
        stop.set()
        thread.join(5)
        listener.close()


def test_a_connection_closed_before_any_response_is_retried() -> None:
    with (
        closing_server() as (url, accepted),
        serve_gateway(url, upstream_breaker_threshold=0, **FAST) as gateway,
        pytest.raises(openai.InternalServerError) as failed,
    ):
        _client(gateway).responses.create(model="m", input="hi")
    assert failed.value.status_code == 502
    assert len(accepted) == 3


# ---------------------------------------------------------------------------- circuit breaker


class FakeClock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


class Switchable:
    """An upstream that answers 503 until ``healthy`` is set; counts the requests it gets."""

    def __init__(self) -> None:
        self.healthy = False
        self.log = UpstreamLog()

    async def scenario(self, request: Request, body: JsonObject) -> Response:
        if self.healthy:
            return await ok(request, body)
        return JSONResponse(OVERLOADED, status_code=503)


def test_the_circuit_opens_fails_fast_shows_on_ready_and_closes_after_the_cooldown() -> None:
    clock = FakeClock()
    server = Switchable()
    app, log = build_upstream({"m": server.scenario}, log=server.log)
    with serve_in_thread(app) as url:
        breaker = CircuitBreaker("flaky", threshold=2, cooldown=30.0, clock=clock)
        guard = UpstreamGuard(RetryPolicy(retries=0), breaker)
        router = UpstreamRouter([UpstreamRoute("flaky", ResponsesUpstream(url, guard=guard), url)])
        settings = Settings(upstreams=[{"name": "flaky", "url": url}])
        with in_process(create_app(settings, upstream=router)) as http:
            client = openai_client(http)
            assert http.get("/ready").json()["circuits"] == {"flaky": "closed"}
            for _ in range(2):  # two failures in a row: the upstream's own 503s
                with pytest.raises(openai.InternalServerError) as forwarded:
                    client.responses.create(model="m", input="hi")
                assert "Server overloaded" in forwarded.value.message
            assert len(log.posts()) == 2

            with pytest.raises(openai.InternalServerError) as fast:
                client.responses.create(model="m", input="hi", stream=True)
            assert len(log.posts()) == 2  # failed fast: the upstream saw nothing
            assert fast.value.status_code == 503
            assert fast.value.code == "upstream_unavailable"
            assert "'flaky'" in fast.value.message
            assert fast.value.response.headers["retry-after"] == "30"

            ready = http.get("/ready")
            assert ready.status_code == 503
            assert "flaky" in ready.json()["error"]["message"]

            clock.now += 30  # the cool-down passes; the upstream is back
            server.healthy = True
            assert http.get("/ready").json()["circuits"] == {"flaky": "half_open"}
            response = client.responses.create(model="m", input="hi")
            assert response.status == "completed"
            assert len(log.posts()) == 3
            ready = http.get("/ready")
            assert ready.status_code == 200
            assert ready.json()["circuits"] == {"flaky": "closed"}


def test_a_chat_upstream_and_the_chat_passthrough_are_retried_too() -> None:
    """Kind "chat" (translated) and ``POST /v1/chat/completions`` (forwarded as it came)."""
    posts: list[int] = []

    async def chat(request: Request) -> Response:
        posts.append(1)
        if len(posts) % 3 != 0:  # 503 twice, then an answer, for every call
            return JSONResponse(OVERLOADED, status_code=503)
        return JSONResponse(COMPLETION)

    app = Starlette(routes=[Route("/v1/chat/completions", chat, methods=["POST"])])
    with (
        serve_in_thread(app) as url,
        serve_gateway(url, upstream_kind="chat", upstream_breaker_threshold=0, **FAST) as gateway,
    ):
        client = _client(gateway)
        assert client.responses.create(model="m", input="hi").output_text == "Hi"
        assert len(posts) == 3
        completion = client.chat.completions.create(
            model="m", messages=[{"role": "user", "content": "hi"}]
        )
        assert completion.choices[0].message.content == "Hi"
        assert len(posts) == 6
