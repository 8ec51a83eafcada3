"""A stand-in for the authentication middleware in the file-tenancy tests, until it is merged.

``TenantHeader`` wraps an ASGI app and does what the authentication middleware does on every
HTTP and WebSocket scope (``app.api.tenancy.set_principal``), taking the tenant from the
test-only header ``x-test-tenant`` instead of from a verified API key. A scope without the
header keeps the anonymous principal (the default tenant), as with authentication off.

Never mounted by the gateway: only tests wrap their app with it. Once the authentication
middleware is merged, the tests give each tenant its own API key instead (``tenant_headers``
becomes ``Authorization: Bearer <key>``) and drop this wrapper.
"""

from __future__ import annotations

from starlette.types import ASGIApp, Receive, Scope, Send

from app.api.tenancy import set_principal
from app.core.tenancy import Principal

TENANT_HEADER = "x-test-tenant"
_HEADER = TENANT_HEADER.encode()


def tenant_headers(tenant: str) -> dict[str, str]:
    """The headers a client of ``tenant`` sends (``default_headers`` of an SDK client)."""
    return {TENANT_HEADER: tenant}


class TenantHeader:
    """``app``, each request running as the tenant its ``x-test-tenant`` header names."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] in ("http", "websocket"):
            for name, value in scope.get("headers") or []:
                if name.lower() == _HEADER:
                    set_principal(scope, Principal(tenant=value.decode("latin-1")))
                    break
        await self.app(scope, receive, send)
