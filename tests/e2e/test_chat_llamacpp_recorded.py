"""Traffic recorded live from llama.cpp's ``llama-server`` (cassettes/chat/recorded/: a CPU
build of ggml-org/llama.cpp@0c1e57098 serving a tiny random-weights Qwen2 model; its text is
gibberish, its tool calls grammar-constrained JSON) replayed as the upstream of a chat-kind
gateway, driven by the ``openai`` SDK.

Each case also checks that the chat request the gateway sent is the one recorded: the
recordings were made with the SDK's own chat requests, so the only allowed differences are
the gateway spelling out ``"stream": false`` and an empty assistant ``content`` as ``""``
where the SDK sent ``null``.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest

from app.main import create_app
from app.protocol.json_types import JsonObject
from app.recording.cassette import Cassette, load_cassette
from app.recording.replay import create_replay_app
from app.settings import Settings
from tests.helpers import in_process, openai_client, serve_in_thread
from tests.lifecycle import assert_lifecycle

RECORDED = Path(__file__).resolve().parents[2] / "cassettes" / "chat" / "recorded"
MODEL = "tiny-random-qwen2"
HELLO = "Say hello in a few words."
PARIS = "What is the weather in Paris for 3 days?"
TOKYO_LIMA = "Weather in Tokyo for 2 days, and the time in Lima?"
# The recordings' sampling nudges (see the cassettes' notes), sent through as vendor extras.
STOP_SOON = {"seed": 42, "logit_bias": {"151645": 5}}
CALL_TOOLS = {"seed": 2, "logit_bias": {"151645": 32, "151657": 30}}

GET_WEATHER = {
    "type": "function",
    "name": "get_weather",
    "description": "Get the weather forecast for a city.",
    "parameters": {
        "type": "object",
        "properties": {
            "city": {"type": "string", "enum": ["Paris", "Tokyo", "Lima"]},
            "days": {"type": "integer", "minimum": 1, "maximum": 7},
        },
        "required": ["city", "days"],
        "additionalProperties": False,
    },
}
GET_TIME = {
    "type": "function",
    "name": "get_time",
    "description": "Get the local time in a city.",
    "parameters": {
        "type": "object",
        "properties": {"city": {"type": "string", "enum": ["Paris", "Tokyo", "Lima"]}},
        "required": ["city"],
        "additionalProperties": False,
    },
}


@contextlib.contextmanager
def gateway_over(cassette: Cassette, **upstream: Any) -> Iterator[tuple[httpx.Client, str]]:
    """(a client of the gateway, in this process; the replay URL): a chat-kind gateway in front
    of the replayed recording."""
    with serve_in_thread(create_replay_app(cassette)) as replay:
        settings = Settings(
            upstreams=[{"name": "llamacpp", "url": replay, "kind": "chat", **upstream}]
        )
        with in_process(create_app(settings)) as gateway:
            yield gateway, replay


def sent_requests(replay: str) -> list[JsonObject]:
    return [entry["body"] for entry in httpx.get(f"{replay}/__replay/requests").json()]


def normalized(body: JsonObject) -> JsonObject:
    body = {k: v for k, v in body.items() if not (k == "stream" and v is False)}
    messages = []
    for message in body.get("messages", []):
        if message.get("role") == "assistant" and message.get("content") is None:
            message = {**message, "content": ""}
        messages.append(message)
    return {**body, "messages": messages}


def run(
    name: str, request: JsonObject, *, stream: bool, **upstream: Any
) -> tuple[JsonObject, list[JsonObject], Cassette]:
    """The final response, the streamed events (empty when not streaming) and the cassette;
    asserts the gateway sent the recorded chat request."""
    cassette = load_cassette(RECORDED / name)
    with gateway_over(cassette, **upstream) as (gateway, replay):
        client = openai_client(gateway)
        fields = {k: v for k, v in request.items() if k not in ("seed", "logit_bias")}
        extra = {k: request[k] for k in ("seed", "logit_bias") if k in request}
        events: list[JsonObject] = []
        if stream:
            for event in client.responses.create(**fields, extra_body=extra, stream=True):
                events.append(event.model_dump(mode="json", exclude_unset=True))
            assert_lifecycle(events)
            final = events[-1]["response"]
        else:
            final = client.responses.create(**fields, extra_body=extra).model_dump(
                mode="json", exclude_unset=True
            )
        stored = gateway.get(f"/v1/responses/{final['id']}").json()
        assert stored["output"] == final["output"]
        sent = sent_requests(replay)
    recorded = [turn.request.body for turn in cassette.turns]
    assert [normalized(body) for body in sent] == [normalized(body) for body in recorded]
    return final, events, cassette


def recorded_text(cassette: Cassette) -> str:
    """The assistant text the server produced, read from the recording itself."""
    response = cassette.turns[0].response
    if response.sse is None:
        return str(response.body["choices"][0]["message"]["content"])
    text = []
    for line in response.sse:
        if line.startswith("data: {"):
            for choice in json.loads(line[len("data: ") :]).get("choices", []):
                text.append(choice.get("delta", {}).get("content") or "")
    return "".join(text)


def recorded_usage(cassette: Cassette) -> JsonObject | None:
    response = cassette.turns[0].response
    if response.sse is None:
        usage: JsonObject = response.body["usage"]
        return usage
    for line in response.sse:
        if line.startswith("data: {"):
            chunk = json.loads(line[len("data: ") :])
            if chunk.get("usage"):
                found: JsonObject = chunk["usage"]
                return found
    return None


@pytest.mark.parametrize(
    ("name", "stream", "upstream"),
    [
        ("text.yaml", False, {}),
        ("text-stream.yaml", True, {}),
        ("text-stream-no-usage.yaml", True, {"stream_usage": False}),
    ],
)
def test_text(name: str, stream: bool, upstream: JsonObject) -> None:
    request = {"model": MODEL, "input": HELLO, "max_output_tokens": 64, **STOP_SOON}
    final, _, cassette = run(name, request, stream=stream, **upstream)
    assert final["status"] == "completed"
    (message,) = final["output"]
    assert message["type"] == "message" and message["status"] == "completed"
    assert message["content"][0]["text"] == recorded_text(cassette)
    assert message["content"][0]["text"]  # gibberish, but text
    usage = recorded_usage(cassette)
    if usage is None:  # without include_usage llama.cpp sends none: the gateway reports zeros
        assert final["usage"]["total_tokens"] == 0
    else:
        assert final["usage"]["input_tokens"] == usage["prompt_tokens"]
        assert final["usage"]["output_tokens"] == usage["completion_tokens"]
        cached = usage["prompt_tokens_details"]["cached_tokens"]
        assert final["usage"]["input_tokens_details"]["cached_tokens"] == cached


@pytest.mark.parametrize(("name", "stream"), [("length.yaml", False), ("length-stream.yaml", True)])
def test_length_cut_off(name: str, stream: bool) -> None:
    request = {"model": MODEL, "input": HELLO, "max_output_tokens": 5, "seed": 42}
    final, events, cassette = run(name, request, stream=stream)
    assert final["status"] == "incomplete"
    assert final["incomplete_details"] == {"reason": "max_output_tokens"}
    (message,) = final["output"]
    assert message["status"] == "incomplete"
    assert message["content"][0]["text"] == recorded_text(cassette)
    assert final["usage"]["output_tokens"] == 5
    if stream:
        assert events[-1]["type"] == "response.incomplete"


@pytest.mark.parametrize(
    ("name", "stream"), [("tool-call.yaml", False), ("tool-call-stream.yaml", True)]
)
def test_forced_tool_call(name: str, stream: bool) -> None:
    request = {
        "model": MODEL,
        "input": PARIS,
        "tools": [GET_WEATHER],
        "tool_choice": "required",
        "parallel_tool_calls": False,
        "max_output_tokens": 128,
        **CALL_TOOLS,
    }
    final, events, _ = run(name, request, stream=stream)
    assert final["status"] == "completed"
    (call,) = final["output"]
    assert (call["type"], call["name"], call["status"]) == (
        "function_call",
        "get_weather",
        "completed",
    )
    assert json.loads(call["arguments"]) == {"city": "Paris", "days": 4}  # what the model chose
    assert len(call["call_id"]) == 32  # llama.cpp's own id, kept
    if stream:
        deltas = [
            e["delta"] for e in events if e["type"] == "response.function_call_arguments.delta"
        ]
        assert len(deltas) > 3 and "".join(deltas) == call["arguments"]


@pytest.mark.parametrize(
    ("name", "stream"),
    [("parallel-tool-calls.yaml", False), ("parallel-tool-calls-stream.yaml", True)],
)
def test_parallel_tool_calls(name: str, stream: bool) -> None:
    request = {
        "model": MODEL,
        "input": TOKYO_LIMA,
        "tools": [GET_WEATHER, GET_TIME],
        "tool_choice": "required",
        "parallel_tool_calls": True,
        "max_output_tokens": 256,
        **CALL_TOOLS,
    }
    final, events, _ = run(name, request, stream=stream)
    calls = final["output"]
    assert [c["type"] for c in calls] == ["function_call", "function_call"]
    assert len({c["call_id"] for c in calls}) == 2
    for call in calls:
        assert isinstance(json.loads(call["arguments"]), dict)
    if stream:
        added = [e["output_index"] for e in events if e["type"] == "response.output_item.added"]
        assert added == [0, 1]


def test_tool_result_continuation() -> None:
    request = {
        "model": MODEL,
        "input": [
            {"role": "user", "content": PARIS},
            {
                "type": "function_call",
                "call_id": "call_abc123",
                "name": "get_weather",
                "arguments": '{"city":"Paris","days":3}',
            },
            {
                "type": "function_call_output",
                "call_id": "call_abc123",
                "output": '{"forecast":"sunny, 21C"}',
            },
        ],
        "tools": [GET_WEATHER],
        "max_output_tokens": 32,
        **{"seed": 2, "logit_bias": {"151645": 5}},
    }
    final, _, cassette = run("tool-result.yaml", request, stream=True)
    assert final["output"][-1]["type"] == "message"
    assert final["output"][-1]["content"][0]["text"] == recorded_text(cassette)


def test_models_and_readiness_of_a_chat_server() -> None:
    cassette = load_cassette(RECORDED / "models-health.yaml")
    with gateway_over(cassette) as (gateway, _):
        assert gateway.get("/ready").json()["upstreams"] == {"llamacpp": "ready"}
        models = openai_client(gateway).models.list()
        assert [m.id for m in models] == [MODEL]


def test_errors_before_the_stream() -> None:
    """llama.cpp's real 400s: through /v1/responses as OpenAI envelopes with the upstream's
    status; through the /v1/chat/completions passthrough exactly as sent."""
    cassette = load_cassette(RECORDED / "errors.yaml")
    not_a_list, too_long = Cassette(turns=cassette.turns[:1]), Cassette(turns=cassette.turns[3:5])
    with gateway_over(not_a_list) as (gateway, _):
        passthrough = gateway.post(
            "/v1/chat/completions",
            json={"messages": "not-a-list", "model": MODEL},
        )
    assert passthrough.status_code == 400
    assert passthrough.json() == cassette.turns[0].response.body
    long_prompt = cassette.turns[3].request.body["messages"][0]["content"]
    with gateway_over(too_long) as (gateway, _):
        client = openai_client(gateway)
        for stream in (False, True):
            with pytest.raises(openai.BadRequestError) as caught:
                client.responses.create(
                    model=MODEL, input=long_prompt, max_output_tokens=4, stream=stream
                )
            error = caught.value.body
            assert isinstance(error, dict)
            assert error["type"] == "exceed_context_size_error"
            assert error["code"] == "400"  # llama.cpp's integer code, as OpenAI's string
            assert error["message"].startswith("request (3030 tokens) exceeds")
