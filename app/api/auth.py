"""Client authentication: the pure ASGI middleware that gives every HTTP request and WebSocket
its principal (``app.api.tenancy.set_principal``).

The credential is ``Authorization: Bearer <token>`` or Anthropic's ``x-api-key: <token>``:
- authentication on: a gateway API key (``app.api.auth_keys.KeyRing``: one hash, one dict
  lookup) gives the key's tenant and id, and is never sent upstream; a JWT
  (``app.api.auth_jwt``) gives the tenant of its configured claim, and is the client's
  credential (sent only to an upstream configured with ``forward_client_key``). Anything else,
  or nothing, answers 401 in OpenAI's envelope (``invalid_request_error`` /
  ``invalid_api_key``), in Anthropic's (``authentication_error``) on ``/v1/messages``; a
  WebSocket handshake is refused with the same 401 (or, where the server cannot send one, a
  close with code 1008, policy violation).
- authentication off: every request is the default tenant (``ANONYMOUS``); what the client sent
  is its credential, for upstreams that forward it.
``/health`` and ``/ready`` never need a credential.
"""

from __future__ import annotations

import logging

import orjson
from starlette.requests import Request
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from app.api.auth_jwt import JwksUnavailableError, JwtVerifier, TokenRejectedError
from app.api.auth_keys import KeyRing
from app.api.errors import log_refusal
from app.api.tenancy import set_principal
from app.core.api_keys import hash_key
from app.core.tenancy import ANONYMOUS, Principal
from app.errors import AuthenticationError, GatewayError
from app.frontends.anthropic.errors import error_envelope

logger = logging.getLogger(__name__)

EXEMPT_PATHS = frozenset({"/health", "/ready"})
_ANTHROPIC_PREFIX = "/v1/messages"
# RFC 6455: "an endpoint is terminating the connection because it has received a message that
# violates its policy"; used where the server cannot answer the handshake with an HTTP 401.
WS_POLICY_VIOLATION = 1008

MISSING_KEY = (
    "You didn't provide an API key. You need to provide your API key in an Authorization "
    "header using Bearer auth (i.e. Authorization: Bearer YOUR_KEY) or in an x-api-key header."
)
INCORRECT_KEY = "Incorrect API key provided: the key is unknown or was revoked."


def credential_of(scope: Scope) -> str | None:
    """The token of ``Authorization: Bearer``, else of ``x-api-key``; None when neither."""
    bearer = api_key = None
    for name, value in scope.get("headers") or ():
        if name == b"authorization":
            scheme, _, token = value.decode("latin-1").partition(" ")
            if scheme.lower() == "bearer" and token.strip():
                bearer = token.strip()
        elif name == b"x-api-key":
            api_key = value.decode("latin-1").strip() or None
    return bearer or api_key


class Authenticator:
    """Who a credential is (see the module docstring)."""

    def __init__(
        self, enabled: bool, keys: KeyRing | None = None, jwt: JwtVerifier | None = None
    ) -> None:
        self.enabled = enabled
        self.keys = keys if keys is not None else KeyRing({})
        self.jwt = jwt

    async def principal(self, credential: str | None) -> Principal:
        """The principal of ``credential``; AuthenticationError (401), or a 503 when the
        identity provider's keys cannot be read."""
        if not self.enabled:
            return ANONYMOUS if credential is None else Principal(client_credential=credential)
        if credential is None:
            raise AuthenticationError(MISSING_KEY)
        digest = hash_key(credential)
        owner = self.keys.get(digest)
        if owner is None and self.jwt is not None and credential.count(".") == 2:
            return await self._verified(self.jwt, credential)
        if owner is None:
            owner = await self.keys.find(digest)
        if owner is None:
            raise AuthenticationError(INCORRECT_KEY)
        return Principal(tenant=owner.tenant, key_id=owner.key_id)

    async def _verified(self, verifier: JwtVerifier, token: str) -> Principal:
        try:
            return await verifier.verify(token)
        except TokenRejectedError as exc:
            raise AuthenticationError(str(exc)) from None
        except JwksUnavailableError as exc:
            logger.warning("a bearer token could not be checked: %s", exc)
            raise GatewayError(
                "The gateway cannot check bearer tokens now (its identity provider's keys are "
                "unavailable); try again later.",
                code="jwks_unavailable",
                status_code=503,
            ) from None


class AuthMiddleware:
    """Pure ASGI (no per-request task, no body buffering): the principal of each HTTP request
    and WebSocket, or its refusal."""

    def __init__(self, app: ASGIApp, authenticator: Authenticator) -> None:
        self.app = app
        self.authenticator = authenticator

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        kind = scope["type"]
        if kind != "http" and kind != "websocket":
            await self.app(scope, receive, send)
            return
        if scope["path"] in EXEMPT_PATHS:
            set_principal(scope, ANONYMOUS)
            await self.app(scope, receive, send)
            return
        try:
            principal = await self.authenticator.principal(credential_of(scope))
        except GatewayError as error:
            await _refuse(scope, receive, send, error)
            return
        set_principal(scope, principal)
        await self.app(scope, receive, send)


async def _refuse(scope: Scope, receive: Receive, send: Send, error: GatewayError) -> None:
    """The refusal of an HTTP request, or of a WebSocket's handshake."""
    path = str(scope["path"])
    status, envelope = error.status_code, error.to_envelope()
    if path.startswith(_ANTHROPIC_PREFIX):
        status, envelope = error_envelope(error)
    body = orjson.dumps(envelope)
    headers = [
        (b"content-type", b"application/json"),
        (b"content-length", str(len(body)).encode()),
    ]
    if status == 401:
        headers.append((b"www-authenticate", b'Bearer realm="respgate"'))
    if scope["type"] == "http":
        log_refusal(Request(scope), status, error)
        await send({"type": "http.response.start", "status": status, "headers": headers})
        await send({"type": "http.response.body", "body": body})
        return
    logger.info(
        "WEBSOCKET %s -> %d %s code=%s: %s", path, status, error.type, error.code, error.message
    )
    message: Message = await receive()  # websocket.connect
    if message["type"] != "websocket.connect":
        return
    if "websocket.http.response" in (scope.get("extensions") or {}):
        await send({"type": "websocket.http.response.start", "status": status, "headers": headers})
        await send({"type": "websocket.http.response.body", "body": body})
        return
    # A close frame's reason holds at most 123 bytes.
    reason = error.message[:120]
    await send({"type": "websocket.close", "code": WS_POLICY_VIOLATION, "reason": reason})
