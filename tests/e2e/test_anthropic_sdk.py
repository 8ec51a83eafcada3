"""The official ``anthropic`` SDK against ``POST /v1/messages`` over a scripted Responses
upstream: text, streaming, tool use, thinking, count_tokens and errors, as the SDK parses them;
the MCP connector; and a chat-completions upstream (the same front end over any upstream kind)."""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from typing import Any

import anthropic
import pytest

from app.errors import UpstreamHTTPError
from app.main import create_app
from app.protocol.json_types import JsonObject
from app.settings import Settings
from tests.e2e.test_chat_equivalence import Answer, Call
from tests.e2e.test_chat_tool_loop import ScriptedChatServer
from tests.fakes import FakeUpstream, ScriptedUpstream, function_call, message
from tests.helpers import IN_PROCESS_URL, in_process, local_egress, serve_in_thread

MODEL = "claude-test-model"
TOOLS: list[Any] = [
    {
        "name": "get_weather",
        "description": "The weather in a city.",
        "input_schema": {
            "type": "object",
            "properties": {"city": {"type": "string"}},
            "required": ["city"],
        },
    }
]


class HeaderRecordingUpstream(ScriptedUpstream):
    def __init__(self, rounds: list[list[JsonObject]]) -> None:
        super().__init__(rounds)
        self.headers: list[dict[str, str]] = []

    async def create_response(self, body: JsonObject, headers: Mapping[str, str]) -> JsonObject:
        self.headers.append(dict(headers))
        return await super().create_response(body, headers)


class RefusingUpstream(FakeUpstream):
    async def create_response(self, body: JsonObject, headers: Mapping[str, str]) -> JsonObject:
        raise UpstreamHTTPError(429, {"error": {"message": "slow down", "type": "rate_limit"}})


def reasoning(text: str) -> JsonObject:
    return {
        "id": "rs_1",
        "type": "reasoning",
        "summary": [],
        "content": [{"type": "reasoning_text", "text": text}],
    }


@pytest.fixture
def sdk() -> Iterator[Any]:
    """``sdk(upstream, settings=None)``: an Anthropic client on a gateway in front of
    ``upstream``."""
    clients: list[Any] = []

    def make(
        upstream: Any, settings: Settings | None = None, **options: Any
    ) -> anthropic.Anthropic:
        context = in_process(create_app(settings or Settings(), upstream=upstream))
        http = context.__enter__()
        clients.append(context)
        return anthropic.Anthropic(
            base_url=IN_PROCESS_URL,
            api_key="sk-ant-test",
            max_retries=0,
            http_client=http,
            **options,
        )

    yield make
    for context in clients:
        context.__exit__(None, None, None)


def dumped(value: Any) -> dict[str, Any]:
    data: dict[str, Any] = value.model_dump(mode="json", exclude_none=True)
    data.pop("id", None)
    return data


def test_create_text(sdk: Any) -> None:
    upstream = HeaderRecordingUpstream([[message("Hello there")]])
    client = sdk(upstream)
    reply = client.messages.create(
        model=MODEL,
        max_tokens=100,
        system=[{"type": "text", "text": "Be brief.", "cache_control": {"type": "ephemeral"}}],
        messages=[{"role": "user", "content": "Hi"}],
        extra_body={"temperature": 0.5},
        metadata={"user_id": "u1"},
    )
    assert reply.type == "message"
    assert reply.id.startswith("msg_")
    assert reply.model == MODEL
    assert [block.type for block in reply.content] == ["text"]
    assert reply.content[0].text == "Hello there"  # type: ignore[union-attr]
    assert reply.stop_reason == "end_turn"
    assert reply.usage.input_tokens == 10
    assert reply.usage.output_tokens == 5
    (sent,) = upstream.requests
    assert sent["instructions"] == "Be brief."
    assert sent["input"] == [
        {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "Hi"}]}
    ]
    assert sent["max_output_tokens"] == 100
    assert sent["temperature"] == 0.5
    assert sent["store"] is False
    # x-api-key goes upstream as the bearer credential.
    assert upstream.headers[0]["authorization"] == "Bearer sk-ant-test"


def test_stream_text_equals_json(sdk: Any) -> None:
    upstream = ScriptedUpstream(
        [[message("Hello there, friend")], [message("Hello there, friend")]]
    )
    client = sdk(upstream)
    params: dict[str, Any] = {
        "model": MODEL,
        "max_tokens": 100,
        "messages": [{"role": "user", "content": "Hi"}],
    }
    created = client.messages.create(**params)
    kinds = []
    with client.messages.stream(**params) as stream:
        for event in stream:
            kinds.append(event.type)
        final = stream.get_final_message()
        text = stream.get_final_text()
    assert text == "Hello there, friend"
    assert kinds[0] == "message_start"
    assert kinds[-1] == "message_stop"
    assert "content_block_delta" in kinds
    assert dumped(final) == dumped(created)
    assert upstream.requests[1]["stream"] is True


@pytest.mark.parametrize("stream", [False, True])
def test_tool_use_round_trip(sdk: Any, stream: bool) -> None:
    call = function_call("get_weather", '{"city": "Paris"}', call_id="toolu_1")
    upstream = ScriptedUpstream([[message("Let me check."), call], [message("Sunny in Paris.")]])
    client = sdk(upstream)
    messages: list[Any] = [{"role": "user", "content": "Weather in Paris?"}]
    params: dict[str, Any] = {"model": MODEL, "max_tokens": 200, "tools": TOOLS}
    params["tool_choice"] = {"type": "auto"}
    if stream:
        with client.messages.stream(messages=messages, **params) as events:
            first = events.get_final_message()
    else:
        first = client.messages.create(messages=messages, **params)
    assert first.stop_reason == "tool_use"
    assert [block.type for block in first.content] == ["text", "tool_use"]
    tool_use = first.content[1]
    assert tool_use.id == "toolu_1"  # type: ignore[union-attr]
    assert tool_use.name == "get_weather"  # type: ignore[union-attr]
    assert tool_use.input == {"city": "Paris"}  # type: ignore[union-attr]
    messages += [
        {"role": "assistant", "content": [b.model_dump(exclude_none=True) for b in first.content]},
        {
            "role": "user",
            "content": [
                {
                    "type": "tool_result",
                    "tool_use_id": "toolu_1",
                    "content": [{"type": "text", "text": "sunny"}],
                }
            ],
        },
    ]
    answer = client.messages.create(messages=messages, **params)
    assert answer.content[0].text == "Sunny in Paris."  # type: ignore[union-attr]
    assert answer.stop_reason == "end_turn"
    sent = upstream.requests[1]
    assert sent["tools"] == [
        {
            "type": "function",
            "name": "get_weather",
            "parameters": TOOLS[0]["input_schema"],
            "description": "The weather in a city.",
        }
    ]
    assert sent["tool_choice"] == "auto"
    assert [item["type"] for item in sent["input"]] == [
        "message",
        "message",
        "function_call",
        "function_call_output",
    ]
    assert json.loads(sent["input"][2]["arguments"]) == {"city": "Paris"}
    assert sent["input"][2]["call_id"] == "toolu_1"
    assert sent["input"][3] == {
        "type": "function_call_output",
        "call_id": "toolu_1",
        "output": "sunny",
    }


def test_thinking_deltas_from_a_reasoning_upstream(sdk: Any) -> None:
    upstream = ScriptedUpstream([[reasoning("Think about it."), message("42")]])
    client = sdk(upstream)
    deltas = []
    with client.messages.stream(
        model=MODEL,
        max_tokens=4096,
        thinking={"type": "enabled", "budget_tokens": 2048},
        messages=[{"role": "user", "content": "The answer?"}],
    ) as stream:
        for event in stream:
            if event.type == "content_block_delta":
                deltas.append(event.delta.type)
        final = stream.get_final_message()
    assert "thinking_delta" in deltas
    assert "text_delta" in deltas
    assert [block.type for block in final.content] == ["thinking", "text"]
    assert final.content[0].thinking == "Think about it."  # type: ignore[union-attr]
    assert final.content[1].text == "42"  # type: ignore[union-attr]
    assert upstream.requests[0]["reasoning"] == {"effort": "low"}


def test_count_tokens(sdk: Any) -> None:
    client = sdk(ScriptedUpstream([]))
    short = client.messages.count_tokens(model=MODEL, messages=[{"role": "user", "content": "Hi"}])
    long = client.messages.count_tokens(
        model=MODEL,
        system="You are a helpful assistant.",
        tools=TOOLS,
        messages=[{"role": "user", "content": "Hi " * 200}],
    )
    assert 0 < short.input_tokens < long.input_tokens


def test_bad_request_in_anthropics_envelope(sdk: Any) -> None:
    client = sdk(ScriptedUpstream([]))
    with pytest.raises(anthropic.BadRequestError) as caught:
        client.messages.create(
            model=MODEL, max_tokens=10, messages=[{"role": "robot", "content": "Hi"}]
        )
    assert caught.value.status_code == 400
    body = caught.value.body
    assert isinstance(body, dict)
    assert body["type"] == "error"
    assert body["error"]["type"] == "invalid_request_error"
    assert "messages[0].role" in body["error"]["message"]


def test_upstream_refusal_in_anthropics_envelope(sdk: Any) -> None:
    client = sdk(RefusingUpstream())
    with pytest.raises(anthropic.RateLimitError) as caught:
        client.messages.create(
            model=MODEL, max_tokens=10, messages=[{"role": "user", "content": "Hi"}]
        )
    assert caught.value.body == {
        "type": "error",
        "error": {"type": "rate_limit_error", "message": "slow down"},
    }


@pytest.mark.parametrize("stream", [False, True])
def test_mcp_connector_runs_on_the_gateways_mcp_executor(
    sdk: Any, counter_url: str, stream: bool
) -> None:
    upstream = ScriptedUpstream(
        [[function_call("mcp__counter__sum", '{"a": 1, "b": 2}')], [message("It is 3.")]]
    )
    client = sdk(upstream, settings=Settings(egress=local_egress()))  # the server: loopback
    params: dict[str, Any] = {
        "model": MODEL,
        "max_tokens": 100,
        "messages": [{"role": "user", "content": "1 + 2?"}],
        "mcp_servers": [{"type": "url", "name": "counter", "url": counter_url}],
        "betas": ["mcp-client-2025-04-04"],
    }
    if stream:
        with client.beta.messages.stream(**params) as events:
            reply = events.get_final_message()
    else:
        reply = client.beta.messages.create(**params)
    assert [block.type for block in reply.content] == ["mcp_tool_use", "mcp_tool_result", "text"]
    use, result, text = reply.content
    assert use.name == "sum"
    assert use.server_name == "counter"
    assert use.input == {"a": 1, "b": 2}
    assert result.tool_use_id == use.id
    assert result.is_error is False
    assert "3" in result.content[0].text
    assert text.text == "It is 3."
    assert reply.stop_reason == "end_turn"
    assert upstream.requests[0]["tools"][0]["name"] == "mcp__counter__sum"


@pytest.mark.parametrize("stream", [False, True])
def test_over_a_chat_completions_upstream(stream: bool) -> None:
    call = Call("toolu_9", "get_weather", ('{"city":', ' "Paris"}'))
    script = [
        Answer(reasoning=("Let me", " think."), text=("Checking.",), calls=(call,)),
        Answer(text=("Sunny and", " warm"), finish_reason="length"),
    ]
    server = ScriptedChatServer(script)
    with serve_in_thread(server.app()) as upstream_url:
        app = create_app(Settings(upstream_url=upstream_url, upstream_kind="chat"))
        with in_process(app) as http:
            client = anthropic.Anthropic(
                base_url=IN_PROCESS_URL, api_key="sk-ant-test", max_retries=0, http_client=http
            )
            messages: list[Any] = [{"role": "user", "content": "Weather in Paris?"}]
            params: dict[str, Any] = {
                "model": MODEL,
                "max_tokens": 300,
                "tools": TOOLS,
                "stop_sequences": ["###"],
                "thinking": {"type": "enabled", "budget_tokens": 2048},
            }

            def turn() -> Any:
                if stream:
                    with client.messages.stream(messages=messages, **params) as events:
                        return events.get_final_message()
                return client.messages.create(messages=messages, **params)

            first = turn()
            assert [block.type for block in first.content] == ["thinking", "text", "tool_use"]
            assert first.content[0].thinking == "Let me think."
            assert first.content[2].input == {"city": "Paris"}
            assert first.content[2].id == "toolu_9"
            assert first.stop_reason == "tool_use"
            messages += [
                {
                    "role": "assistant",
                    "content": [b.model_dump(exclude_none=True) for b in first.content],
                },
                {
                    "role": "user",
                    "content": [
                        {"type": "tool_result", "tool_use_id": "toolu_9", "content": "18C"}
                    ],
                },
            ]
            second = turn()
    assert second.content[0].text == "Sunny and warm"
    assert second.stop_reason == "max_tokens"
    assert server.script == []
    sent = server.received
    assert sent[0]["stop"] == ["###"]
    assert [tool["function"]["name"] for tool in sent[0]["tools"]] == ["get_weather"]
    tool_message = [m for m in sent[1]["messages"] if m["role"] == "tool"]
    assert tool_message == [{"role": "tool", "tool_call_id": "toolu_9", "content": "18C"}]


@pytest.mark.parametrize("stream", [False, True])
def test_thinking_display_omitted(sdk: Any, stream: bool) -> None:
    client = sdk(ScriptedUpstream([[reasoning("Secret musings."), message("42")]]))
    params: dict[str, Any] = {
        "model": MODEL,
        "max_tokens": 4096,
        "thinking": {"type": "adaptive", "display": "omitted"},
        "messages": [{"role": "user", "content": "The answer?"}],
    }
    if stream:
        with client.messages.stream(**params) as events:
            deltas = [e.delta.type for e in events if e.type == "content_block_delta"]
            final = events.get_final_message()
        assert "thinking_delta" not in deltas
    else:
        final = client.messages.create(**params)
    assert [block.type for block in final.content] == ["thinking", "text"]
    assert final.content[0].thinking == ""
    assert final.content[1].text == "42"
