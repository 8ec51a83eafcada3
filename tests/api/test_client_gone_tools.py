"""A client that leaves while the gateway runs its tool call cancels the call and the rest of the
loop, JSON or stream: no tool call task is left running, the upstream gets no further round,
nothing is stored.

The upstream is scripted (a call of the real counter MCP server's ``sleep`` tool, then a
message); the gateway is served on a real port; the client is a raw socket that sends its
request and closes. The gateway's event loop is asked which tool call tasks still run.
"""

from __future__ import annotations

import asyncio
import logging
import sqlite3
import time
from collections.abc import Mapping
from pathlib import Path

import pytest

from app.main import create_app
from app.protocol.json_types import JsonObject
from app.settings import Settings
from tests.api.test_client_gone import gone_lines, send_request
from tests.fakes import ScriptedUpstream, function_call, message
from tests.helpers import local_egress, serve_in_thread


class LoopRecordingUpstream(ScriptedUpstream):
    """A scripted upstream that remembers the gateway's event loop."""

    loop: asyncio.AbstractEventLoop | None = None

    async def create_response(self, body: JsonObject, headers: Mapping[str, str]) -> JsonObject:
        self.loop = asyncio.get_running_loop()
        return await super().create_response(body, headers)

    async def stream_response(self, body: JsonObject, headers: Mapping[str, str]) -> object:  # type: ignore[override]
        self.loop = asyncio.get_running_loop()
        return await super().stream_response(body, headers)


def running_tool_calls(upstream: LoopRecordingUpstream) -> int:
    """Tool call tasks (``CallRunner._run_one``) still running in the gateway."""
    if upstream.loop is None:
        return 0

    async def count() -> int:
        names = [getattr(t.get_coro(), "__qualname__", "") for t in asyncio.all_tasks()]
        return sum(1 for name in names if name.endswith("._run_one"))

    return asyncio.run_coroutine_threadsafe(count(), upstream.loop).result(10)


def wait_for(condition: object, timeout: float = 10.0) -> bool:
    deadline = time.monotonic() + timeout
    while not condition():  # type: ignore[operator]
        if time.monotonic() > deadline:
            return False
        time.sleep(0.02)
    return True


@pytest.mark.parametrize("stream", [False, True])
def test_a_client_gone_mid_tool_call_cancels_the_call(
    counter_url: str, caplog: pytest.LogCaptureFixture, _isolated_data_dir: Path, stream: bool
) -> None:
    caplog.set_level(logging.INFO, logger="app.api.disconnect")
    upstream = LoopRecordingUpstream(
        [[function_call("mcp__counter__sleep", '{"seconds": 60}')], [message("never")]]
    )
    tool = {
        "type": "mcp",
        "server_label": "counter",
        "server_url": counter_url,
        "require_approval": "never",
    }
    body = {"model": "m", "input": "wait", "tools": [tool], "stream": stream}
    app = create_app(Settings(egress=local_egress()), upstream=upstream)
    with serve_in_thread(app) as gateway:
        client = send_request(gateway, "/v1/responses", body)
        assert wait_for(lambda: running_tool_calls(upstream) == 1), "the tool call never started"
        client.close()
        assert wait_for(lambda: running_tool_calls(upstream) == 0), "the tool call kept running"
        assert len(upstream.requests) == 1  # no round after the client left
    with sqlite3.connect(_isolated_data_dir / "respgate.db") as db:
        assert db.execute("SELECT count(*) FROM responses").fetchone()[0] == 0
    if not stream:  # a stream's client goes after its start: the SSE response saw it go
        assert len(gone_lines(caplog)) == 1
