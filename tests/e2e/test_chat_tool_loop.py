"""The server-side tool loop and the store's continuations over a ``chat`` upstream.

The official ``openai`` SDK talks to the gateway (``upstream_kind="chat"``), which talks to a
scripted chat-completions server on a real port: each round is answered with the next answer of
its script (``chat.completion.chunk`` SSE or a ``chat.completion``, as the request's ``stream``
asks), and every request body is recorded. MCP calls run on the real counter MCP server
(``tests/mcp_servers/counter.py``, the ``counter_url`` fixture) over streamable HTTP.

Both sides are checked: what the client sees (items, the stream contract, the stored response and
its input items) and what went upstream (the MCP tools as chat ``tools``, the model's calls fed
back as an assistant message with ``tool_calls`` and ``tool`` messages carrying the real results,
the whole lowered history of a continuation as chat messages).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field
from typing import Any

import openai
import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from app.main import create_app
from app.protocol.json_types import JsonObject
from app.settings import Settings
from tests.e2e.test_chat_equivalence import (
    GET_WEATHER,
    WEATHER,
    Answer,
    Call,
    chat_chunks,
    chat_completion,
    sse_body,
)
from tests.helpers import (
    in_process,
    local_egress,
    openai_client,
    serve_in_thread,
    without_parsed,
)
from tests.lifecycle import assert_lifecycle

MODEL = "qwen3:8b"
INSTRUCTIONS = "Use the tools for arithmetic."
PROMPT = "What is 2 + 3? Use the sum tool."
FOLLOW_UP = "And 10 + 1?"
WEATHER_PROMPT = "What is the weather in Paris?"
WEATHER_OUTPUT = '{"temperature_c": 18, "conditions": "sunny"}'
SUM = "mcp__counter__sum"  # how the gateway names the counter server's sum tool upstream

both_modes = pytest.mark.parametrize("streamed", [True, False], ids=["stream", "json"])


# ----------------------------------------------------------------------------- the upstream


@dataclass
class ScriptedChatServer:
    """``POST /v1/chat/completions`` answered round after round from ``script``."""

    script: list[Answer]
    received: list[JsonObject] = field(default_factory=list)

    def app(self) -> Starlette:
        async def chat(request: Request) -> Response:
            body: JsonObject = json.loads(await request.body())
            self.received.append(body)
            if not self.script:
                return JSONResponse({"error": {"message": "the script has no answer left"}}, 500)
            answer = self.script.pop(0)
            if not body.get("stream"):
                return JSONResponse(chat_completion(answer, MODEL))
            frames = sse_body(chat_chunks(answer, MODEL), named=False)

            async def chunks() -> AsyncIterator[bytes]:
                for frame in frames:
                    yield frame
                    await asyncio.sleep(0)

            return StreamingResponse(chunks(), media_type="text/event-stream")

        return Starlette(routes=[Route("/v1/chat/completions", chat, methods=["POST"])])


@contextlib.contextmanager
def chat_stack(script: list[Answer]) -> Iterator[tuple[ScriptedChatServer, openai.OpenAI]]:
    """The scripted server and an SDK client of the gateway (kind ``chat``, in this process) in
    front of it."""
    server = ScriptedChatServer(list(script))
    with serve_in_thread(server.app()) as upstream_url:
        settings = Settings(upstream_url=upstream_url, upstream_kind="chat", egress=local_egress())
        app = create_app(settings)
        with in_process(app) as http:
            yield server, openai_client(http)
    assert server.script == [], "some scripted answers were never asked for"


# ----------------------------------------------------------------------------- the client's side


def dump(model: Any) -> JsonObject:
    data: JsonObject = model.model_dump(mode="json", warnings=False)
    return data


def respond(
    client: openai.OpenAI, streamed: bool, **fields: Any
) -> tuple[list[JsonObject], JsonObject]:
    """One response, streamed (events, stream contract, the SDK's accumulator) or not; the
    stored response equals the final one either way."""
    events: list[JsonObject] = []
    if streamed:
        with client.responses.stream(model=MODEL, **fields) as response_stream:
            events = [dump(event) for event in response_stream]
            final = without_parsed(dump(response_stream.get_final_response()))
        assert without_parsed(assert_lifecycle(events)) == final
    else:
        final = dump(client.responses.create(model=MODEL, **fields))
    assert dump(client.responses.retrieve(final["id"])) == final
    return events, final


def counter_tool(url: str) -> JsonObject:
    return {
        "type": "mcp",
        "server_label": "counter",
        "server_url": url,
        "require_approval": "never",
    }


def item_events(events: list[JsonObject], item_id: str) -> list[str]:
    """The event types of one item, consecutive deltas of a kind collapsed."""
    out: list[str] = []
    for event in events:
        mine = event.get("item_id") == item_id or (event.get("item") or {}).get("id") == item_id
        if mine and (not out or out[-1] != event["type"] or not event["type"].endswith("delta")):
            out.append(event["type"])
    return out


def text_of(item: JsonObject) -> str:
    assert item["type"] == "message"
    assert item["role"] == "assistant"
    return "".join(part["text"] for part in item["content"])


def assert_sum_call(item: JsonObject, arguments: JsonObject, output: str) -> None:
    assert item["type"] == "mcp_call"
    assert item["server_label"] == "counter"
    assert item["name"] == "sum"
    assert json.loads(item["arguments"]) == arguments
    assert item["output"] == output
    assert item["error"] is None
    assert item["status"] == "completed"


def input_items(client: openai.OpenAI, response_id: str) -> list[JsonObject]:
    page = client.responses.input_items.list(response_id, order="asc")
    return [dump(item) for item in page.data]


def user(text: str) -> JsonObject:
    return {"role": "user", "content": text}


def assistant_calls(*calls: tuple[str, str, str]) -> JsonObject:
    """The assistant message that carries the model's ``(id, name, arguments)`` calls."""
    return {
        "role": "assistant",
        "content": "",
        "tool_calls": [
            {"id": call_id, "type": "function", "function": {"name": name, "arguments": args}}
            for call_id, name, args in calls
        ],
    }


def tool_result(call_id: str, content: str) -> JsonObject:
    return {"role": "tool", "tool_call_id": call_id, "content": content}


# ----------------------------------------------------------------------------- MCP over chat

SUM_2_3 = Call("call_sum_23", SUM, ('{"a": 2', ', "b": 3}'))
SUM_10_1 = Call("call_sum_101", SUM, ('{"a": 10, ', '"b": 1}'))
MCP_SCRIPT = [
    Answer(calls=(SUM_2_3,), finish_reason="tool_calls", input_tokens=120, output_tokens=14),
    Answer(text=("2 + 3 ", "= 5."), input_tokens=150, output_tokens=7),
    Answer(calls=(SUM_10_1,), finish_reason="tool_calls", input_tokens=170, output_tokens=15),
    Answer(text=("10 + 1 ", "= 11."), input_tokens=200, output_tokens=8),
]


@both_modes
def test_mcp_tool_loop_and_continuation(counter_url: str, streamed: bool) -> None:
    tools = [counter_tool(counter_url)]
    with chat_stack(MCP_SCRIPT) as (server, client):
        events, first = respond(
            client, streamed, instructions=INSTRUCTIONS, input=PROMPT, tools=tools
        )

        # ---- the client's side: the listing, the call with the server's real result, the text
        assert first["status"] == "completed"
        listing, call, message = first["output"]
        assert listing["type"] == "mcp_list_tools"
        assert listing["server_label"] == "counter"
        assert listing["error"] is None
        names = [tool["name"] for tool in listing["tools"]]
        assert {"sum", "echo"} <= set(names)
        assert_sum_call(call, {"a": 2, "b": 3}, "5")
        assert text_of(message) == "2 + 3 = 5."
        assert first["usage"]["input_tokens"] == 120 + 150  # summed over the two rounds
        assert first["usage"]["output_tokens"] == 14 + 7
        if streamed:
            assert item_events(events, listing["id"]) == [
                "response.output_item.added",
                "response.mcp_list_tools.in_progress",
                "response.mcp_list_tools.completed",
                "response.output_item.done",
            ]
            assert item_events(events, call["id"]) == [
                "response.output_item.added",
                "response.mcp_call.in_progress",
                "response.mcp_call_arguments.delta",
                "response.mcp_call_arguments.done",
                "response.mcp_call.completed",
                "response.output_item.done",
            ]
            text = [e["delta"] for e in events if e["type"] == "response.output_text.delta"]
            assert text == ["2 + 3 ", "= 5."]  # streamed live from the second round

        # ---- the upstream's side: the MCP tools as chat tools, the call and its result fed back
        round1, round2 = server.received
        assert round1["model"] == MODEL
        assert round1["stream"] is streamed
        assert round1["messages"] == [{"role": "system", "content": INSTRUCTIONS}, user(PROMPT)]
        assert [tool["type"] for tool in round1["tools"]] == ["function"] * len(names)
        assert [tool["function"]["name"] for tool in round1["tools"]] == [
            f"mcp__counter__{name}" for name in names
        ]
        (sum_tool,) = [t["function"] for t in round1["tools"] if t["function"]["name"] == SUM]
        (listed_sum,) = [t for t in listing["tools"] if t["name"] == "sum"]
        assert sum_tool["description"] == "Calculate the sum of two numbers"
        assert sum_tool["parameters"] == listed_sum["input_schema"]
        assert set(sum_tool["parameters"]["properties"]) == {"a", "b"}
        assert round2["tools"] == round1["tools"]
        assert round2["messages"] == [
            *round1["messages"],
            assistant_calls((SUM_2_3.call_id, SUM, '{"a": 2, "b": 3}')),
            tool_result(SUM_2_3.call_id, "5"),  # the counter server's real answer
        ]

        # ---- the continuation: the whole stored history goes upstream as chat messages
        events, second = respond(
            client, streamed, previous_response_id=first["id"], input=FOLLOW_UP, tools=tools
        )
        assert second["status"] == "completed"
        assert second["previous_response_id"] == first["id"]
        assert [item["type"] for item in second["output"]] == ["mcp_call", "message"]
        assert_sum_call(second["output"][0], {"a": 10, "b": 1}, "11")
        assert text_of(second["output"][1]) == "10 + 1 = 11."
        if streamed:
            assert not [e for e in events if e["type"].startswith("response.mcp_list_tools")]

        round3, round4 = server.received[2:]
        # Instructions are not inherited; the first response's MCP call is lowered to a call and
        # its result under the mcp_call item's id; its listing is not sent.
        history = [
            user(PROMPT),
            assistant_calls((call["id"], SUM, call["arguments"])),
            tool_result(call["id"], "5"),
            {"role": "assistant", "content": "2 + 3 = 5."},
            user(FOLLOW_UP),
        ]
        assert round3["messages"] == history
        assert round3["tools"] == round1["tools"]
        assert round4["messages"] == [
            *history,
            assistant_calls((SUM_10_1.call_id, SUM, '{"a": 10, "b": 1}')),
            tool_result(SUM_10_1.call_id, "11"),
        ]
        assert len(server.received) == 4

        # ---- the stored chain reads back
        assert dump(client.responses.retrieve(first["id"])) == first
        assert dump(client.responses.retrieve(second["id"])) == second
        (first_input,) = input_items(client, first["id"])
        assert (first_input["type"], first_input["role"]) == ("message", "user")
        assert [(p["type"], p["text"]) for p in first_input["content"]] == [("input_text", PROMPT)]
        (second_input,) = input_items(client, second["id"])
        assert (second_input["type"], second_input["role"]) == ("message", "user")
        assert [(p["type"], p["text"]) for p in second_input["content"]] == [
            ("input_text", FOLLOW_UP)
        ]


# ----------------------------------------------------------------------------- client function tool

WEATHER_SCRIPT = [
    Answer(calls=(WEATHER,), finish_reason="tool_calls", output_tokens=12),
    Answer(text=("It is 18 °C ", "and sunny in Paris."), output_tokens=9),
]


@both_modes
def test_client_function_call_then_its_output_in_a_continuation(streamed: bool) -> None:
    with chat_stack(WEATHER_SCRIPT) as (server, client):
        events, first = respond(client, streamed, input=WEATHER_PROMPT, tools=[GET_WEATHER])

        # The loop stops at the client's call and returns it.
        assert first["status"] == "completed"
        (call,) = first["output"]
        assert call["type"] == "function_call"
        assert call["call_id"] == WEATHER.call_id
        assert call["name"] == "get_weather"
        assert call["arguments"] == WEATHER.full_arguments
        assert call["status"] == "completed"
        if streamed:
            deltas = [
                e["delta"] for e in events if e["type"] == "response.function_call_arguments.delta"
            ]
            assert deltas == list(WEATHER.arguments)

        (round1,) = server.received
        assert round1["messages"] == [user(WEATHER_PROMPT)]
        assert round1["tools"] == [
            {
                "type": "function",
                "function": {
                    "name": "get_weather",
                    "description": GET_WEATHER["description"],
                    "parameters": GET_WEATHER["parameters"],
                    "strict": True,
                },
            }
        ]

        output_item = {
            "type": "function_call_output",
            "call_id": WEATHER.call_id,
            "output": WEATHER_OUTPUT,
        }
        _, second = respond(
            client,
            streamed,
            previous_response_id=first["id"],
            input=[output_item],
            tools=[GET_WEATHER],
        )
        assert second["status"] == "completed"
        assert second["previous_response_id"] == first["id"]
        (message,) = second["output"]
        assert text_of(message) == "It is 18 °C and sunny in Paris."

        # The call and the client's output, as an assistant tool_calls message and a tool message.
        round2 = server.received[1]
        assert round2["messages"] == [
            user(WEATHER_PROMPT),
            assistant_calls((WEATHER.call_id, "get_weather", WEATHER.full_arguments)),
            tool_result(WEATHER.call_id, WEATHER_OUTPUT),
        ]
        assert round2["tools"] == round1["tools"]
        assert len(server.received) == 2

        (stored_output,) = input_items(client, second["id"])
        assert stored_output["type"] == "function_call_output"
        assert stored_output["call_id"] == WEATHER.call_id
        assert stored_output["output"] == WEATHER_OUTPUT
