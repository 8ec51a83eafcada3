"""What the ``rest`` engine's tests share: calls, a fake simulator, a local aiohttp server."""

from __future__ import annotations

import contextlib
import ssl
from collections.abc import AsyncIterator, Mapping, Sequence
from typing import Any

import orjson
from aiohttp import web
from aiohttp.test_utils import TestServer

from app.core.engines import EngineCall, EngineResult, ToolSpec
from app.protocol.json_types import JsonObject


def tool(
    binding: Mapping[str, Any] | None,
    parameters: JsonObject | None = None,
    name: str = "t",
) -> ToolSpec:
    return ToolSpec(
        namespace="svc",
        name=name,
        parameters=parameters or {"type": "object", "properties": {}},
        binding=binding,
    )


def call(
    spec: ToolSpec, arguments: JsonObject | str | None = None, call_id: str = "c1"
) -> EngineCall:
    text = arguments if isinstance(arguments, str) else orjson.dumps(arguments or {}).decode()
    return EngineCall(call_id=call_id, tool=spec, arguments=text)


class FakeSimulator:
    """A ``ToolEngine`` that answers every call with ``{"simulated": <tool name>}`` and notes
    the sessions it was given (the ``lm`` engine's stand-in)."""

    def __init__(self) -> None:
        self.setups: list[tuple[str, JsonObject | None]] = []
        self.teardowns: list[str] = []
        self.live: set[str] = set()

    async def setup(self, session_id: str, state: JsonObject | None = None) -> None:
        self.setups.append((session_id, state))
        self.live.add(session_id)

    async def execute(self, session_id: str, calls: Sequence[EngineCall]) -> list[EngineResult]:
        raise AssertionError("the rest engine's simulate must not execute")

    async def simulate(self, session_id: str, calls: Sequence[EngineCall]) -> list[EngineResult]:
        assert session_id in self.live
        return [
            EngineResult(
                call_id=c.call_id, output=orjson.dumps({"simulated": c.tool.name}).decode()
            )
            for c in calls
        ]

    async def teardown(self, session_id: str) -> None:
        self.teardowns.append(session_id)
        self.live.discard(session_id)

    def get_session_state(self, session_id: str) -> JsonObject:
        return {"history": []}


@contextlib.asynccontextmanager
async def local_server(
    app: web.Application, ssl_context: ssl.SSLContext | None = None
) -> AsyncIterator[str]:
    """``app`` on a free port of 127.0.0.1 in this event loop; yields its base URL."""
    server = TestServer(app, host="127.0.0.1")
    await server.start_server(ssl=ssl_context)
    try:
        scheme = "https" if ssl_context is not None else "http"
        yield f"{scheme}://127.0.0.1:{server.port}"
    finally:
        await server.close()
