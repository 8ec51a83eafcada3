"""The server's own ``send``, for the middle chunks of a streamed body.

Every middleware that watches a response wraps ``send`` in a function of its own (request
ids, the server error and exception middlewares, FastAPI's body limit and telemetry, metrics,
rate limits): about 0.5 µs a layer per ASGI message on this project's bench machine, seven
layers on the gateway's stack. Each of them acts on ``http.response.start`` (a header added,
the status noted, "the response has started") and, for telemetry, on the last body message;
none looks at a body chunk in between. A token stream is one such chunk per event, so
``ServerSendMiddleware`` (outermost, ``install_server_send``) leaves the server's ``send`` in
the scope and ``sse_response`` sends the chunks between the first and the last message
through it (bench/README.md, "Issue 19"). The start and the last message still pass through
every layer.

A middleware added later that changes or counts body chunks (compression, a byte counter)
breaks that premise: ``tests/api/test_server_send.py`` lists the layers of the real app, so
a new one has to be looked at and added there.
"""

from __future__ import annotations

from typing import Any

from starlette.types import ASGIApp, Receive, Scope, Send

SERVER_SEND = "respgate.server_send"


class ServerSendMiddleware:
    """Leave the server's ``send`` in an HTTP request's scope (``SERVER_SEND``)."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            scope[SERVER_SEND] = send
        await self.app(scope, receive, send)


def server_send(scope: Scope, send: Send) -> Send:
    """The server's ``send`` for body chunks between the first and the last message, or
    ``send`` itself when the app runs without ``ServerSendMiddleware``."""
    raw: Send | None = scope.get(SERVER_SEND)
    return send if raw is None else raw


def install_server_send(app: Any) -> None:
    """Run ``ServerSendMiddleware`` around ``app``'s whole middleware stack (call it last)."""
    build = app.build_middleware_stack

    def build_with_server_send() -> ASGIApp:
        return ServerSendMiddleware(build())

    app.build_middleware_stack = build_with_server_send
