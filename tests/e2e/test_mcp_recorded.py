"""The shared ``mcp/*`` recordings: real Qwen3.5 traffic through a gateway with a counter server.

Each recording holds what a client saw from a gateway that ran the MCP calls itself. The model's
side of it is rebuilt as upstream rounds (its reasoning, then its calls as ``function_call``
items named ``mcp__counter__<tool>``; then its answer), replayed by the replay server, while a
local MCP server provides the same tools. The client (the official ``openai`` SDK) must see the
recording's output: the same items in the same order, the same calls, arguments and results,
and the same event sequence.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from mcp.server.mcpserver import MCPServer

from app.main import create_app
from app.protocol.json_types import JsonObject
from app.recording.cassette import load_cassette
from app.recording.replay import create_replay_app
from app.settings import Settings
from tests.fakes import scripted_cassette
from tests.helpers import in_process, local_egress, openai_client, serve_in_thread

RECORDINGS = [
    "mcp/mcp-gateway-counter-call-sum-and-echo-Qwen-Qwen3.5-35B-A3B-FP8-streaming.yaml",
    "mcp/mcp-gateway-counter-say-hello-Qwen-Qwen3.5-35B-A3B-FP8-nonstreaming.yaml",
    "mcp/mcp-gateway-counter-sum-missing-argument-Qwen-Qwen3.5-35B-A3B-FP8-streaming.yaml",
]


def recorded_counter() -> MCPServer:
    """The recording's counter server, as far as its answers show: ``sum``, an ``echo`` that
    answers with its arguments as JSON, ``say_hello``, listed in the recording's order."""
    server = MCPServer("counter")

    @server.tool(description="Repeat what you say")
    def echo(message: str) -> str:
        return json.dumps({"message": message}, separators=(",", ":"))

    @server.tool(description="Calculate the sum of two numbers")
    def sum(a: int, b: int) -> int:
        return a + b

    @server.tool(description="Say hello to the client")
    def say_hello() -> str:
        return "hello"

    return server


@contextlib.contextmanager
def serve_recorded_counter() -> Iterator[str]:
    with serve_in_thread(recorded_counter().streamable_http_app()) as base:
        yield f"{base}/mcp"


def recorded_exchange(path: Path) -> tuple[JsonObject, JsonObject, list[str]]:
    """The client's request, the final response it received, and the stream's event types."""
    turn = load_cassette(path).turns[0]
    request = dict(turn.request.body)
    if turn.response.sse is None:
        return request, dict(turn.response.body), []
    events = [
        json.loads(line[len("data: ") :])
        for line in turn.response.sse
        if line.startswith("data: {")
    ]
    return request, events[-1]["response"], [e["type"] for e in events]


def upstream_rounds(output: list[JsonObject]) -> list[list[JsonObject]]:
    """The model's rounds behind a gateway's output: every run of MCP calls ends a round."""
    rounds: list[list[JsonObject]] = [[]]
    for item in output:
        kind = item["type"]
        if kind == "mcp_list_tools":
            continue
        if kind == "mcp_call":
            rounds[-1].append(
                {
                    "id": f"fc_{item['id']}",
                    "type": "function_call",
                    "call_id": f"call_{item['id']}",
                    "name": f"mcp__{item['server_label']}__{item['name']}",
                    "arguments": item["arguments"],
                    "status": "completed",
                }
            )
            continue
        if rounds[-1] and rounds[-1][-1]["type"] == "function_call":
            rounds.append([])
        rounds[-1].append(item)
    return rounds


def view(item: JsonObject) -> JsonObject:
    """What must match between the recording and the gateway (ids, formatting aside)."""
    kind = item["type"]
    if kind == "mcp_list_tools":
        return {"type": kind, "server_label": item["server_label"]}
    if kind == "mcp_call":
        error = item.get("error")
        return {
            "type": kind,
            "server_label": item["server_label"],
            "name": item["name"],
            "arguments": json.loads(item["arguments"]),
            "status": item["status"],
            "output": item.get("output"),
            "error": error.get("type") if isinstance(error, dict) else error,
        }
    if kind == "message":
        return {"type": kind, "text": "".join(p.get("text", "") for p in item["content"])}
    if kind == "reasoning":
        content = item.get("content") or []
        return {"type": kind, "text": "".join(p.get("text", "") for p in content)}
    return {"type": kind}


def event_shape(types: list[str]) -> list[str]:
    """Event types without text deltas and with vLLM's reasoning part names folded in."""
    out: list[str] = []
    for kind in types:
        if kind.endswith(".delta") and "mcp_call_arguments" not in kind:
            continue
        kind = kind.replace("reasoning_part", "content_part")
        if not out or out[-1] != kind:
            out.append(kind)
    return out


@pytest.mark.parametrize("name", RECORDINGS, ids=lambda n: Path(n).stem)
def test_recorded_mcp_exchange_is_reproduced(shared_cassettes: Path, name: str) -> None:
    request, recorded, recorded_types = recorded_exchange(shared_cassettes / name)
    cassette = scripted_cassette(
        upstream_rounds(recorded["output"]), stream=bool(request.get("stream"))
    )
    with (
        serve_recorded_counter() as mcp_url,
        serve_in_thread(create_replay_app(cassette)) as replay_url,
        in_process(create_app(Settings(upstream_url=replay_url, egress=local_egress()))) as http,
    ):
        body = json.loads(json.dumps(request))
        for tool in body["tools"]:
            tool["server_url"] = mcp_url
        client = openai_client(http)
        kwargs = {k: v for k, v in body.items() if k != "stream"}
        if request.get("stream"):
            with client.responses.stream(**kwargs) as stream:
                types = [event.type for event in stream]
                final = stream.get_final_response().model_dump(mode="json")
        else:
            final = client.responses.create(**kwargs).model_dump(mode="json")
            types = []
        stored = client.responses.retrieve(final["id"]).model_dump(mode="json")

    expected = [view(item) for item in recorded["output"]]
    got = [view(item) for item in final["output"]]
    if "missing-argument" in name:
        # The recording's server is written in Rust (its message: "failed to deserialize
        # parameters: missing field `b`"); ours names the missing field in its own words.
        assert "b" in json.dumps(final["output"][2]["error"])
    assert got == expected
    assert [view(item) for item in stored["output"]] == expected
    assert final["status"] == recorded["status"] == "completed"
    listed = final["output"][0]["tools"]
    assert [t["name"] for t in listed] == [t["name"] for t in recorded["output"][0]["tools"]]
    if recorded_types:
        assert event_shape(types) == event_shape(recorded_types)
