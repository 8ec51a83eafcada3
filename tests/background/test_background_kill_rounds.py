"""A real ``respgate serve`` killed with SIGKILL after a background tool loop's first round: the
gateway that takes the job over on the same PostgreSQL continues from that round's checkpoint.
The MCP server (a real one, over streamable HTTP) runs the call once; the upstream (a real
socket) sees round 2's request twice, the same both times, and round 1's never again."""

from __future__ import annotations

import asyncio
import os
import signal
import threading
import time
from pathlib import Path
from typing import Any

import openai
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from app.main import create_app
from app.protocol.json_types import JsonObject
from app.settings import Settings
from tests.background.test_background_api import events_of, wait_for_status
from tests.background.test_background_kill import LEASE, killable_config, postgres_url
from tests.fakes import function_call, message
from tests.helpers import (
    gateway_process,
    in_process,
    local_egress,
    local_egress_toml,
    openai_client,
    responses_app,
    serve_in_thread,
)

__all__ = ["postgres_url"]  # the fixture: a throwaway PostgreSQL database (skips without one)


class Ledger:
    """A real MCP server whose ``add`` tool counts its calls."""

    def __init__(self) -> None:
        self.calls: list[tuple[int, int]] = []

    def app(self) -> Starlette:
        from mcp.server.mcpserver import MCPServer  # the MCP SDK is slow to import

        server = MCPServer("ledger")

        @server.tool(description="Add two numbers")
        def add(a: int, b: int) -> int:
            self.calls.append((a, b))
            return a + b

        app: Starlette = server.streamable_http_app()
        return app


class TwoRoundUpstream:
    """Round 1: a call to the ledger's ``add``. Round 2: the first request waits until
    ``release`` (the gateway that sent it is killed meanwhile); later ones answer."""

    def __init__(self) -> None:
        self.bodies: list[JsonObject] = []
        self.second_arrived = threading.Event()
        self.released = threading.Event()

    def app(self) -> Starlette:
        async def infer(request: Request) -> Response:
            body = await request.json()
            self.bodies.append(body)
            if len(self.bodies) == 1:
                [name] = [t["name"] for t in body["tools"] if str(t["name"]).endswith("add")]
                output = [function_call(name, '{"a": 2, "b": 3}', call_id="call_round_1")]
            else:
                if len(self.bodies) == 2:
                    self.second_arrived.set()
                    await asyncio.to_thread(self.released.wait, 60)
                output = [message("2 and 3 make 5")]
            return JSONResponse({"object": "response", "status": "completed", "output": output})

        return responses_app(infer)


def test_a_killed_gateways_tool_loop_continues_from_its_last_round(
    postgres_url: str, tmp_path: Path
) -> None:
    ledger, upstream = Ledger(), TwoRoundUpstream()
    with (
        serve_in_thread(ledger.app()) as ledger_url,
        serve_in_thread(upstream.app()) as upstream_url,
    ):
        tools: list[Any] = [
            {
                "type": "mcp",
                "server_label": "ledger",
                "server_url": f"{ledger_url}/mcp",
                "require_approval": "never",
            }
        ]
        config = killable_config(tmp_path, upstream_url, postgres_url)
        config.write_text(config.read_text() + local_egress_toml())  # the ledger: loopback
        with gateway_process(config) as (url, proc):
            client = openai.OpenAI(base_url=f"{url}/v1", api_key="sk-test", max_retries=0)
            queued = client.responses.create(
                model="m", input="add 2 and 3", tools=tools, background=True
            )
            assert upstream.second_arrived.wait(30)  # round 1 is done: its checkpoint saved
            os.kill(proc.pid, signal.SIGKILL)
        upstream.released.set()
        time.sleep(LEASE * 1.5)  # the dead owner's lease lapses
        settings = Settings(
            upstream_url=upstream_url,
            database_url=postgres_url,
            data_dir=tmp_path / "data",
            background_lease_seconds=LEASE,
            egress=local_egress(),
        )
        with in_process(create_app(settings)) as http:
            survivor = openai_client(http)
            done = wait_for_status(survivor, queued.id, {"completed", "failed"})
            events = events_of(survivor.responses.retrieve(queued.id, stream=True))
    assert done.status == "completed", done.error
    assert [item.type for item in done.output] == ["mcp_list_tools", "mcp_call", "message"]
    assert done.output[1].output == "5"  # type: ignore[union-attr]
    assert ledger.calls == [(2, 3)]  # the call ran once, in the killed gateway
    assert len(upstream.bodies) == 3  # round 1, round 2 (killed), round 2 again: no more
    assert upstream.bodies[2]["input"] == upstream.bodies[1]["input"]
    fed = [i for i in upstream.bodies[2]["input"] if i.get("type") == "function_call_output"]
    assert [(i["call_id"], i["output"]) for i in fed] == [("call_round_1", "5")]
    numbers = [e["sequence_number"] for e in events]
    assert numbers == sorted(set(numbers))
    restarts = [e for e in events if e["type"] == "response.in_progress"]
    assert [len(e["response"]["output"]) for e in restarts] == [0, 2]  # back to round 1's end
