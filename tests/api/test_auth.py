"""Gateway API keys through the official SDKs (``openai`` with ``Authorization: Bearer``,
``anthropic`` with ``x-api-key``): a keyless, wrong or revoked key is a 401 in the SDK's own
error type and the API's envelope; configured keys (the key, an environment variable, its
SHA-256) and keys of the ``api_keys`` table work; the principal's tenant reaches
``principal_of``; ``/health`` and ``/ready`` need no key; WebSocket handshakes are refused
without a key; with authentication off every request is the default tenant."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from pathlib import Path

import anthropic
import httpx
import openai
import pytest
import websockets
from starlette.testclient import TestClient, WebSocketDenialResponse
from starlette.types import Message, Receive, Scope, Send

from app.api.auth import Authenticator, AuthMiddleware
from app.api.auth_keys import KeyRing
from app.core.api_keys import hash_key
from app.core.tenancy import DEFAULT_TENANT
from app.settings import Settings
from tests.api.auth_gateways import (
    MODEL,
    WHOAMI,
    auth_settings,
    eventually,
    gateway_app,
)
from tests.helpers import IN_PROCESS_URL, in_process, serve_in_thread
from tests.tenants import revoke_key, store_key

CONFIGURED = "sk-configured-key-for-team-a-0001"
FROM_ENV = "sk-from-the-environment-team-b-02"
HASHED = "sk-only-its-hash-is-configured-c3"


@pytest.fixture
def data_dir(tmp_path: Path) -> Path:
    return tmp_path / "data"


@pytest.fixture
def http(data_dir: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[TestClient]:
    monkeypatch.setenv("TEAM_B_KEY", FROM_ENV)
    settings = auth_settings(
        data_dir,
        keys=[
            {"tenant": "team-a", "name": "ci", "key": CONFIGURED},
            {"tenant": "team-b", "key_env": "TEAM_B_KEY"},
            {"tenant": "team-c", "key_sha256": hash_key(HASHED)},
        ],
        refresh_seconds=0.1,
    )
    with in_process(gateway_app(settings)) as client:
        yield client


def sdk(http: TestClient, key: str) -> openai.OpenAI:
    return openai.OpenAI(
        base_url=f"{IN_PROCESS_URL}/v1", api_key=key, max_retries=0, http_client=http
    )


# The openai SDK's way of sending no Authorization header at all.
NO_KEY = {"Authorization": openai.omit}


def claude(http: TestClient, key: str) -> anthropic.Anthropic:
    return anthropic.Anthropic(
        base_url=IN_PROCESS_URL, api_key=key, max_retries=0, http_client=http
    )


def whoami(http: TestClient, **headers: str) -> httpx.Response:
    return http.get(WHOAMI, headers=headers)


def test_a_request_without_a_key_is_refused(http: TestClient) -> None:
    response = http.post("/v1/responses", json={"model": MODEL, "input": "hi"})
    assert response.status_code == 401
    assert response.headers["www-authenticate"].startswith("Bearer")
    error = response.json()["error"]
    assert error["type"] == "invalid_request_error"
    assert error["code"] == "invalid_api_key"
    assert error["param"] is None
    assert "You didn't provide an API key" in error["message"]
    with pytest.raises(openai.AuthenticationError) as refused:
        sdk(http, "unused").responses.create(model=MODEL, input="hi", extra_headers=NO_KEY)
    assert refused.value.status_code == 401
    assert refused.value.code == "invalid_api_key"


@pytest.mark.parametrize("key", ["sk-rg-wrong", "sk-configured-key-for-team-a-0002", "a.b.c"])
def test_a_wrong_key_is_refused(http: TestClient, key: str) -> None:
    with pytest.raises(openai.AuthenticationError) as refused:
        sdk(http, key).responses.create(model=MODEL, input="hi")
    assert refused.value.code == "invalid_api_key"
    assert refused.value.type == "invalid_request_error"
    # the key is neither echoed nor half-echoed
    assert key not in str(refused.value.body) and key[:8] not in str(refused.value.body)
    with pytest.raises(openai.AuthenticationError):
        sdk(http, key).models.list()


@pytest.mark.parametrize(
    ("key", "tenant"), [(CONFIGURED, "team-a"), (FROM_ENV, "team-b"), (HASHED, "team-c")]
)
def test_configured_keys_answer_as_their_tenant(http: TestClient, key: str, tenant: str) -> None:
    response = sdk(http, key).responses.create(model=MODEL, input="hi")
    assert response.output_text == "hi"
    # Bearer and x-api-key name the same principal
    by_bearer = whoami(http, authorization=f"Bearer {key}").json()
    by_api_key = whoami(http, **{"x-api-key": key}).json()
    assert by_bearer == by_api_key
    assert by_bearer["tenant"] == tenant
    assert by_bearer["key_id"].startswith("key_cfg_")
    assert by_bearer["client_credential"] is None  # a gateway key is never sent upstream


def test_the_anthropic_sdk_uses_x_api_key(http: TestClient) -> None:
    message = claude(http, CONFIGURED).messages.create(
        model=MODEL, max_tokens=16, messages=[{"role": "user", "content": "hi"}]
    )
    assert message.content[0].type == "text" and message.content[0].text == "hi"
    for key in ("sk-ant-wrong", ""):
        with pytest.raises(anthropic.AuthenticationError) as refused:
            claude(http, key).messages.create(
                model=MODEL, max_tokens=16, messages=[{"role": "user", "content": "hi"}]
            )
        assert refused.value.status_code == 401
        body = refused.value.body
        assert isinstance(body, dict) and body["type"] == "error"
        assert body["error"]["type"] == "authentication_error"


def test_keys_of_the_table_work_at_once_and_stop_after_revoke(
    http: TestClient, data_dir: Path
) -> None:
    database_url = Settings(data_dir=data_dir).resolved_database_url()
    key, key_id = store_key(database_url, "team-d", "laptop")
    # an unknown key makes the gateway read the table, so a new key works at once
    response = sdk(http, key).responses.create(model=MODEL, input="hi")
    assert response.output_text == "hi"
    assert whoami(http, authorization=f"Bearer {key}").json() == {
        "tenant": "team-d",
        "key_id": key_id,
        "client_credential": None,
    }
    revoke_key(database_url, key_id)
    assert eventually(lambda: whoami(http, authorization=f"Bearer {key}").status_code == 401)
    with pytest.raises(openai.AuthenticationError):
        sdk(http, key).responses.create(model=MODEL, input="hi")
    # the other keys are unaffected
    assert whoami(http, authorization=f"Bearer {CONFIGURED}").status_code == 200


def test_health_and_ready_need_no_key(http: TestClient) -> None:
    assert http.get("/health").status_code == 200
    assert http.get("/ready").status_code == 200
    assert http.get("/openapi.json").status_code == 401


def test_a_websocket_without_a_key_is_refused(http: TestClient) -> None:
    with pytest.raises(WebSocketDenialResponse) as refused, http.websocket_connect("/v1/responses"):
        pass
    assert refused.value.status_code == 401
    assert refused.value.json()["error"]["code"] == "invalid_api_key"
    with http.websocket_connect(
        "/v1/responses", headers={"authorization": f"Bearer {CONFIGURED}"}
    ) as socket:
        socket.send_json({"type": "response.create", "model": MODEL, "input": "hi"})
        first = socket.receive_json()
    assert first["type"] == "response.created"


def test_a_websocket_handshake_without_a_key_answers_401(data_dir: Path) -> None:
    """On a real server (uvicorn sends the denial response), as Codex and the Agents SDK
    connect."""
    settings = auth_settings(data_dir, keys=[{"tenant": "team-a", "key": CONFIGURED}])

    async def connect(url: str, key: str | None) -> str:
        headers = {"authorization": f"Bearer {key}"} if key else {}
        try:
            async with websockets.connect(url, additional_headers=headers) as socket:
                await socket.send('{"type": "response.create", "model": "m", "input": "hi"}')
                return str(json.loads(await socket.recv())["type"])
        except websockets.InvalidStatus as exc:
            return f"HTTP {exc.response.status_code}"

    with serve_in_thread(gateway_app(settings)) as url:
        ws_url = url.replace("http://", "ws://") + "/v1/responses"
        assert asyncio.run(connect(ws_url, None)) == "HTTP 401"
        assert asyncio.run(connect(ws_url, "sk-wrong-key-000000000000")) == "HTTP 401"
        assert asyncio.run(connect(ws_url, CONFIGURED)) == "response.created"


def test_authentication_off_is_the_default_tenant(data_dir: Path) -> None:
    settings = Settings(data_dir=data_dir, auth={"mode": "off"})
    with in_process(gateway_app(settings)) as http:
        client = sdk(http, "unused")
        keyless = client.responses.create(model=MODEL, input="hi", extra_headers=NO_KEY)
        assert keyless.output_text == "hi"
        assert whoami(http).json() == {
            "tenant": DEFAULT_TENANT,
            "key_id": None,
            "client_credential": None,
        }
        # what the client sent is its own credential (for forward_client_key upstreams)
        assert whoami(http, **{"x-api-key": "sk-ant-own"}).json()["client_credential"] == (
            "sk-ant-own"
        )
        assert whoami(http, authorization="Bearer sk-own").json() == {
            "tenant": DEFAULT_TENANT,
            "key_id": None,
            "client_credential": "sk-own",
        }


def test_auto_mode_follows_the_bind_address(data_dir: Path) -> None:
    for host, enabled in (
        ("127.0.0.1", False),
        ("::1", False),
        ("localhost", False),
        ("127.0.0.2", False),
        ("0.0.0.0", True),
        ("::", True),
        ("192.168.1.20", True),
        ("gateway.example.com", True),
    ):
        on, why = Settings(host=host).auth.enabled_for(host)
        assert on is enabled, host
        assert host in why
    settings = Settings(data_dir=data_dir, host="0.0.0.0")
    with in_process(gateway_app(settings)) as http:
        assert http.get("/v1/models").status_code == 401
    with in_process(gateway_app(Settings(data_dir=data_dir, host="127.0.0.1"))) as http:
        assert http.get("/v1/models").status_code == 200


async def test_a_server_without_the_denial_extension_gets_a_policy_close() -> None:
    """Where the ASGI server cannot answer a handshake with HTTP (no ``websocket.http.response``
    extension), the refusal is a close with 1008 (policy violation) before accepting."""
    reached: list[str] = []

    async def app(scope: Scope, receive: Receive, send: Send) -> None:
        reached.append(scope["path"])

    middleware = AuthMiddleware(app, Authenticator(True, KeyRing({})))
    sent: list[Message] = []

    async def receive() -> Message:
        return {"type": "websocket.connect"}

    async def send(message: Message) -> None:
        sent.append(message)

    scope = {"type": "websocket", "path": "/v1/responses", "headers": [], "extensions": {}}
    await middleware(scope, receive, send)
    assert reached == []
    assert [m["type"] for m in sent] == ["websocket.close"]
    assert sent[0]["code"] == 1008 and "API key" in sent[0]["reason"]
