"""Gateways with authentication for the tests of ``app.api.auth``: the app in process (or on a
real port), a route that answers the principal ``principal_of`` gives, and an identity
provider's signing key for JWTs. Keys of the ``api_keys`` table: ``tests.tenants``."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import jwt
from cryptography.hazmat.primitives.asymmetric import rsa
from fastapi import FastAPI
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from app.api.tenancy import principal_of
from app.main import create_app
from app.settings import Settings
from tests.fakes import FakeUpstream, MemoryResponseStore, text_response

WHOAMI = "/v1/whoami"
MODEL = "test-model"

ISSUER = "https://idp.example.test/"
AUDIENCE = "respgate"


@dataclass
class SigningKey:
    """An identity provider's RSA signing key (made here) and the tokens it signs."""

    kid: str
    private: rsa.RSAPrivateKey = field(
        default_factory=lambda: rsa.generate_private_key(public_exponent=65537, key_size=2048)
    )

    def jwk(self) -> dict[str, Any]:
        public = json.loads(jwt.algorithms.RSAAlgorithm.to_jwk(self.private.public_key()))
        return {**public, "kid": self.kid, "alg": "RS256", "use": "sig"}

    def sign(self, **claims: Any) -> str:
        now = int(time.time())
        body = {
            "iss": ISSUER,
            "aud": AUDIENCE,
            "sub": "user-1",
            "iat": now,
            "exp": now + 600,
            "org": {"id": "acme"},
            **claims,
        }
        # a claim given as None is left out (a token without "sub", say)
        body = {name: value for name, value in body.items() if value is not None}
        return jwt.encode(body, self.private, algorithm="RS256", headers={"kid": self.kid})


async def _whoami(request: Request) -> JSONResponse:
    principal = principal_of(request)
    return JSONResponse(
        {
            "tenant": principal.tenant,
            "key_id": principal.key_id,
            "client_credential": principal.client_credential,
        }
    )


def gateway_app(settings: Settings, upstream: Any | None = None) -> FastAPI:
    """The gateway with a fake upstream that always answers "hi", and ``GET /v1/whoami``
    answering the request's principal (a route behind the authentication like any other)."""
    app = create_app(
        settings,
        upstream=upstream if upstream is not None else FakeUpstream(body=text_response("hi")),
        store=MemoryResponseStore(),
    )
    app.router.routes.append(Route(WHOAMI, _whoami, methods=["GET"]))
    return app


def auth_settings(data_dir: Path, **auth: Any) -> Settings:
    """Settings on 127.0.0.1 with ``[auth]`` as given (``mode`` "on" unless said)."""
    return Settings(data_dir=data_dir, auth={"mode": "on", **auth})


def eventually(check: Callable[[], bool], seconds: float = 30.0) -> bool:
    """Whether ``check`` turns true within ``seconds`` (polled; a generous bound, never an
    assertion about time)."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if check():
            return True
        time.sleep(0.05)
    return check()
