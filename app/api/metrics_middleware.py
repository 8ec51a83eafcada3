"""``MetricsMiddleware``: pure ASGI, outermost; serves ``GET /metrics`` and measures every
other HTTP request.

Per request it keeps an ``app.api.metrics.Exchange`` in the scope (the route names the model
on it), wraps ``send`` to see the status and whether the answer is an SSE stream (the open
streams gauge), and when the answer is over records one count and one duration under the
matched route's template (``/v1/responses/{response_id}``, never the raw path; ``unmatched``
when no route matched), the method, the status (499: the client left before an answer) and the
model's label. An upstream failure the error handler answered (``ERROR_SCOPE_KEY``) is counted
by its code. WebSockets and lifespan events pass through untouched.

``/metrics`` answers ``GET`` and ``HEAD`` to whoever ``MetricsAccess`` lets in
(``app.options.metrics`` says who), else 401/403 in OpenAI's envelope; it is not in the
OpenAPI document and is not counted itself.
"""

from __future__ import annotations

import asyncio
import hmac
import time

import orjson
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from app.api.auth import credential_of
from app.api.errors import ERROR_SCOPE_KEY
from app.api.metrics import EXCHANGE_KEY, OTHER, Exchange, GatewayMetrics
from app.errors import UpstreamError, UpstreamHTTPError

METRICS_PATH = "/metrics"
_METHODS = frozenset({"GET", "POST", "PUT", "PATCH", "DELETE", "HEAD", "OPTIONS"})
CLIENT_CLOSED = 499
UNMATCHED = "unmatched"

TOKEN_REQUIRED = (
    "Reading /metrics needs the metrics token: Authorization: Bearer <[metrics] token>."
)
NOT_SERVED = (
    "/metrics is not served to clients while authentication is on: set [metrics] token "
    "(RESPGATE_METRICS__TOKEN or RESPGATE_METRICS__TOKEN_FILE) and scrape with it."
)


class MetricsAccess:
    """Who may read ``/metrics``: the holder of ``token`` when one is set, else everyone when
    ``open`` (client authentication is off) and nobody otherwise."""

    def __init__(self, token: str | None, *, open: bool) -> None:
        self._token = token.encode() if token is not None else None
        self.open = open

    def refusal(self, scope: Scope) -> tuple[int, str] | None:
        """None when the request may read the metrics, else its status and message."""
        if self._token is None:
            return None if self.open else (403, NOT_SERVED)
        credential = credential_of(scope)
        if credential is not None and hmac.compare_digest(credential.encode(), self._token):
            return None
        return 401, TOKEN_REQUIRED


def upstream_error_code(error: object) -> str | None:
    """The ``code`` label of an error the handler answered, when the upstream failed."""
    if not isinstance(error, UpstreamError):
        return None
    if isinstance(error, UpstreamHTTPError):
        return f"upstream_http_{error.status_code // 100}xx"
    return error.code or "upstream_error"


class MetricsMiddleware:
    """See the module docstring."""

    def __init__(self, app: ASGIApp, metrics: GatewayMetrics, access: MetricsAccess) -> None:
        self.app = app
        self.metrics = metrics
        self.access = access
        self._paths: dict[object, str] | None = None  # each plain route's path, by endpoint

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        if scope["path"] == METRICS_PATH:
            await self._scrape(scope, send)
            return
        metrics = self.metrics
        exchange = Exchange(metrics, time.perf_counter())
        scope[EXCHANGE_KEY] = exchange
        status = 0
        stream = False

        async def sending(message: Message) -> None:
            nonlocal status, stream
            if message["type"] == "http.response.start":
                status = message["status"]
                for name, value in message.get("headers") or ():
                    if name == b"content-type":
                        if value.startswith(b"text/event-stream"):
                            stream = True
                            metrics.streams += 1
                        break
            await send(message)

        try:
            await self.app(scope, receive, sending)
        except asyncio.CancelledError:
            status = status or CLIENT_CLOSED
            raise
        except BaseException:
            status = status or 500
            raise
        finally:
            if stream:
                metrics.streams -= 1
            self._record(scope, exchange, status or 500)

    def _record(self, scope: Scope, exchange: Exchange, status: int) -> None:
        metrics = self.metrics
        template = self._template(scope)
        method = scope["method"]
        model = metrics.models.label(exchange.model)
        seconds = time.perf_counter() - exchange.started
        metrics.record_request(
            template, method if method in _METHODS else "other", status, model, seconds
        )
        error = scope.get(ERROR_SCOPE_KEY)
        if error is not None:
            code = upstream_error_code(error)
            if code is not None:
                metrics.record_upstream_error(code)

    def _template(self, scope: Scope) -> str:
        """The matched route's path template: FastAPI's routes leave themselves in the scope,
        plain Starlette routes (the hot ``POST /v1/responses``) their endpoint."""
        path = getattr(scope.get("route"), "path", None)
        if isinstance(path, str):
            return path
        endpoint = scope.get("endpoint")
        if endpoint is None:
            return UNMATCHED
        paths = self._paths
        if paths is None:
            routes = getattr(scope.get("router"), "routes", ())
            paths = self._paths = {
                route.endpoint: route.path
                for route in routes
                if isinstance(getattr(route, "path", None), str) and hasattr(route, "endpoint")
            }
        return paths.get(endpoint, OTHER)

    async def _scrape(self, scope: Scope, send: Send) -> None:
        refusal = self.access.refusal(scope)
        if refusal is None and scope["method"] not in ("GET", "HEAD"):
            refusal = (405, "Method not allowed on /metrics: use GET.")
        if refusal is not None:
            status, message = refusal
            code = {401: "invalid_api_key", 403: "metrics_not_served"}.get(status)
            error = {"message": message, "type": "invalid_request_error", "param": None}
            body = orjson.dumps({"error": {**error, "code": code}})
            headers = [(b"content-type", b"application/json")]
            if status == 401:
                headers.append((b"www-authenticate", b'Bearer realm="respgate-metrics"'))
            await _answer(send, status, headers, body)
            return
        body, content_type = self.metrics.exposition()
        headers = [(b"content-type", content_type.encode())]
        await _answer(send, 200, headers, b"" if scope["method"] == "HEAD" else body)


async def _answer(send: Send, status: int, headers: list[tuple[bytes, bytes]], body: bytes) -> None:
    headers.append((b"content-length", str(len(body)).encode()))
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})
