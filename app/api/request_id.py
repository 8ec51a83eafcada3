"""Request ids: every HTTP request and WebSocket gets one, and every answer says it.

A pure ASGI middleware, outermost (``install_request_ids`` puts it around Starlette's whole
stack, so a 500 from an unexpected error and a 401 of the authentication middleware carry it
too): the client's ``x-request-id`` when it is sane (1 to 128 characters of
``A-Z a-z 0-9 . _ : + / = -``), else a new ``req_`` + 32 hex digits. It is set in
``core.request_id.REQUEST_ID`` for the request's duration, so every log line carries it
(``core.request_id.install_log_records``) and ``client_headers`` sends it upstream; the
response's headers (JSON, SSE, errors; a WebSocket's handshake) return it as ``x-request-id``.
"""

from __future__ import annotations

import random
import re
from typing import Any

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from app.core.request_id import REQUEST_ID, install_log_records

HEADER = b"x-request-id"
MAX_LENGTH = 128
_SANE = re.compile(rb"[A-Za-z0-9._:+/=-]{1,%d}" % MAX_LENGTH)


def new_request_id() -> str:
    """``req_`` + 32 hex digits. An id must be unique, not secret: ``random``'s generator
    (seeded from the OS, and again in each forked worker) costs a tenth of ``secrets``'s
    system call per request."""
    return f"req_{random.getrandbits(128):032x}"


def request_id_of(scope: Scope) -> str:
    """The client's ``x-request-id`` if sane, else a new id."""
    for name, value in scope["headers"]:
        if name == HEADER:
            if _SANE.fullmatch(value):
                return str(value.decode("ascii"))
            break
    return new_request_id()


class RequestIdMiddleware:
    """See the module docstring."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        kind = scope["type"]
        if kind != "http" and kind != "websocket":
            await self.app(scope, receive, send)
            return
        request_id = request_id_of(scope)
        header = (HEADER, request_id.encode("ascii"))

        async def send_with_id(message: Message) -> None:
            if message["type"] in _STARTS:
                message["headers"] = [*message.get("headers", ()), header]
            await send(message)

        token = REQUEST_ID.set(request_id)
        try:
            await self.app(scope, receive, send_with_id)
        finally:
            REQUEST_ID.reset(token)


# The messages that carry the answer's headers: an HTTP response, a WebSocket's accept, and
# the HTTP response that refuses a WebSocket handshake.
_STARTS = frozenset({"http.response.start", "websocket.accept", "websocket.http.response.start"})


def install_request_ids(app: Any) -> None:
    """Run ``RequestIdMiddleware`` around ``app``'s whole middleware stack (Starlette's server
    error middleware included), and make log records carry the request id."""
    install_log_records()
    build = app.build_middleware_stack

    def build_with_request_ids() -> ASGIApp:
        return RequestIdMiddleware(build())

    app.build_middleware_stack = build_with_request_ids
