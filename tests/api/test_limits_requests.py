"""The ``[limits]`` on what a request may carry, each refused in OpenAI's envelope (Anthropic's on
``/v1/messages``) with a 400 before anything reaches the upstream or an MCP server: tools and MCP
servers per request, and JSON nesting depth on every JSON route and WebSocket frame (a body nested
a few hundred levels deep used to be a 500)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import anthropic
import openai
import orjson
import pytest
from starlette.testclient import TestClient

from app.main import create_app
from app.protocol.json_types import JsonObject
from app.settings import Settings
from tests.fakes import FakeEmbedder, FakeUpstream
from tests.helpers import IN_PROCESS_URL, in_process, openai_client

ANSWER: JsonObject = {
    "status": "completed",
    "output": [
        {
            "type": "message",
            "role": "assistant",
            "content": [{"type": "output_text", "text": "hi", "annotations": []}],
        }
    ],
    "usage": {"input_tokens": 1, "output_tokens": 1, "total_tokens": 2},
}


def function(name: str) -> JsonObject:
    return {"type": "function", "name": name, "parameters": {"type": "object", "properties": {}}}


def unreachable_mcp(label: str) -> JsonObject:
    # Port 9 (discard): never contacted, the request is refused before any MCP listing.
    return {"type": "mcp", "server_label": label, "server_url": "http://127.0.0.1:9/mcp"}


@pytest.fixture
def gateway() -> Iterator[tuple[TestClient, FakeUpstream]]:
    upstream = FakeUpstream(
        body=ANSWER, events=[{"type": "response.completed", "response": ANSWER}]
    )
    limits = {"max_tools": 3, "max_mcp_servers": 1}
    app = create_app(Settings(limits=limits), upstream=upstream, embedder=FakeEmbedder())
    with in_process(app) as http:
        yield http, upstream


def refusal(caught: pytest.ExceptionInfo[openai.APIStatusError]) -> JsonObject:
    assert caught.value.status_code == 400
    body = caught.value.body
    assert isinstance(body, dict) and set(body) == {"message", "type", "param", "code"}, body
    assert body["type"] == "invalid_request_error"
    return body


# ----------------------------------------------------------------------------- tools


@pytest.mark.parametrize(
    "tools",
    [
        [function(f"f{n}") for n in range(4)],
        # a namespace counts its inner tools
        [
            function("f"),
            {"type": "namespace", "name": "ns", "tools": [function(f"g{n}") for n in range(3)]},
        ],
    ],
    ids=["functions", "namespace"],
)
def test_too_many_tools_is_a_400_naming_tools(
    gateway: tuple[TestClient, FakeUpstream], tools: list[JsonObject]
) -> None:
    http, upstream = gateway
    client = openai_client(http)
    for stream in (False, True):
        with pytest.raises(openai.BadRequestError) as caught:
            client.responses.create(model="m", input="hi", tools=tools, stream=stream)  # type: ignore[call-overload]
        error = refusal(caught)
        assert (error["param"], error["code"]) == ("tools", "array_above_max_length")
        assert "maximum length 3, but got an array with length 4" in error["message"]
    with pytest.raises(openai.BadRequestError) as caught:  # refused before it is queued
        client.responses.create(model="m", input="hi", tools=tools, background=True)  # type: ignore[arg-type]
    assert refusal(caught)["code"] == "array_above_max_length"
    assert upstream.requests == []
    # at the limit: served
    client.responses.create(model="m", input="hi", tools=tools[1:])  # type: ignore[arg-type]
    assert len(upstream.requests) == 1


def test_too_many_mcp_servers_is_a_400_before_any_server_is_contacted(
    gateway: tuple[TestClient, FakeUpstream],
) -> None:
    http, upstream = gateway
    client = openai_client(http)
    with pytest.raises(openai.BadRequestError) as caught:
        client.responses.create(
            model="m",
            input="hi",
            tools=[unreachable_mcp("a"), unreachable_mcp("b")],  # type: ignore[list-item]
        )
    error = refusal(caught)
    assert (error["param"], error["code"]) == ("tools", "too_many_mcp_servers")
    assert "2 MCP servers" in error["message"]
    assert upstream.requests == []


def test_too_many_tools_on_the_messages_api_is_anthropics_400(
    gateway: tuple[TestClient, FakeUpstream],
) -> None:
    http, upstream = gateway
    client = anthropic.Anthropic(
        base_url=IN_PROCESS_URL, api_key="k", http_client=http, max_retries=0
    )
    tools: Any = [
        {"name": f"t{n}", "input_schema": {"type": "object", "properties": {}}} for n in range(4)
    ]
    with pytest.raises(anthropic.BadRequestError) as caught:
        client.messages.create(
            model="m", max_tokens=5, messages=[{"role": "user", "content": "hi"}], tools=tools
        )
    body = caught.value.body
    assert isinstance(body, dict) and body["type"] == "error"
    assert body["error"]["type"] == "invalid_request_error"
    assert "maximum length 3" in body["error"]["message"]
    assert upstream.requests == []


def test_too_many_tools_in_a_websocket_frame_is_an_error_frame(
    gateway: tuple[TestClient, FakeUpstream],
) -> None:
    http, upstream = gateway
    frame = {"type": "response.create", "model": "m", "input": "hi"}
    with http.websocket_connect("/v1/responses") as socket:
        socket.send_text(
            orjson.dumps({**frame, "tools": [function(f"f{n}") for n in range(4)]}).decode()
        )
        refused = socket.receive_json()
        assert refused["type"] == "error" and refused["status"] == 400
        assert refused["error"]["code"] == "array_above_max_length"
        socket.send_text(orjson.dumps(frame).decode())  # the socket stays open
        events = [socket.receive_json() for _ in range(3)]
    assert events[0]["type"] == "response.created"
    assert len(upstream.requests) == 1


# ----------------------------------------------------------------------------- JSON depth


def nested(depth: int) -> Any:
    """A JSON value ``depth`` containers deep: lists, with an object at the bottom."""
    value: Any = {"x": 1}
    for _ in range(depth - 1):
        value = [value]
    return value


DEEP = nested(300)  # past the default of 128; orjson would parse it, its writer would not


def deep_body(fields: JsonObject, depth: int = 300) -> bytes:
    """``fields`` plus ``"deep"``: a value ``depth`` containers deep, written by hand (orjson
    writes at most 254 levels)."""
    head = orjson.dumps(fields)[:-1]
    value = b"[" * (depth - 1) + b'{"x":1}' + b"]" * (depth - 1)
    return head + b',"deep":' + value + b"}"


def assert_too_deep(error: JsonObject) -> None:
    assert error["type"] == "invalid_request_error"
    assert error["code"] == "json_too_deeply_nested"
    assert "more than 128 levels deep" in error["message"]


def test_a_deeply_nested_body_is_a_400_through_the_sdk(
    gateway: tuple[TestClient, FakeUpstream],
) -> None:
    http, upstream = gateway
    client = openai_client(http)
    for stream in (False, True):
        with pytest.raises(openai.BadRequestError) as caught:
            client.responses.create(model="m", input="hi", stream=stream, extra_body={"deep": DEEP})  # type: ignore[call-overload]
        assert_too_deep(refusal(caught))
    # deeper than orjson parses at all (1,024), which the SDK cannot send: the same answer
    reply = http.post("/v1/responses", content=deep_body({"model": "m"}, 1100))
    assert reply.status_code == 400
    assert_too_deep(reply.json()["error"])
    assert upstream.requests == []


@pytest.mark.parametrize(
    "path",
    [
        "/v1/responses/input_tokens",
        "/v1/responses/compact",
        "/v1/conversations",
        "/v1/vector_stores",
    ],
)
def test_a_deeply_nested_body_is_a_400_on_every_json_route(
    gateway: tuple[TestClient, FakeUpstream], path: str
) -> None:
    http, upstream = gateway
    # Raw HTTP: these bodies are not the SDK's to send (the nesting sits in a field each route
    # would refuse anyway, once parsed).
    reply = http.post(path, content=deep_body({"model": "m"}))
    assert reply.status_code == 400, reply.text
    assert_too_deep(reply.json()["error"])
    assert upstream.requests == []


def test_a_deeply_nested_body_on_the_messages_api_is_anthropics_400(
    gateway: tuple[TestClient, FakeUpstream],
) -> None:
    http, _ = gateway
    for path in ("/v1/messages", "/v1/messages/count_tokens"):
        body = {"model": "m", "max_tokens": 5, "messages": []}
        reply = http.post(path, content=deep_body(body))
        assert reply.status_code == 400, reply.text
        error = reply.json()
        assert error["type"] == "error" and error["error"]["type"] == "invalid_request_error"
        assert "more than 128 levels deep" in error["error"]["message"]


def test_a_deeply_nested_websocket_frame_is_an_error_frame(
    gateway: tuple[TestClient, FakeUpstream],
) -> None:
    http, _ = gateway
    with http.websocket_connect("/v1/responses") as socket:
        frame = {"type": "response.create", "model": "m", "input": "hi"}
        socket.send_bytes(deep_body(frame))
        refused = socket.receive_json()
    assert refused["type"] == "error" and refused["status"] == 400
    assert_too_deep(refusal_of(refused))


def refusal_of(frame: JsonObject) -> JsonObject:
    error: JsonObject = frame["error"]
    return error


def test_the_deepest_configurable_body_is_served_and_stored() -> None:
    """At the ceiling (200), a deeply nested tool schema goes through, is echoed and stored:
    nothing on the way breaks (the old 500 came from orjson's 254-level writer)."""
    upstream = FakeUpstream(body=ANSWER)
    app = create_app(Settings(limits={"max_json_depth": 200}), upstream=upstream)
    tool = {**function("deep"), "parameters": {"type": "object", "x": nested(196)}}
    with in_process(app) as http:
        client = openai_client(http)
        response = client.responses.create(model="m", input="hi", tools=[tool])  # type: ignore[list-item]
        assert client.responses.retrieve(response.id).id == response.id
        too_deep = {**function("deeper"), "parameters": {"type": "object", "x": nested(197)}}
        with pytest.raises(openai.BadRequestError) as caught:
            client.responses.create(model="m", input="hi", tools=[too_deep])  # type: ignore[list-item]
        assert "more than 200 levels deep" in refusal(caught)["message"]
