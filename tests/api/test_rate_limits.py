"""Rate limits per caller (``[limits] requests_per_minute``, ``tokens_per_minute``, overrides per
key and tenant): 429 ``rate_limit_exceeded`` in OpenAI's envelope (Anthropic's on
``/v1/messages``) with ``retry-after`` and OpenAI's ``x-ratelimit-*`` headers, through the
official SDKs; counted in memory, and in the real Redis shared by two gateways.

The caller is the principal the real authentication middleware sets: gateways with
``[auth] mode = "on"`` and a configured key per tenant (``tests.tenants``), keys of the
``api_keys`` table, a JWT from a JWKS file; with authentication off, the client's address (two
clients on a real socket, connecting from 127.0.0.2 and 127.0.0.3).
"""

from __future__ import annotations

import contextlib
import json
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anthropic
import httpx
import openai
import pytest
from starlette.testclient import TestClient

from app.main import create_app
from app.options.limits import LimitsSettings
from app.protocol.json_types import JsonObject
from app.settings import Settings
from tests.api.auth_gateways import AUDIENCE, ISSUER, SigningKey
from tests.background.signal_transports import REDIS_URL, require_redis_sync
from tests.fakes import FakeUpstream
from tests.helpers import in_process, serve_in_thread
from tests.tenants import (
    claude_as,
    client_as,
    configured_key_id,
    headers_as,
    keyed,
    sdk,
    store_key,
    tenant_key,
)

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


def limited(limits: dict[str, Any], *tenants: str, **settings: Any) -> Settings:
    """Settings with ``limits``, authentication on and a configured key for each of
    ``tenants``."""
    return keyed(Settings(limits=limits, **settings), *tenants)


def upstream() -> FakeUpstream:
    return FakeUpstream(body=ANSWER, events=[{"type": "response.completed", "response": ANSWER}])


def start(stack: list[Any], settings: Settings) -> TestClient:
    context = in_process(create_app(settings, upstream=upstream()))
    stack.append(context)
    return context.__enter__()


@pytest.fixture
def gateways() -> Iterator[Any]:
    """``gateways(settings)``: an in-process gateway (several may run at once, on the test's
    database)."""
    stack: list[Any] = []
    yield lambda settings: start(stack, settings)
    for context in reversed(stack):
        context.__exit__(None, None, None)


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
    # acme has two keys: its configured one, and one of the api_keys table (respgate keys)
    table_key, table_id = store_key(Settings().resolved_database_url(), "acme", "laptop")
    globex_id = configured_key_id(tenant_key("globex"))
    assert table_id.startswith("key_") and globex_id.startswith("key_cfg_")
    overrides = {table_id: {"requests_per_minute": 5}, globex_id: {"requests_per_minute": 3}}
    http = gateways(limited({"requests_per_minute": 2, "keys": overrides}, "acme", "globex"))
    small, big = client_as(http, "acme"), sdk(http, table_key)
    first = create(small)
    assert first.headers["x-ratelimit-limit-requests"] == "2"
    assert first.headers["x-ratelimit-remaining-requests"] == "1"
    assert "x-ratelimit-limit-tokens" not in first.headers  # no token limit configured
    assert create(small).headers["x-ratelimit-remaining-requests"] == "0"
    assert_rate_limit_error(refused(small), "requests", 2)
    # the tenant's other key has its own bucket, and its own (overridden) limit
    answer = create(big)
    assert answer.headers["x-ratelimit-limit-requests"] == "5"
    assert answer.headers["x-ratelimit-remaining-requests"] == "4"
    # a configured key's override names its id
    assert create(client_as(http, "globex")).headers["x-ratelimit-limit-requests"] == "3"
    # a refusal is not a 500 on any /v1 route; /health is never limited
    assert http.get("/v1/models", headers=headers_as("acme")).status_code == 429
    assert http.get("/health", headers=headers_as("acme")).status_code == 200


def test_a_tenants_keys_get_its_limit(gateways: Any) -> None:
    limits = {"requests_per_minute": 1, "tenants": {"acme": {"requests_per_minute": 2}}}
    http = gateways(limited(limits, "acme", "globex"))
    acme, globex = client_as(http, "acme"), client_as(http, "globex")
    create(acme)
    create(acme)
    assert_rate_limit_error(refused(acme), "requests", 2)
    create(globex)
    assert_rate_limit_error(refused(globex), "requests", 1)


def test_tokens_without_a_subject_share_their_tenants_bucket(gateways: Any, tmp_path: Path) -> None:
    signing = SigningKey("key-1")
    jwks = tmp_path / "jwks.json"
    jwks.write_text(json.dumps({"keys": [signing.jwk()]}))
    jwt = {"jwks_file": str(jwks), "issuer": ISSUER, "audience": AUDIENCE, "tenant_claim": "org.id"}
    http = gateways(keyed(Settings(limits={"requests_per_minute": 2}), jwt=jwt))
    # two tokens of acme that name no subject (no key id): one bucket, acme's
    first, second = signing.sign(sub=None), signing.sign(sub=None, name="another token")
    assert first != second
    create(sdk(http, first))
    create(sdk(http, second))
    assert_rate_limit_error(refused(sdk(http, first)), "requests", 2)
    # a token with a subject counts for that subject
    create(sdk(http, signing.sign(sub="user-1")))


@contextlib.contextmanager
def from_address(url: str, address: str) -> Iterator[openai.OpenAI]:
    """The ``openai`` SDK on the gateway at ``url``, connecting from ``address`` (a loopback
    address of its own: the gateway sees it as the client's)."""
    transport = httpx.HTTPTransport(local_address=address)
    with httpx.Client(transport=transport) as http:
        yield openai.OpenAI(base_url=f"{url}/v1", api_key="sk-x", max_retries=0, http_client=http)


@pytest.mark.parametrize("anonymous", ["client_address", "global"])
def test_without_authentication_callers_count_by_address_or_together(anonymous: str) -> None:
    limits = {"requests_per_minute": 1, "anonymous": anonymous}
    app = create_app(Settings(limits=limits, auth={"mode": "off"}), upstream=upstream())
    with (
        serve_in_thread(app) as url,
        from_address(url, "127.0.0.2") as here,
        from_address(url, "127.0.0.3") as there,
    ):
        create(here)
        assert_rate_limit_error(refused(here), "requests", 1)
        if anonymous == "global":  # one bucket for every caller without a key
            assert_rate_limit_error(refused(there), "requests", 1)
        else:  # one bucket per client address
            create(there)


@pytest.mark.parametrize("stream", [False, True])
def test_tokens_of_completed_responses_count_before_the_next_request(
    gateways: Any, stream: bool
) -> None:
    http = gateways(limited({"tokens_per_minute": 20}, "tokens", "other"))
    client = client_as(http, "tokens")
    first = create(client, stream=stream)
    assert first.headers["x-ratelimit-limit-tokens"] == "20"
    assert first.headers["x-ratelimit-remaining-tokens"] == "20"
    second = create(client, stream=stream)  # 15 used: 5 left, admitted
    assert second.headers["x-ratelimit-remaining-tokens"] == "5"
    assert_rate_limit_error(refused(client), "tokens", 20)  # 30 used
    create(client_as(http, "other"), stream=stream)


def test_websocket_turns_are_counted_and_refused_in_an_error_frame(gateways: Any) -> None:
    http = gateways(limited({"requests_per_minute": 2, "tokens_per_minute": 20}, "ws"))
    frame = {"type": "response.create", "model": "m", "input": "hi"}
    with http.websocket_connect("/v1/responses", headers=headers_as("ws")) as socket:
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
    http = gateways(limited({"requests_per_minute": 1}, "claude"))
    client = claude_as(http, "claude")  # its key in x-api-key
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
    http = gateways(limited({"requests_per_minute": 1}, "retry"))
    answers: list[Any] = []
    http.event_hooks["response"].append(answers.append)
    client = client_as(http, "retry").with_options(max_retries=2)
    client.responses.create(model="m", input="hi")
    response = client.responses.create(model="m", input="hi")  # refused once, then served
    assert response.status == "completed"
    assert [a.status_code for a in answers] == [200, 429, 200]
    waited = int(answers[1].headers["retry-after-ms"]) / 1000
    assert clock.slept == [waited]  # the SDK waited exactly what the gateway said


def test_rate_limits_are_off_by_default(gateways: Any) -> None:
    assert not LimitsSettings().rate_limited
    http = gateways(limited({}, "any"))
    answer = create(client_as(http, "any"))
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
def redis_tenant() -> Iterator[str]:
    """A tenant of its own for this test (its configured key's counters are new), its Redis
    counters deleted afterwards."""
    require_redis_sync()
    import redis

    tenant = f"t-{uuid.uuid4().hex[:12]}"
    yield tenant
    client = redis.Redis.from_url(REDIS_URL)
    try:
        key_id = configured_key_id(tenant_key(tenant))
        for name in client.scan_iter(match=f"respgate-limits*{key_id}*"):
            client.delete(name)
    finally:
        client.close()


def test_two_gateways_share_the_counters_in_redis(gateways: Any, redis_tenant: str) -> None:
    settings = limited(
        {"requests_per_minute": 3, "tokens_per_minute": 100}, redis_tenant, redis_url=REDIS_URL
    )
    one, two = gateways(settings), gateways(settings)
    a, b = client_as(one, redis_tenant), client_as(two, redis_tenant)
    assert create(a).headers["x-ratelimit-remaining-requests"] == "2"
    assert create(b).headers["x-ratelimit-remaining-requests"] == "1"
    third = create(a)  # 30 tokens used so far by the two gateways together
    assert third.headers["x-ratelimit-remaining-requests"] == "0"
    assert third.headers["x-ratelimit-remaining-tokens"] == "70"
    assert_rate_limit_error(refused(b), "requests", 3)
    assert_rate_limit_error(refused(a), "requests", 3)


def test_tokens_are_shared_in_redis(gateways: Any, redis_tenant: str) -> None:
    settings = limited({"tokens_per_minute": 20}, redis_tenant, redis_url=REDIS_URL)
    one, two = gateways(settings), gateways(settings)
    create(client_as(one, redis_tenant), stream=True)
    create(client_as(two, redis_tenant))
    assert_rate_limit_error(refused(client_as(one, redis_tenant)), "tokens", 20)


def test_an_unreachable_redis_lets_requests_through(
    gateways: Any, caplog: pytest.LogCaptureFixture
) -> None:
    # (job signals off: they would use that Redis too, and wait for it)
    settings = limited(
        {"requests_per_minute": 1}, "down", redis_url="redis://127.0.0.1:1/0", job_signals="none"
    )
    client = client_as(gateways(settings), "down")
    for _ in range(3):
        create(client)
    assert "rate limits not counted" in caplog.text
