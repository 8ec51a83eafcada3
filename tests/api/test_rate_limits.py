"""Rate limits per caller (``[limits] requests_per_minute``, ``tokens_per_minute``, overrides per
key and tenant): 429 ``rate_limit_exceeded`` in OpenAI's envelope (Anthropic's on
``/v1/messages``) with ``retry-after`` and OpenAI's ``x-ratelimit-*`` headers, through the
official SDKs; counted in memory, and in the real Redis shared by two gateways.

The caller is the principal the authentication middleware sets. This branch has no such
middleware, so ``AsCaller``, a test-only ASGI wrapper around the app, sets it from the
``x-test-key`` / ``x-test-tenant`` headers (and the client address from ``x-test-client``), as
the authentication middleware will, outside the rate limits.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import anthropic
import openai
import pytest
from starlette.testclient import TestClient
from starlette.types import ASGIApp, Receive, Scope, Send

from app.api.tenancy import set_principal
from app.core.tenancy import Principal
from app.main import create_app
from app.options.limits import LimitsSettings
from app.protocol.json_types import JsonObject
from app.settings import Settings
from tests.background.signal_transports import REDIS_URL, require_redis_sync
from tests.fakes import FakeUpstream
from tests.helpers import IN_PROCESS_URL, in_process

USAGE = {"input_tokens": 10, "output_tokens": 5, "total_tokens": 15}
ANSWER: JsonObject = {
    "status": "completed",
    "output": [
        {
            "type": "message",
            "role": "assistant",
            "content": [{"type": "output_text", "text": "hi", "annotations": []}],
        }
    ],
    "usage": USAGE,
}


class AsCaller:
    """Test-only: puts the principal (and client address) the request's test headers name on
    the scope, as the authentication middleware does, then runs the app."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] in ("http", "websocket"):
            headers = dict(scope["headers"])
            key = headers.get(b"x-test-key")
            tenant = headers.get(b"x-test-tenant", b"default").decode()
            if key is not None or tenant != "default":
                set_principal(scope, Principal(tenant=tenant, key_id=key and key.decode()))
            client = headers.get(b"x-test-client")
            if client is not None:
                scope["client"] = (client.decode(), 1234)
        await self.app(scope, receive, send)


def start(stack: list[Any], limits: dict[str, Any], **settings: Any) -> TestClient:
    upstream = FakeUpstream(
        body=ANSWER, events=[{"type": "response.completed", "response": ANSWER}]
    )
    app = create_app(Settings(limits=limits, **settings), upstream=upstream)
    context = in_process(AsCaller(app))
    stack.append(context)
    return context.__enter__()


@pytest.fixture
def gateways() -> Iterator[Any]:
    """``gateways(limits, **settings)``: an in-process gateway (several may run at once)."""
    stack: list[Any] = []
    yield lambda limits, **settings: start(stack, limits, **settings)
    for context in reversed(stack):
        context.__exit__(None, None, None)


def sdk(http: TestClient, key: str | None = None, **headers: str) -> openai.OpenAI:
    if key is not None:
        headers["x-test-key"] = key
    return openai.OpenAI(
        base_url=f"{IN_PROCESS_URL}/v1",
        api_key="sk-test",
        max_retries=0,
        http_client=http,
        default_headers=headers,
    )


def create(client: openai.OpenAI, *, stream: bool = False) -> Any:
    """One response (streamed to its end when ``stream``); the raw HTTP answer."""
    raw = client.responses.with_raw_response.create(model="m", input="hi", stream=stream)
    parsed = raw.parse()
    if stream:
        for _ in parsed:
            pass
    return raw


def refused(client: openai.OpenAI) -> openai.RateLimitError:
    with pytest.raises(openai.RateLimitError) as caught:
        client.responses.create(model="m", input="hi")
    return caught.value


def assert_rate_limit_error(error: openai.RateLimitError, kind: str, limit: int) -> None:
    assert error.status_code == 429
    body = error.body
    assert isinstance(body, dict) and set(body) == {"message", "type", "param", "code"}
    assert (body["type"], body["code"], body["param"]) == (kind, "rate_limit_exceeded", None)
    assert f"Rate limit reached for {kind} per minute" in body["message"]
    headers = error.response.headers
    assert 1 <= int(headers["retry-after"]) <= 60
    assert 0 < int(headers["retry-after-ms"]) <= 60_000
    assert headers[f"x-ratelimit-limit-{kind}"] == str(limit)
    assert headers[f"x-ratelimit-remaining-{kind}"] == "0"
    assert headers[f"x-ratelimit-reset-{kind}"].endswith("s")


# ----------------------------------------------------------------------------- in memory


def test_requests_per_minute_per_key_with_overrides(gateways: Any) -> None:
    http = gateways({"requests_per_minute": 2, "keys": {"key_big": {"requests_per_minute": 5}}})
    small, big = sdk(http, "key_small"), sdk(http, "key_big")
    first = create(small)
    assert first.headers["x-ratelimit-limit-requests"] == "2"
    assert first.headers["x-ratelimit-remaining-requests"] == "1"
    assert "x-ratelimit-limit-tokens" not in first.headers  # no token limit configured
    assert create(small).headers["x-ratelimit-remaining-requests"] == "0"
    assert_rate_limit_error(refused(small), "requests", 2)
    # another key has its own bucket, and its own (overridden) limit
    answer = create(big)
    assert answer.headers["x-ratelimit-limit-requests"] == "5"
    assert answer.headers["x-ratelimit-remaining-requests"] == "4"
    # a refusal is not a 500 on any /v1 route; /health is never limited
    assert http.get("/v1/models", headers={"x-test-key": "key_small"}).status_code == 429
    assert http.get("/health", headers={"x-test-key": "key_small"}).status_code == 200


def test_tenants_and_anonymous_callers_have_their_own_buckets(gateways: Any) -> None:
    http = gateways({"requests_per_minute": 1, "tenants": {"acme": {"requests_per_minute": 2}}})
    acme = sdk(http, **{"x-test-tenant": "acme"})  # a principal without a key id
    create(acme)
    create(acme)
    assert_rate_limit_error(refused(acme), "requests", 2)
    # authentication off: one bucket per client address
    here, there = (
        sdk(http, **{"x-test-client": "10.0.0.1"}),
        sdk(http, **{"x-test-client": "10.0.0.2"}),
    )
    create(here)
    assert_rate_limit_error(refused(here), "requests", 1)
    create(there)


def test_anonymous_callers_can_share_one_bucket(gateways: Any) -> None:
    http = gateways({"requests_per_minute": 1, "anonymous": "global"})
    create(sdk(http, **{"x-test-client": "10.0.0.1"}))
    assert_rate_limit_error(refused(sdk(http, **{"x-test-client": "10.0.0.2"})), "requests", 1)


@pytest.mark.parametrize("stream", [False, True])
def test_tokens_of_completed_responses_count_before_the_next_request(
    gateways: Any, stream: bool
) -> None:
    http = gateways({"tokens_per_minute": 20})
    client = sdk(http, "key_tokens")
    first = create(client, stream=stream)
    assert first.headers["x-ratelimit-limit-tokens"] == "20"
    assert first.headers["x-ratelimit-remaining-tokens"] == "20"
    second = create(client, stream=stream)  # 15 used: 5 left, admitted
    assert second.headers["x-ratelimit-remaining-tokens"] == "5"
    assert_rate_limit_error(refused(client), "tokens", 20)  # 30 used
    create(sdk(http, "key_other"), stream=stream)


def test_websocket_turns_are_counted_and_refused_in_an_error_frame(gateways: Any) -> None:
    http = gateways({"requests_per_minute": 2, "tokens_per_minute": 20})
    frame = {"type": "response.create", "model": "m", "input": "hi"}
    with http.websocket_connect("/v1/responses", headers={"x-test-key": "key_ws"}) as socket:
        for _ in range(2):  # 15 tokens each: the second is admitted with 5 left
            socket.send_json(frame)
            while socket.receive_json()["type"] != "response.completed":
                pass
        socket.send_json(frame)
        refusal = socket.receive_json()
    assert refusal["type"] == "error" and refusal["status"] == 429
    assert refusal["error"]["code"] == "rate_limit_exceeded"
    assert refusal["error"]["type"] == "tokens"


def test_the_messages_api_answers_anthropics_429(gateways: Any) -> None:
    http = gateways({"requests_per_minute": 1})
    client = anthropic.Anthropic(
        base_url=IN_PROCESS_URL,
        api_key="k",
        http_client=http,
        max_retries=0,
        default_headers={"x-test-key": "key_claude"},
    )
    kwargs: Any = {"model": "m", "max_tokens": 5, "messages": [{"role": "user", "content": "hi"}]}
    client.messages.create(**kwargs)
    with pytest.raises(anthropic.RateLimitError) as caught:
        client.messages.create(**kwargs)
    body = caught.value.body
    assert isinstance(body, dict) and body["type"] == "error"
    assert body["error"]["type"] == "rate_limit_error"
    assert int(caught.value.response.headers["retry-after"]) >= 1


class Clock:
    """Wall time moved on by the SDK's retry sleeps instead of waiting (test-only): the SDK's
    ``time`` and the rate counters' read it."""

    def __init__(self) -> None:
        import time

        self._time = time
        self.offset = 0.0
        self.slept: list[float] = []

    def time(self) -> float:
        return self._time.time() + self.offset

    def monotonic(self) -> float:
        return self._time.monotonic()

    def sleep(self, seconds: float) -> None:
        self.slept.append(seconds)
        self.offset += seconds


def test_the_openai_sdk_retries_a_429_after_retry_after(
    gateways: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    import limits.aio.storage.memory
    import openai._base_client

    import app.api.rate_counter

    clock = Clock()
    for module in (openai._base_client, limits.aio.storage.memory, app.api.rate_counter):
        monkeypatch.setattr(module, "time", clock)
    http = gateways({"requests_per_minute": 1})
    answers: list[Any] = []
    http.event_hooks["response"].append(answers.append)
    client = sdk(http, "key_retry").with_options(max_retries=2)
    client.responses.create(model="m", input="hi")
    response = client.responses.create(model="m", input="hi")  # refused once, then served
    assert response.status == "completed"
    assert [a.status_code for a in answers] == [200, 429, 200]
    waited = int(answers[1].headers["retry-after-ms"]) / 1000
    assert clock.slept == [waited]  # the SDK waited exactly what the gateway said


def test_rate_limits_are_off_by_default(gateways: Any) -> None:
    assert not LimitsSettings().rate_limited
    http = gateways({})
    answer = create(sdk(http, "key_any"))
    assert not any(name.startswith("x-ratelimit") for name in answer.headers)


def test_overrides_inherit_field_by_field() -> None:
    limits = LimitsSettings(
        requests_per_minute=10,
        tokens_per_minute=100,
        tenants={"acme": {"tokens_per_minute": 50}},
        keys={"key_a": {"requests_per_minute": 0}},
    )
    assert limits.rate_for("key_a", "acme") == (0, 50)
    assert limits.rate_for("key_b", "acme") == (10, 50)
    assert limits.rate_for(None, "default") == (10, 100)


# ----------------------------------------------------------------------------- Redis


@pytest.fixture
def redis_key() -> Iterator[str]:
    """A key id of its own for this test, its Redis counters deleted afterwards."""
    require_redis_sync()
    import redis

    key = f"key_{uuid.uuid4().hex[:12]}"
    yield key
    client = redis.Redis.from_url(REDIS_URL)
    try:
        for name in client.scan_iter(match=f"respgate-limits*{key}*"):
            client.delete(name)
    finally:
        client.close()


def test_two_gateways_share_the_counters_in_redis(gateways: Any, redis_key: str) -> None:
    limits = {"requests_per_minute": 3, "tokens_per_minute": 100}
    one, two = gateways(limits, redis_url=REDIS_URL), gateways(limits, redis_url=REDIS_URL)
    a, b = sdk(one, redis_key), sdk(two, redis_key)
    assert create(a).headers["x-ratelimit-remaining-requests"] == "2"
    assert create(b).headers["x-ratelimit-remaining-requests"] == "1"
    third = create(a)  # 30 tokens used so far by the two gateways together
    assert third.headers["x-ratelimit-remaining-requests"] == "0"
    assert third.headers["x-ratelimit-remaining-tokens"] == "70"
    assert_rate_limit_error(refused(b), "requests", 3)
    assert_rate_limit_error(refused(a), "requests", 3)


def test_tokens_are_shared_in_redis(gateways: Any, redis_key: str) -> None:
    limits = {"tokens_per_minute": 20}
    one, two = gateways(limits, redis_url=REDIS_URL), gateways(limits, redis_url=REDIS_URL)
    create(sdk(one, redis_key), stream=True)
    create(sdk(two, redis_key))
    assert_rate_limit_error(refused(sdk(one, redis_key)), "tokens", 20)


def test_an_unreachable_redis_lets_requests_through(
    gateways: Any, caplog: pytest.LogCaptureFixture
) -> None:
    # (job signals off: they would use that Redis too, and wait for it)
    http = gateways(
        {"requests_per_minute": 1}, redis_url="redis://127.0.0.1:1/0", job_signals="none"
    )
    client = sdk(http, "key_down")
    for _ in range(3):
        create(client)
    assert "rate limits not counted" in caplog.text
