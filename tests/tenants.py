"""Clients of several tenants on one gateway in process: the tests' stand-in for authentication.

Until the authentication middleware (issue 17, ``app/api/auth.py``) decides the principal from
a gateway API key, ``TenantHeader`` stands in for it: a pure ASGI wrapper around the app that
puts ``Principal(tenant=...)`` on every HTTP and WebSocket scope whose ``x-test-tenant`` header
names one (``app.api.tenancy.set_principal``, exactly where the middleware puts it); a request
without the header stays ``ANONYMOUS`` (the default tenant), as with authentication off.

Tests use only ``tenants_gateway``, ``client_as`` and ``headers_as``: to test with real API keys
instead, only this module changes (the gateway configured with a key per tenant, each client
sending its tenant's key).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import openai
from starlette.testclient import TestClient
from starlette.types import ASGIApp, Receive, Scope, Send

from app.api.tenancy import set_principal
from app.core.ports import Upstream
from app.core.tenancy import Principal
from app.main import create_app
from app.settings import Settings
from tests.helpers import IN_PROCESS_URL, in_process

TENANT_HEADER = "x-test-tenant"


class TenantHeader:
    """The stand-in for the authentication middleware (see the module docstring)."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] in ("http", "websocket"):
            for name, value in scope.get("headers") or ():
                if name.decode("latin-1").lower() == TENANT_HEADER:
                    set_principal(scope, Principal(tenant=value.decode("latin-1")))
        await self.app(scope, receive, send)


@contextlib.contextmanager
def tenants_gateway(settings: Settings, upstream: Upstream) -> Iterator[TestClient]:
    """The gateway in this process (``tests.helpers.in_process``), each request run as the
    tenant its client is (``client_as``, ``headers_as``)."""
    with in_process(TenantHeader(create_app(settings, upstream=upstream))) as http:
        yield http


def headers_as(tenant: str) -> dict[str, str]:
    """The headers that make a raw request (``http.get``, a WebSocket) ``tenant``'s."""
    return {TENANT_HEADER: tenant}


def client_as(http: TestClient, tenant: str) -> openai.OpenAI:
    """The ``openai`` SDK as ``tenant``, on a ``tenants_gateway``."""
    return openai.OpenAI(
        base_url=f"{IN_PROCESS_URL}/v1",
        api_key=f"sk-{tenant}",
        max_retries=0,
        http_client=http,
        default_headers=headers_as(tenant),
    )
