"""JWT bearer tokens (``[auth.jwt]``): RSA keys made here (cryptography), their JWKS served by a
real local HTTP server, tokens signed with PyJWT, sent by the ``openai`` SDK as its API key.

A valid token answers as the tenant of the configured claim; an expired one, one for another
audience or issuer, one signed by a key the JWKS does not have (or with a key id it does not
name), an unsigned or HMAC one are 401s. A rotated key is found by reading the JWKS again,
and tokens with made-up key ids do not make the gateway read it more than once per
``jwks_min_refetch_seconds``. A JWKS file works as the URL does."""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import jwt
import openai
import pytest
from cryptography.hazmat.primitives import serialization
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route
from starlette.testclient import TestClient

from tests.api.auth_gateways import (
    AUDIENCE,
    ISSUER,
    MODEL,
    WHOAMI,
    SigningKey,
    auth_settings,
    gateway_app,
)
from tests.helpers import IN_PROCESS_URL, in_process, serve_in_thread


@dataclass
class JwksServer:
    """The identity provider's JWKS endpoint; counts how often it is read."""

    keys: list[SigningKey]
    reads: int = 0

    def app(self) -> Starlette:
        async def jwks(request: Request) -> Response:
            self.reads += 1
            return JSONResponse({"keys": [key.jwk() for key in self.keys]})

        return Starlette(routes=[Route("/jwks.json", jwks)])


@pytest.fixture(scope="module")
def first_key() -> SigningKey:
    return SigningKey("key-1")


@pytest.fixture
def idp(first_key: SigningKey) -> Iterator[tuple[JwksServer, str]]:
    server = JwksServer([first_key])
    with serve_in_thread(server.app()) as url:
        yield server, f"{url}/jwks.json"


def jwt_settings(tmp_path: Path, **jwt_options: Any) -> Any:
    options = {
        "issuer": ISSUER,
        "audience": [AUDIENCE, "other-app"],
        "tenant_claim": "org.id",
        "jwks_min_refetch_seconds": 0,
        **jwt_options,
    }
    return auth_settings(tmp_path / "data", jwt=options)


@pytest.fixture
def http(tmp_path: Path, idp: tuple[JwksServer, str]) -> Iterator[TestClient]:
    with in_process(gateway_app(jwt_settings(tmp_path, jwks_url=idp[1]))) as client:
        yield client


def sdk(http: TestClient, token: str) -> openai.OpenAI:
    return openai.OpenAI(
        base_url=f"{IN_PROCESS_URL}/v1", api_key=token, max_retries=0, http_client=http
    )


def test_a_valid_token_answers_as_the_tenant_of_its_claim(
    http: TestClient, first_key: SigningKey
) -> None:
    token = first_key.sign()
    assert sdk(http, token).responses.create(model=MODEL, input="hi").output_text == "hi"
    principal = http.get(WHOAMI, headers={"authorization": f"Bearer {token}"}).json()
    assert principal == {"tenant": "acme", "key_id": "user-1", "client_credential": token}
    other = first_key.sign(org={"id": "globex"}, sub="user-2", aud="other-app")
    assert http.get(WHOAMI, headers={"x-api-key": other}).json()["tenant"] == "globex"


def _refused(http: TestClient, token: str) -> str:
    with pytest.raises(openai.AuthenticationError) as refused:
        sdk(http, token).responses.create(model=MODEL, input="hi")
    assert refused.value.status_code == 401
    assert refused.value.code == "invalid_api_key"
    return str(refused.value.message)


def test_refused_tokens(http: TestClient, first_key: SigningKey) -> None:
    long_ago = int(time.time()) - 3600
    assert "expired" in _refused(http, first_key.sign(iat=long_ago, exp=long_ago + 60))
    assert "audience" in _refused(http, first_key.sign(aud="another-service")).lower()
    assert "issuer" in _refused(http, first_key.sign(iss="https://evil.example/")).lower()
    assert "tenant" in _refused(http, first_key.sign(org={"name": "no id"}))
    stranger = SigningKey("key-1")  # the JWKS's key id, another key: the signature fails
    assert "signature" in _refused(http, stranger.sign()).lower()
    assert "not known" in _refused(http, SigningKey("key-unknown").sign())
    unsigned = jwt.encode({"iss": ISSUER, "aud": AUDIENCE, "org": {"id": "acme"}}, None, "none")
    assert "algorithm" in _refused(http, unsigned)
    public_pem = first_key.private.public_key().public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
    )
    assert "algorithm" in _refused(http, _hs256_signed_with(public_pem))
    assert "not a valid JWT" in _refused(http, "not.a.token")


def _hs256_signed_with(secret: bytes) -> str:
    """The algorithm-confusion forgery: HS256 "signed" with the RSA public key as its secret
    (PyJWT refuses to sign so itself)."""

    def b64(data: bytes) -> str:
        return base64.urlsafe_b64encode(data).rstrip(b"=").decode()

    header = b64(json.dumps({"alg": "HS256", "typ": "JWT", "kid": "key-1"}).encode())
    claims = {"iss": ISSUER, "aud": AUDIENCE, "exp": int(time.time()) + 60, "org": {"id": "x"}}
    payload = b64(json.dumps(claims).encode())
    signature = hmac.new(secret, f"{header}.{payload}".encode(), hashlib.sha256).digest()
    return f"{header}.{payload}.{b64(signature)}"


def test_a_rotated_key_is_read_from_the_jwks(
    http: TestClient, idp: tuple[JwksServer, str], first_key: SigningKey
) -> None:
    server, _ = idp
    assert sdk(http, first_key.sign()).models.list() is not None
    reads = server.reads
    second = SigningKey("key-2")
    server.keys = [first_key, second]
    principal = http.get(WHOAMI, headers={"authorization": f"Bearer {second.sign()}"}).json()
    assert principal["tenant"] == "acme"
    assert server.reads == reads + 1
    server.keys = [second]  # key-1 retired: still cached until the JWKS is read again
    assert http.get(WHOAMI, headers={"authorization": f"Bearer {second.sign()}"}).status_code == 200


def test_made_up_key_ids_do_not_hammer_the_provider(
    tmp_path: Path, idp: tuple[JwksServer, str], first_key: SigningKey
) -> None:
    server, url = idp
    settings = jwt_settings(tmp_path, jwks_url=url, jwks_min_refetch_seconds=3600)
    with in_process(gateway_app(settings)) as http:
        reads = server.reads  # read once at start-up
        assert reads == 1
        for n in range(20):
            forged = SigningKey(f"made-up-{n}", private=first_key.private).sign()
            refused = http.get(WHOAMI, headers={"authorization": f"Bearer {forged}"})
            assert refused.status_code == 401
        assert server.reads == reads
        valid = http.get(WHOAMI, headers={"authorization": f"Bearer {first_key.sign()}"})
        assert valid.status_code == 200


def test_a_jwks_file(tmp_path: Path, first_key: SigningKey) -> None:
    jwks = tmp_path / "jwks.json"
    jwks.write_text(json.dumps({"keys": [first_key.jwk()]}))
    with in_process(gateway_app(jwt_settings(tmp_path, jwks_file=str(jwks)))) as http:
        token = first_key.sign(org={"id": "from-file"})
        assert http.get(WHOAMI, headers={"authorization": f"Bearer {token}"}).json()["tenant"] == (
            "from-file"
        )
        assert "signature" in _refused(http, SigningKey("key-1").sign()).lower()
        assert http.get(WHOAMI, headers={"authorization": "Bearer sk-rg-nope"}).status_code == 401
