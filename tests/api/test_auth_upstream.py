"""Upstream credentials: the gateway sends each upstream that upstream's configured key; only
an upstream configured with ``forward_client_key`` gets the client's own credential (a JWT, or
with authentication off its bearer / ``x-api-key``), and no other upstream ever does; a gateway
API key never leaves the gateway.

Two recording upstreams on real ports, ``alpha`` (the default, its own key) and ``beta``
(``forward_client_key``, a key of its own for clients that have none), serve every route that
reaches an upstream: ``/v1/responses`` (JSON, SSE, WebSocket mode), ``input_tokens``
(``/tokenize``), ``compact`` (native), ``/v1/chat/completions``, ``/v1/messages``, and the
union of ``GET /v1/models``, driven by the ``openai`` and ``anthropic`` SDKs.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anthropic
import openai
import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route
from starlette.testclient import TestClient

from app.main import create_app
from app.settings import Settings
from tests.api.auth_gateways import AUDIENCE, ISSUER, SigningKey
from tests.api.upstreams import closing_events, completed_response, opening_events, sse_frame
from tests.helpers import IN_PROCESS_URL, in_process, serve_in_thread

ALPHA_KEY = "sk-alpha-upstream-key"
BETA_KEY = "sk-beta-upstream-key"
CLIENT_KEY = "sk-the-clients-own-key"
GATEWAY_KEY = "sk-rg-gateway-key-of-team-a-00001"


@dataclass
class RecordingUpstream:
    """An inference server that notes the Authorization header of every request, by path."""

    name: str
    seen: list[tuple[str, str | None]] = field(default_factory=list)

    def credentials(self) -> set[str | None]:
        return {authorization for _, authorization in self.seen}

    def paths(self) -> set[str]:
        return {path for path, _ in self.seen}

    def app(self) -> Starlette:
        async def record(request: Request) -> Any:
            self.seen.append((request.url.path, request.headers.get("authorization")))
            raw = await request.body()
            return json.loads(raw) if raw else {}

        async def responses(request: Request) -> Response:
            body = await record(request)
            if not body.get("stream"):
                return JSONResponse(completed_response(f"from {self.name}"))
            text = f"from {self.name}"

            async def events() -> AsyncIterator[bytes]:
                for event in [*opening_events(text), *closing_events(text)]:
                    yield sse_frame(event)

            return StreamingResponse(events(), media_type="text/event-stream")

        async def compact(request: Request) -> Response:
            await record(request)
            item = {"id": "cmp_1", "type": "compaction", "encrypted_content": "gAAAA"}
            usage = {"input_tokens": 1, "output_tokens": 1, "total_tokens": 2}
            return JSONResponse(
                {
                    "id": "resp_c",
                    "object": "response.compaction",
                    "created_at": 1,
                    "output": [item],
                    "usage": usage,
                }
            )

        async def tokenize(request: Request) -> Response:
            await record(request)
            return JSONResponse({"count": 7, "max_model_len": 4096})

        async def chat(request: Request) -> Response:
            body = await record(request)
            message = {"role": "assistant", "content": f"from {self.name}"}
            choice = {"index": 0, "message": message, "finish_reason": "stop"}
            return JSONResponse(
                {
                    "id": "chatcmpl-1",
                    "object": "chat.completion",
                    "created": 1,
                    "model": body.get("model"),
                    "choices": [choice],
                }
            )

        async def models(request: Request) -> Response:
            await record(request)
            data = [{"id": f"{self.name}-model", "object": "model", "owned_by": self.name}]
            return JSONResponse({"object": "list", "data": data})

        async def health(request: Request) -> Response:
            return JSONResponse({})

        return Starlette(
            routes=[
                Route("/v1/responses", responses, methods=["POST"]),
                Route("/v1/responses/compact", compact, methods=["POST"]),
                Route("/tokenize", tokenize, methods=["POST"]),
                Route("/v1/chat/completions", chat, methods=["POST"]),
                Route("/v1/models", models, methods=["GET"]),
                Route("/health", health, methods=["GET"]),
            ]
        )


@pytest.fixture(scope="module")
def upstreams() -> Iterator[tuple[RecordingUpstream, str, RecordingUpstream, str]]:
    alpha, beta = RecordingUpstream("alpha"), RecordingUpstream("beta")
    with serve_in_thread(alpha.app()) as alpha_url, serve_in_thread(beta.app()) as beta_url:
        yield alpha, alpha_url, beta, beta_url


def gateway_settings(
    tmp_path: Path, upstreams: tuple[RecordingUpstream, str, RecordingUpstream, str], **extra: Any
) -> Settings:
    alpha, alpha_url, beta, beta_url = upstreams
    alpha.seen.clear()
    beta.seen.clear()
    return Settings(
        data_dir=tmp_path / "data",
        upstreams=[
            {
                "name": "alpha",
                "url": alpha_url,
                "api_key": ALPHA_KEY,
                "models": ["alpha-*"],
                "native_compact": True,
                "default": True,
            },
            {
                "name": "beta",
                "url": beta_url,
                "api_key": BETA_KEY,
                "models": ["beta-*"],
                "native_compact": True,
                "forward_client_key": True,
            },
        ],
        **extra,
    )


def exercise(http: TestClient, credential: str) -> None:
    """Every route that reaches an upstream, for a model of each upstream: the openai SDK
    with ``credential`` as its key, the anthropic SDK with it as ``x-api-key``."""
    client = openai.OpenAI(
        base_url=f"{IN_PROCESS_URL}/v1", api_key=credential, max_retries=0, http_client=http
    )
    claude = anthropic.Anthropic(
        base_url=IN_PROCESS_URL, api_key=credential, max_retries=0, http_client=http
    )
    for model in ("alpha-model", "beta-model"):
        created = client.responses.create(model=model, input="hi")
        assert created.output_text == f"from {model.split('-')[0]}"
        with client.responses.stream(model=model, input="hi") as stream:
            assert stream.get_final_response().output_text == created.output_text
        assert client.responses.input_tokens.count(model=model, input="hi").input_tokens == 7
        assert client.responses.compact(model=model, input="hi").object == "response.compaction"
        chat = client.chat.completions.create(
            model=model, messages=[{"role": "user", "content": "hi"}]
        )
        assert chat.choices[0].message.content == created.output_text
        message = claude.messages.create(
            model=model, max_tokens=16, messages=[{"role": "user", "content": "hi"}]
        )
        assert message.content[0].type == "text"
        with http.websocket_connect(
            "/v1/responses", headers={"authorization": f"Bearer {credential}"}
        ) as socket:
            socket.send_json({"type": "response.create", "model": model, "input": "hi"})
            while (event := socket.receive_json())["type"] != "response.completed":
                pass
            assert event["response"]["output"][0]["content"][0]["text"] == created.output_text
    listed = {model.id for model in client.models.list()}
    assert listed == {"alpha-model", "beta-model"}


EVERY_PATH = {
    "/v1/responses",
    "/v1/responses/compact",
    "/tokenize",
    "/v1/chat/completions",
    "/v1/models",
}


def test_with_authentication_off_only_the_forwarding_upstream_gets_the_clients_key(
    tmp_path: Path, upstreams: tuple[RecordingUpstream, str, RecordingUpstream, str]
) -> None:
    alpha, _, beta, _ = upstreams
    with in_process(create_app(gateway_settings(tmp_path, upstreams))) as http:
        exercise(http, CLIENT_KEY)
    assert alpha.paths() == beta.paths() == EVERY_PATH
    assert alpha.credentials() == {f"Bearer {ALPHA_KEY}"}
    assert beta.credentials() == {f"Bearer {CLIENT_KEY}"}


def test_a_gateway_key_is_never_sent_upstream(
    tmp_path: Path, upstreams: tuple[RecordingUpstream, str, RecordingUpstream, str]
) -> None:
    alpha, _, beta, _ = upstreams
    auth = {"mode": "on", "keys": [{"tenant": "team-a", "key": GATEWAY_KEY}]}
    with in_process(create_app(gateway_settings(tmp_path, upstreams, auth=auth))) as http:
        exercise(http, GATEWAY_KEY)
    assert alpha.paths() == beta.paths() == EVERY_PATH
    assert alpha.credentials() == {f"Bearer {ALPHA_KEY}"}
    assert beta.credentials() == {f"Bearer {BETA_KEY}"}  # its own key: the client has none


def test_a_jwt_goes_only_to_the_forwarding_upstream(
    tmp_path: Path, upstreams: tuple[RecordingUpstream, str, RecordingUpstream, str]
) -> None:
    alpha, _, beta, _ = upstreams
    key = SigningKey("idp-1")
    jwks = tmp_path / "jwks.json"
    jwks.write_text(json.dumps({"keys": [key.jwk()]}))
    token = key.sign()
    auth = {
        "mode": "on",
        "jwt": {
            "jwks_file": str(jwks),
            "issuer": ISSUER,
            "audience": AUDIENCE,
            "tenant_claim": "org.id",
        },
    }
    with in_process(create_app(gateway_settings(tmp_path, upstreams, auth=auth))) as http:
        exercise(http, token)
    assert alpha.credentials() == {f"Bearer {ALPHA_KEY}"}
    assert beta.credentials() == {f"Bearer {token}"}


def test_one_upstream_forwards_the_clients_key_only_when_configured(
    tmp_path: Path, upstreams: tuple[RecordingUpstream, str, RecordingUpstream, str]
) -> None:
    """The single-upstream keys: ``upstream_api_key`` always, unless
    ``upstream_forward_client_key``; a client without a key gets the configured one."""
    alpha, alpha_url, _, _ = upstreams
    for forward, expected in ((False, ALPHA_KEY), (True, CLIENT_KEY)):
        alpha.seen.clear()
        settings = Settings(
            data_dir=tmp_path / "data",
            upstream_url=alpha_url,
            upstream_api_key=ALPHA_KEY,
            upstream_forward_client_key=forward,
        )
        with in_process(create_app(settings)) as http:
            client = openai.OpenAI(
                base_url=f"{IN_PROCESS_URL}/v1", api_key=CLIENT_KEY, max_retries=0, http_client=http
            )
            client.models.list()
            client.responses.create(model="m", input="hi")
            client.responses.create(
                model="m", input="hi", extra_headers={"Authorization": openai.omit}
            )
        assert [auth for _, auth in alpha.seen] == [
            f"Bearer {expected}",
            f"Bearer {expected}",
            f"Bearer {ALPHA_KEY}",
        ]
