"""``app.api.server_send``: a stream's chunks between the first and the last message go through
the server's own ``send``, under the middlewares' wrappers; the start and the last message go
through every layer. The premise (no layer of the gateway's stack changes or counts a body
chunk) is checked against the real app's middleware stack, with every optional layer on."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from starlette.types import Message, Scope

from app.api.server_send import SERVER_SEND, ServerSendMiddleware, server_send
from app.api.sse_response import PING_FRAME, EventStreamResponse
from app.main import create_app
from app.settings import Settings
from tests.api.test_sse_response import GET, Client, until

# Each of these acts on ``http.response.start`` only (a header added, the status noted, "the
# response has started"), FastAPI's telemetry on the last message too; none on a body chunk
# in between. A layer not listed here fails the test below: look at what its ``send`` does
# with a body chunk before adding it.
CHUNK_BLIND_LAYERS = {
    "app.api.server_send.ServerSendMiddleware",
    "app.api.request_id.RequestIdMiddleware",
    "starlette.middleware.errors.ServerErrorMiddleware",
    "fastapi.telemetry._asgi.ExceptionTelemetryMiddleware",
    "fastapi._body_limit.AppBodyLimitMiddleware",
    "app.api.metrics_middleware.MetricsMiddleware",
    "app.api.rate_limit.RateLimitMiddleware",
    "app.api.auth.AuthMiddleware",
    "starlette.middleware.exceptions.ExceptionMiddleware",
    "fastapi.middleware.asyncexitstack.AsyncExitStackMiddleware",
}


def layers_of(app: Any) -> list[str]:
    """The middleware stack ``app`` builds, outermost first, down to its router."""
    names: list[str] = []
    node = app.build_middleware_stack()
    while node is not app.router:
        names.append(f"{type(node).__module__}.{type(node).__qualname__}")
        node = node.app
    return names


def test_every_layer_of_the_real_stack_leaves_body_chunks_alone(tmp_path: Path) -> None:
    settings = Settings(
        upstream_url="http://127.0.0.1:1",
        data_dir=tmp_path,
        limits={"requests_per_minute": 100},
        tracing={"enabled": True},
        auth={"mode": "on", "keys": [{"key": "sk-test-server-send-0123456789", "tenant": "t"}]},
    )
    layers = layers_of(create_app(settings))
    assert layers[0] == "app.api.server_send.ServerSendMiddleware"  # outermost
    assert "app.api.rate_limit.RateLimitMiddleware" in layers
    assert "app.api.metrics_middleware.MetricsMiddleware" in layers
    assert set(layers) <= CHUNK_BLIND_LAYERS, set(layers) - CHUNK_BLIND_LAYERS


class Wrapped:
    """A middleware's ``send`` over ``inner``: records each message it passes."""

    def __init__(self, inner: Client) -> None:
        self.inner = inner
        self.passed: list[Message] = []

    async def send(self, message: Message) -> None:
        self.passed.append(message)
        await self.inner.send(message)


async def paced(*gates: asyncio.Event) -> AsyncIterator[bytes]:
    """``data: 1``, then one more frame after each gate opens."""
    yield b"data: 1\n\n"
    for n, gate in enumerate(gates, 2):
        await gate.wait()
        yield f"data: {n}\n\n".encode()


async def test_the_chunks_between_the_first_and_the_last_message_skip_the_wrappers() -> None:
    client = Client()
    wrapped = Wrapped(client)
    scope: Scope = {**GET, SERVER_SEND: client.send}
    second, third = asyncio.Event(), asyncio.Event()
    task = asyncio.create_task(
        EventStreamResponse(paced(second, third), ping=0)(scope, client.receive, wrapped.send)
    )
    await until(lambda: client.trace == ["send data: 1\n\n"])
    second.set()
    await until(lambda: client.trace == ["send data: 1\n\n", "send data: 2\n\n"])
    third.set()
    await asyncio.wait_for(task, 5)
    # Every byte reached the client, in order, the last message ending the body.
    assert client.trace == ["send data: 1\n\n", "send data: 2\n\n", "send data: 3\n\n, end"]
    # The start and the last message went through the wrapper; the chunks did not.
    assert [m["type"] for m in wrapped.passed] == ["http.response.start", "http.response.body"]
    assert wrapped.passed[-1] == {
        "type": "http.response.body",
        "body": b"data: 3\n\n",
        "more_body": False,
    }


async def test_pings_go_through_the_server_send_too() -> None:
    client = Client()
    wrapped = Wrapped(client)
    scope: Scope = {**GET, SERVER_SEND: client.send}
    gate = asyncio.Event()
    task = asyncio.create_task(
        EventStreamResponse(paced(gate), ping=0.05)(scope, client.receive, wrapped.send)
    )
    await until(lambda: f"send {PING_FRAME.decode()}" in client.trace)
    gate.set()
    await asyncio.wait_for(task, 5)
    assert [m["type"] for m in wrapped.passed] == ["http.response.start", "http.response.body"]


async def test_without_the_middleware_every_message_goes_through_the_send_given() -> None:
    client = Client()
    wrapped = Wrapped(client)
    second, third = asyncio.Event(), asyncio.Event()
    second.set()
    third.set()
    await EventStreamResponse(paced(second, third), ping=0)(GET, client.receive, wrapped.send)
    bodies = [m["body"] for m in wrapped.passed if m["type"] == "http.response.body"]
    assert b"".join(bodies) == b"data: 1\n\ndata: 2\n\ndata: 3\n\n"


@pytest.mark.parametrize("kind", ["http", "websocket", "lifespan"])
async def test_the_middleware_leaves_the_send_in_http_scopes_only(kind: str) -> None:
    seen: list[Scope] = []

    async def inner(scope: Scope, receive: Any, send: Any) -> None:
        seen.append(scope)

    async def send(message: Message) -> None:
        return None

    await ServerSendMiddleware(inner)({"type": kind}, Client().receive, send)
    assert (SERVER_SEND in seen[0]) is (kind == "http")
    assert server_send(seen[0], send) is send
