"""Rate limits per caller (``[limits] requests_per_minute``, ``tokens_per_minute``, their
per-key and per-tenant overrides): a pure ASGI middleware over ``/v1/`` paths.

The caller is the principal the authentication middleware put on the scope
(``app.api.tenancy.principal_of``): its key id when it has one (``key:<id>``), else its tenant
(``tenant:<name>``); without authentication (no key, the default tenant) one bucket per client
address or one for everyone (``anonymous``). This middleware must therefore run *inside* the
authentication middleware, which is added after it (``app.main.create_app``).

An HTTP request is admitted (one request counted) or refused with 429 ``rate_limit_exceeded`` in
OpenAI's envelope (Anthropic's on ``/v1/messages``), ``retry-after`` and OpenAI's
``x-ratelimit-*`` headers, which every admitted answer carries too. The tokens of a response are
counted when it completes (``charge_usage``, called by the routes: JSON answers, streams, and
each WebSocket turn), and refuse the caller's next request once its minute's tokens are spent. A
WebSocket connection is not counted itself: each ``response.create`` frame is
(``admit_turn``), and a refused one is an ``error`` frame with status 429.
"""

from __future__ import annotations

import logging
import time

import orjson
from starlette.applications import Starlette
from starlette.requests import HTTPConnection
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from app.api.rate_counter import Admission, Bucket, Kind, RateCounter, duration
from app.api.tenancy import principal_of
from app.core.tenancy import DEFAULT_TENANT
from app.errors import GatewayError
from app.frontends.anthropic.errors import error_envelope
from app.options.limits import LimitsSettings
from app.protocol.json_types import JsonObject

logger = logging.getLogger(__name__)

# Where the middleware leaves the caller's meter: scope["state"][METER_KEY].
METER_KEY = "respgate.rate_meter"
_ANTHROPIC_PREFIX = "/v1/messages"
_LABELS = {"requests": "requests per minute (RPM)", "tokens": "tokens per minute (TPM)"}


class RateLimitError(GatewayError):
    """429: the caller is over one of its rates (``type`` names which, as OpenAI's does)."""

    status_code = 429
    code = "rate_limit_exceeded"

    def __init__(self, kind: Kind, admission: Admission) -> None:
        window = admission.windows[kind]
        wait = duration(window.reset_in(time.time()))
        super().__init__(
            f"Rate limit reached for {_LABELS[kind]}: Limit {window.limit}, Remaining "
            f"{window.remaining}. Please try again in {wait}."
        )
        self.type = kind


class Meter:
    """One caller's counters, as a request sees them."""

    __slots__ = ("bucket", "counter")

    def __init__(self, counter: RateCounter, bucket: Bucket) -> None:
        self.counter = counter
        self.bucket = bucket

    async def admit(self) -> Admission:
        return await self.counter.admit(self.bucket)

    async def charge(self, response: JsonObject | None) -> None:
        """Count the tokens of a finished response (its ``usage``)."""
        tokens = usage_tokens(response)
        if tokens:
            await self.counter.charge(self.bucket, tokens)


def usage_tokens(response: JsonObject | None) -> int:
    """The tokens a response (or chat completion) used: ``total_tokens``, else its parts."""
    usage = response.get("usage") if isinstance(response, dict) else None
    if not isinstance(usage, dict):
        return 0
    total = usage.get("total_tokens")
    if isinstance(total, int):
        return total
    parts = ("input_tokens", "output_tokens", "prompt_tokens", "completion_tokens")
    return sum(v for k in parts if isinstance(v := usage.get(k), int))


def meter_of(connection: HTTPConnection) -> Meter | None:
    """The caller's meter, None when no rate limit applies to it."""
    meter = (connection.scope.get("state") or {}).get(METER_KEY)
    return meter if isinstance(meter, Meter) else None


async def charge_usage(connection: HTTPConnection, response: JsonObject | None) -> None:
    """Count the tokens of ``response`` for the caller of ``connection`` (when it has a limit)."""
    meter = meter_of(connection)
    if meter is not None:
        await meter.charge(response)


async def admit_turn(connection: HTTPConnection) -> None:
    """A WebSocket ``response.create``: counted, or ``RateLimitError``."""
    meter = meter_of(connection)
    if meter is None:
        return
    admission = await meter.admit()
    if admission.refused is not None:
        raise RateLimitError(admission.refused, admission)


class RateLimitMiddleware:
    """See the module docstring. Pure ASGI: nothing is done for a caller without limits."""

    def __init__(self, app: ASGIApp, settings: LimitsSettings, counter: RateCounter) -> None:
        self.app = app
        self.settings = settings
        self.counter = counter

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        kind = scope["type"]
        if kind == "lifespan":
            await self.app(scope, receive, self._closing(send))
            return
        if kind not in ("http", "websocket") or not scope["path"].startswith("/v1/"):
            await self.app(scope, receive, send)
            return
        bucket = self._bucket(scope)
        if bucket is None:
            await self.app(scope, receive, send)
            return
        meter = Meter(self.counter, bucket)
        scope.setdefault("state", {})[METER_KEY] = meter
        if kind == "websocket":  # each response.create frame is admitted (admit_turn)
            await self.app(scope, receive, send)
            return
        admission = await meter.admit()
        if admission.refused is not None:
            await self._refuse(scope, send, admission)
            return
        headers = admission.headers()

        async def send_with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                message["headers"] = [*message.get("headers", []), *headers]
            await send(message)

        await self.app(scope, receive, send_with_headers)

    def _bucket(self, scope: Scope) -> Bucket | None:
        principal = principal_of(HTTPConnection(scope))
        requests, tokens = self.settings.rate_for(principal.key_id, principal.tenant)
        if not requests and not tokens:
            return None
        if principal.key_id is not None:
            key = f"key:{principal.key_id}"
        elif principal.tenant != DEFAULT_TENANT or self.settings.anonymous == "global":
            key = f"tenant:{principal.tenant}"
        else:
            client = scope.get("client")
            key = f"client:{client[0] if client else 'unknown'}"
        return Bucket(key, requests, tokens)

    async def _refuse(self, scope: Scope, send: Send, admission: Admission) -> None:
        assert admission.refused is not None
        error = RateLimitError(admission.refused, admission)
        status, body = error.status_code, error.to_envelope()
        path = str(scope["path"])
        if path.startswith(_ANTHROPIC_PREFIX):
            status, body = error_envelope(error)
        logger.info(
            "%s %s -> 429 %s code=%s: %s",
            scope.get("method"),
            path,
            error.type,
            error.code,
            error.message,
        )
        payload = orjson.dumps(body)
        headers = [
            (b"content-type", b"application/json"),
            (b"content-length", str(len(payload)).encode()),
            *admission.headers(),
        ]
        await send({"type": "http.response.start", "status": status, "headers": headers})
        await send({"type": "http.response.body", "body": payload})

    def _closing(self, send: Send) -> Send:
        """``send`` for the lifespan: the counter's connections close before shutdown ends."""

        async def closing_send(message: Message) -> None:
            if message["type"] in ("lifespan.shutdown.complete", "lifespan.shutdown.failed"):
                await self.counter.aclose()
            await send(message)

        return closing_send


def install_rate_limits(app: Starlette, settings: LimitsSettings, redis_url: str | None) -> None:
    """Add the middleware to ``app`` when any caller has a rate limit. Call it before the
    authentication middleware is added (Starlette runs the last added outermost), so that the
    principal is on the scope when a request gets here."""
    if settings.rate_limited:
        app.add_middleware(RateLimitMiddleware, settings=settings, counter=RateCounter(redis_url))
