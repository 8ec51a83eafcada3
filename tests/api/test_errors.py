"""Errors before the first byte: every one is an HTTP 4xx/5xx in OpenAI's error envelope.

The gateway runs on a real port in front of a Starlette upstream that misbehaves on purpose
(``tests/api/upstreams.py``); clients are ``httpx`` and, once, the official ``openai`` SDK.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import Any

import httpx
import openai
import pytest
from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from app.api.body import format_loc
from app.protocol.json_types import JsonObject
from app.upstream.responses import NO_RESPONSES_API_HINT
from tests.api.upstreams import (
    BackgroundServer,
    UpstreamLog,
    build_upstream,
    serve_gateway,
    stall_until_disconnected,
)
from tests.helpers import free_port, serve_in_thread

READ_TIMEOUT = 0.5
MAX_BODY = 4096

OPENAI_ERROR: JsonObject = {
    "error": {
        "message": "The model `nope` does not exist or you do not have access to it.",
        "type": "invalid_request_error",
        "param": "model",
        "code": "model_not_found",
    }
}
VLLM_ERROR: JsonObject = {
    "object": "error",
    "message": "This model's maximum context length is 4096 tokens.",
    "type": "BadRequestError",
    "param": None,
    "code": 400,
}


def assert_envelope(response: httpx.Response, status: int) -> JsonObject:
    """The response is ``status`` with exactly OpenAI's error envelope; returns ``error``."""
    assert response.status_code == status, response.text
    assert response.headers["content-type"].startswith("application/json")
    body = response.json()
    assert set(body) == {"error"}, body
    error: JsonObject = body["error"]
    assert set(error) == {"message", "type", "param", "code"}, error
    assert isinstance(error["message"], str) and error["message"]
    assert isinstance(error["type"], str) and error["type"]
    return error


# ---------------------------------------------------------------------------- upstream


def _json_error(status: int, body: JsonObject) -> Any:
    async def scenario(request: Request, _: JsonObject) -> Response:
        return JSONResponse(body, status_code=status)

    return scenario


async def _text_404(request: Request, body: JsonObject) -> Response:
    """What Ollama (Go's net/http) answers on a path it has no route for."""
    return Response("404 page not found", status_code=404, media_type="text/plain")


async def _plain_500(request: Request, body: JsonObject) -> Response:
    return Response("Internal Server Error", status_code=500, media_type="text/plain")


async def _empty_502(request: Request, body: JsonObject) -> Response:
    return Response(b"", status_code=502)


async def _garbage_200(request: Request, body: JsonObject) -> Response:
    return Response("<html>proxy says hi</html>", status_code=200, media_type="text/html")


async def _slow_headers(request: Request, body: JsonObject) -> Response:
    """Answers nothing at all (no status line) until the gateway gives up."""
    await stall_until_disconnected(request)
    return JSONResponse({})


SCENARIOS = {
    "openai-400": _json_error(400, OPENAI_ERROR),
    "openai-404": _json_error(404, OPENAI_ERROR),
    "openai-partial-429": _json_error(429, {"error": {"message": "Rate limit reached"}}),
    "vllm-400": _json_error(400, VLLM_ERROR),
    "text-error-503": _json_error(503, {"error": "model is loading"}),
    "detail-404": _json_error(404, {"detail": "Not Found"}),
    "vllm-model-404": _json_error(
        404,
        {
            "object": "error",
            "message": "The model `nope` does not exist.",
            "type": "NotFoundError",
            "param": None,
            "code": 404,
        },
    ),
    "ollama-404": _text_404,
    "llamacpp-404": _json_error(
        404, {"error": {"code": 404, "message": "File Not Found", "type": "not_found_error"}}
    ),
    "plain-500": _plain_500,
    "empty-502": _empty_502,
    "slow": _slow_headers,
    "garbage-200": _garbage_200,
}


@pytest.fixture(scope="module")
def upstream() -> Iterator[tuple[str, UpstreamLog]]:
    app, log = build_upstream(SCENARIOS)
    with serve_in_thread(app) as url:
        yield url, log


@pytest.fixture(scope="module")
def gateway(upstream: tuple[str, UpstreamLog]) -> Iterator[str]:
    with serve_gateway(
        upstream[0],
        upstream_read_timeout=READ_TIMEOUT,
        max_body_bytes=MAX_BODY,
        upstream_api_key="sk-test",
        # The client's own key goes upstream only when the upstream is configured so
        # (tests/api/test_auth_upstream.py: by default the configured key always goes).
        upstream_forward_client_key=True,
    ) as url:
        yield url


@pytest.fixture(scope="module")
def dead_gateway() -> Iterator[str]:
    """A gateway whose upstream port has nobody listening."""
    with serve_gateway(f"http://127.0.0.1:{free_port()}") as url:
        yield url


@pytest.fixture
def client(gateway: str) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=gateway, timeout=30) as c:
        yield c


@pytest.fixture
def log(upstream: tuple[str, UpstreamLog]) -> UpstreamLog:
    upstream[1].requests.clear()
    return upstream[1]


# ---------------------------------------------------------------------------- request bodies


def test_malformed_json_is_400_invalid_json(client: httpx.Client, log: UpstreamLog) -> None:
    response = client.post(
        "/v1/responses",
        content=b'{"model": "m", "input": ',
        headers={"content-type": "application/json"},
    )
    error = assert_envelope(response, 400)
    assert error["type"] == "invalid_request_error"
    assert error["code"] == "invalid_json"
    assert error["param"] is None
    assert log.posts() == []


@pytest.mark.parametrize("raw", [b"[]", b'"hello"', b"null", b"42", b""])
def test_body_that_is_not_an_object_is_400(
    client: httpx.Client, log: UpstreamLog, raw: bytes
) -> None:
    response = client.post(
        "/v1/responses", content=raw, headers={"content-type": "application/json"}
    )
    error = assert_envelope(response, 400)
    assert error["type"] == "invalid_request_error"
    assert log.posts() == []


@pytest.mark.parametrize(
    ("fields", "param"),
    [
        ({"temperature": "hot"}, "temperature"),
        ({"temperature": 3}, "temperature"),
        ({"max_output_tokens": 0}, "max_output_tokens"),
        ({"tools": [{}]}, "tools[0]"),
        ({"tools": [{"type": "function", "name": "f"}, {"type": "function"}]}, "tools[1]"),
        ({"tools": "all"}, "tools"),
        ({"input": [{}]}, "input[0]"),
        ({"input": [{"role": "user", "content": "hi"}, 7]}, "input[1]"),
        ({"input": 5}, "input"),
        ({"stream": "maybe"}, "stream"),
        ({"store": "yes"}, "store"),
        ({"tool_choice": "bogus"}, "tool_choice"),
        ({"metadata": {"a": 1}}, "metadata.a"),
        ({"conversation": {"name": "x"}}, "conversation.id"),
        ({"include": [1]}, "include[0]"),
    ],
)
@pytest.mark.parametrize("stream", [False, True])
def test_invalid_field_is_400_naming_it(
    client: httpx.Client, log: UpstreamLog, fields: JsonObject, param: str, stream: bool
) -> None:
    body = {"model": "ok", "input": "hi", "stream": stream, **fields}
    error = assert_envelope(client.post("/v1/responses", json=body), 400)
    assert error["type"] == "invalid_request_error"
    assert error["param"] == param
    assert error["code"] in ("invalid_value", "missing_required_parameter")
    assert f"'{param}'" in error["message"]
    assert log.posts() == []


@pytest.mark.parametrize(
    ("loc", "expected"),
    [
        (("temperature",), "temperature"),
        (("input", 0, "content"), "input[0].content"),
        (("input", "list[dict[str,any]]", 2), "input[2]"),
        (("tool_choice", "literal['none','auto','required']"), "tool_choice"),
        (("conversation", "ConversationRef", "id"), "conversation.id"),
        (("stream",), "stream"),
        (("store",), "store"),
        (("stream_options", "str"), "stream_options"),
        ((), "body"),
    ],
)
def test_format_loc(loc: tuple[int | str, ...], expected: str) -> None:
    assert format_loc(loc) == expected


def test_body_over_limit_with_content_length_is_413(client: httpx.Client, log: UpstreamLog) -> None:
    body = {"model": "ok", "input": "x" * (MAX_BODY + 1)}
    response = client.post("/v1/responses", json=body)
    error = assert_envelope(response, 413)
    assert error["code"] == "request_too_large"
    assert log.posts() == []


def test_chunked_body_over_limit_is_413(client: httpx.Client, log: UpstreamLog) -> None:
    payload = b'{"model": "ok", "input": "' + b"x" * (MAX_BODY * 2) + b'"}'

    def chunks() -> Iterator[bytes]:
        for start in range(0, len(payload), 1000):
            yield payload[start : start + 1000]

    response = client.post(
        "/v1/responses", content=chunks(), headers={"content-type": "application/json"}
    )
    assert "content-length" not in response.request.headers
    assert response.request.headers["transfer-encoding"] == "chunked"
    error = assert_envelope(response, 413)
    assert error["code"] == "request_too_large"
    assert log.posts() == []


def test_chunked_body_under_limit_is_accepted(client: httpx.Client, log: UpstreamLog) -> None:
    payload = b'{"model": "ok", "input": "hello"}'
    response = client.post(
        "/v1/responses",
        content=iter([payload[:10], payload[10:]]),
        headers={"content-type": "application/json"},
    )
    assert response.status_code == 200, response.text
    assert response.json()["status"] == "completed"
    assert [r.json() for r in log.posts()] == [{"model": "ok", "input": "hello"}]


# ---------------------------------------------------------------------------- routing


@pytest.mark.parametrize("path", ["/v2/responses", "/nope", "/v1/responses/extra/segments"])
def test_unknown_path_is_404_envelope(client: httpx.Client, path: str) -> None:
    error = assert_envelope(client.get(path), 404)
    assert error["type"] == "invalid_request_error"
    assert error["code"] == "not_found"


@pytest.mark.parametrize(
    ("method", "path"), [("GET", "/v1/responses"), ("PUT", "/v1/responses"), ("POST", "/health")]
)
def test_wrong_method_is_405_envelope(client: httpx.Client, method: str, path: str) -> None:
    response = client.request(method, path)
    error = assert_envelope(response, 405)
    assert error["code"] == "method_not_allowed"
    assert "allow" in response.headers


# ---------------------------------------------------------------------------- upstream failures


@pytest.mark.parametrize("stream", [False, True])
def test_unreachable_upstream_is_502(dead_gateway: str, stream: bool) -> None:
    body = {"model": "m", "input": "hi", "stream": stream}
    response = httpx.post(f"{dead_gateway}/v1/responses", json=body, timeout=30)
    error = assert_envelope(response, 502)
    assert error["type"] == "upstream_error"
    assert error["code"] == "upstream_unreachable"


@pytest.mark.parametrize("stream", [False, True])
def test_upstream_timeout_before_first_byte_is_504(
    client: httpx.Client, log: UpstreamLog, stream: bool
) -> None:
    body = {"model": "slow", "input": "hi", "stream": stream}
    error = assert_envelope(client.post("/v1/responses", json=body), 504)
    assert error["type"] == "upstream_error"
    assert error["code"] == "upstream_timeout"
    assert len(log.posts()) == 1


def test_upstream_answer_that_is_not_json_is_502(client: httpx.Client) -> None:
    response = client.post("/v1/responses", json={"model": "garbage-200", "input": "hi"})
    error = assert_envelope(response, 502)
    assert error["code"] == "upstream_protocol_error"


@pytest.mark.parametrize(
    ("model", "status", "expected"),
    [
        ("openai-400", 400, OPENAI_ERROR),
        ("openai-404", 404, OPENAI_ERROR),
        (
            "openai-partial-429",
            429,
            {
                "error": {
                    "message": "Rate limit reached",
                    "type": "upstream_error",
                    "param": None,
                    "code": None,
                }
            },
        ),
        (
            "vllm-400",
            400,
            {
                "error": {
                    "message": VLLM_ERROR["message"],
                    "type": "BadRequestError",
                    "param": None,
                    "code": "400",
                }
            },
        ),
        (
            "text-error-503",
            503,
            {
                "error": {
                    "message": "model is loading",
                    "type": "upstream_error",
                    "param": None,
                    "code": None,
                }
            },
        ),
        (
            "detail-404",
            502,
            {
                "error": {
                    "message": NO_RESPONSES_API_HINT,
                    "type": "upstream_error",
                    "param": None,
                    "code": "upstream_has_no_responses_api",
                }
            },
        ),
        (
            "vllm-model-404",
            404,
            {
                "error": {
                    "message": "The model `nope` does not exist.",
                    "type": "NotFoundError",
                    "param": None,
                    "code": "404",
                }
            },
        ),
        (
            "plain-500",
            500,
            {
                "error": {
                    "message": "Internal Server Error",
                    "type": "upstream_error",
                    "param": None,
                    "code": "500",
                }
            },
        ),
        (
            "empty-502",
            502,
            {
                "error": {
                    "message": "upstream returned HTTP 502",
                    "type": "upstream_error",
                    "param": None,
                    "code": "502",
                }
            },
        ),
    ],
)
@pytest.mark.parametrize("stream", [False, True])
def test_upstream_http_error_is_forwarded(
    client: httpx.Client, model: str, status: int, expected: JsonObject, stream: bool
) -> None:
    response = client.post("/v1/responses", json={"model": model, "input": "hi", "stream": stream})
    assert_envelope(response, status)
    assert response.json() == expected


def test_openai_sdk_sees_forwarded_and_gateway_errors(gateway: str, dead_gateway: str) -> None:
    client = openai.OpenAI(base_url=f"{gateway}/v1", api_key="sk-client", max_retries=0)
    with pytest.raises(openai.BadRequestError) as bad:
        client.responses.create(model="openai-400", input="hi")
    assert bad.value.status_code == 400
    assert bad.value.code == "model_not_found"
    assert bad.value.param == "model"
    assert bad.value.type == "invalid_request_error"

    with pytest.raises(openai.BadRequestError) as invalid:
        client.responses.create(model="ok", input="hi", temperature=5)
    assert invalid.value.param == "temperature"
    assert invalid.value.code == "invalid_value"

    with pytest.raises(openai.BadRequestError) as streamed:
        client.responses.create(model="vllm-400", input="hi", stream=True)
    assert streamed.value.code == "400"
    assert VLLM_ERROR["message"] in streamed.value.message

    with pytest.raises(openai.InternalServerError) as timeout:
        client.responses.create(model="slow", input="hi")
    assert timeout.value.status_code == 504
    assert timeout.value.code == "upstream_timeout"

    dead = openai.OpenAI(base_url=f"{dead_gateway}/v1", api_key="sk-client", max_retries=0)
    with pytest.raises(openai.InternalServerError) as unreachable:
        dead.responses.create(model="m", input="hi")
    assert unreachable.value.status_code == 502
    assert unreachable.value.code == "upstream_unreachable"


# ---------------------------------------------------------------------------- health, models


def test_health_is_200(client: httpx.Client, dead_gateway: str) -> None:
    assert client.get("/health").status_code == 200
    # Liveness does not depend on the upstream.
    response = httpx.get(f"{dead_gateway}/health", timeout=30)
    assert response.status_code == 200
    assert response.json() == {"status": "ok"}


def test_ready_is_200_when_upstream_answers(client: httpx.Client, log: UpstreamLog) -> None:
    response = client.get("/ready")
    assert response.status_code == 200, response.text
    assert response.json()["status"] == "ready"
    assert [r.path for r in log.requests] == ["/health"]


def test_ready_is_503_envelope_when_upstream_down(dead_gateway: str) -> None:
    error = assert_envelope(httpx.get(f"{dead_gateway}/ready", timeout=30), 503)
    assert error["code"] == "upstream_not_ready"


def test_ready_is_503_when_upstream_unhealthy() -> None:
    app, _ = build_upstream({}, health_status=503)
    with serve_in_thread(app) as upstream_url, serve_gateway(upstream_url) as url:
        error = assert_envelope(httpx.get(f"{url}/ready", timeout=30), 503)
        assert error["code"] == "upstream_not_ready"


def test_models_are_forwarded(client: httpx.Client, log: UpstreamLog) -> None:
    response = client.get("/v1/models")
    assert response.status_code == 200
    assert response.json() == {
        "object": "list",
        "data": [{"id": "test-model", "object": "model"}],
    }
    assert log.requests[-1].path == "/v1/models"


def test_models_error_is_forwarded(client: httpx.Client) -> None:
    response = client.get("/v1/models", headers={"authorization": "Bearer sk-denied"})
    assert response.status_code == 401
    assert response.json()["error"]["code"] == "invalid_api_key"


def test_models_upstream_down_is_502(dead_gateway: str) -> None:
    error = assert_envelope(httpx.get(f"{dead_gateway}/v1/models", timeout=30), 502)
    assert error["code"] == "upstream_unreachable"


# ---------------------------------------------------------------------------- credentials


@pytest.mark.parametrize("stream", [False, True])
def test_configured_api_key_is_sent_when_client_sends_none(
    client: httpx.Client, log: UpstreamLog, stream: bool
) -> None:
    response = client.post("/v1/responses", json={"model": "ok", "input": "hi", "stream": stream})
    assert response.status_code == 200
    (posted,) = log.posts()
    assert posted.headers["authorization"] == "Bearer sk-test"


@pytest.mark.parametrize("stream", [False, True])
def test_forwarded_client_authorization_wins_over_configured_key(
    client: httpx.Client, log: UpstreamLog, stream: bool
) -> None:
    response = client.post(
        "/v1/responses",
        json={"model": "ok", "input": "hi", "stream": stream},
        headers={"authorization": "Bearer sk-client", "openai-project": "proj_1"},
    )
    assert response.status_code == 200
    (posted,) = log.posts()
    assert posted.headers["authorization"] == "Bearer sk-client"
    assert posted.headers["openai-project"] == "proj_1"


def test_client_authorization_is_forwarded_to_models(
    client: httpx.Client, log: UpstreamLog
) -> None:
    client.get("/v1/models", headers={"authorization": "Bearer sk-client"})
    client.get("/v1/models")
    assert [r.headers["authorization"] for r in log.requests] == [
        "Bearer sk-client",
        "Bearer sk-test",
    ]


# ---------------------------------------------------------------------------- wait_for_upstream


# uvicorn ends its thread with SystemExit(3) when the lifespan fails: that is the point here.
@pytest.mark.filterwarnings("ignore::pytest.PytestUnhandledThreadExceptionWarning")
def test_wait_for_upstream_fails_startup_when_upstream_stays_down(
    capfd: pytest.CaptureFixture[str],
) -> None:
    with (
        pytest.raises(RuntimeError, match="server did not start"),
        serve_gateway(f"http://127.0.0.1:{free_port()}", wait_for_upstream=1),
    ):
        pass
    # It failed for the right reason: uvicorn reports the lifespan's error on stderr.
    assert "not ready after 1 s" in capfd.readouterr().err


def test_wait_for_upstream_starts_once_upstream_comes_up() -> None:
    app, log = build_upstream({})
    port = free_port()
    later = BackgroundServer(app, port)
    # The upstream starts a moment after the gateway began waiting for it.
    timer = threading.Timer(0.3, later.start)
    timer.start()
    try:
        with serve_gateway(f"http://127.0.0.1:{port}", wait_for_upstream=15) as url:
            assert later.started.is_set()
            assert any(r.path == "/health" for r in log.requests)
            assert httpx.get(f"{url}/ready", timeout=30).status_code == 200
            response = httpx.post(
                f"{url}/v1/responses", json={"model": "ok", "input": "hi"}, timeout=30
            )
            assert response.status_code == 200
    finally:
        timer.cancel()
        timer.join()
        later.stop()


@pytest.mark.parametrize("model", ["ollama-404", "llamacpp-404", "detail-404"])
def test_an_upstream_without_the_responses_api_says_to_use_the_chat_kind(
    gateway: str, model: str
) -> None:
    """A chat-only server (404 on /v1/responses itself): the client learns what to change."""
    client = openai.OpenAI(base_url=f"{gateway}/v1", api_key="sk-client", max_retries=0)
    for stream in (False, True, False):
        with pytest.raises(openai.InternalServerError) as caught:
            client.responses.create(model=model, input="hi", stream=stream)
        assert caught.value.status_code == 502
        assert caught.value.code == "upstream_has_no_responses_api"
        assert "--upstream-kind chat" in caught.value.message
        assert "RESPGATE_UPSTREAM_KIND=chat" in caught.value.message
