"""Equivalence of the upstream kinds: the same model answer served by a ``responses`` upstream
(vLLM's ``/v1/responses``) and by a ``chat`` upstream (``/v1/chat/completions``, translated by
the gateway) gives the client the same stream events and output items, ids aside.

Each scenario is one model answer (reasoning, text, function calls, finish reason, usage) written
twice, as the upstream would send it: vLLM's Responses events or JSON object, and the
chat-completions chunks (role-only first delta, content deltas, tool-call deltas keyed by index
with the name first and the arguments split, a finish chunk, a usage chunk with no choices,
``[DONE]``) or ``chat.completion`` object. Both are served by one small upstream on a real port
(the scenario is the request's ``model``); two gateways, one per kind, sit in front of it, and the
official ``openai`` SDK drives them. What each gateway sent upstream is checked as well.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import re
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import openai
import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from app.main import create_app
from app.protocol.json_types import JsonObject
from app.settings import Settings, UpstreamKind
from tests.helpers import serve_in_thread, without_parsed
from tests.lifecycle import assert_lifecycle, project

CREATED = 1700000000
INSTRUCTIONS = "Answer briefly."
PROMPT = "What is the weather in Paris, and what time is it there?"
MAX_OUTPUT_TOKENS = 64

GET_WEATHER: JsonObject = {
    "type": "function",
    "name": "get_weather",
    "description": "Get the current weather in a city",
    "parameters": {
        "type": "object",
        "properties": {"city": {"type": "string"}},
        "required": ["city"],
        "additionalProperties": False,
    },
    "strict": True,
}
GET_TIME: JsonObject = {
    "type": "function",
    "name": "get_time",
    "description": "The local time in a time zone",
    "parameters": {
        "type": "object",
        "properties": {"tz": {"type": "string"}},
        "required": ["tz"],
    },
}
TOOLS = [GET_WEATHER, GET_TIME]

# Ids the gateway generates: a prefix and a UUIDv7 as 32 hex digits.
_GATEWAY_ID = re.compile(r"^([a-z]+)_[0-9a-f]{32}$")
# Response fields that are clock readings.
_TIMES = frozenset({"created_at", "completed_at"})


# ----------------------------------------------------------------------------- the model's answer


@dataclass(frozen=True)
class Call:
    """A function call; ``arguments`` are the fragments it is streamed in."""

    call_id: str
    name: str
    arguments: tuple[str, ...]

    @property
    def full_arguments(self) -> str:
        return "".join(self.arguments)


@dataclass(frozen=True)
class Answer:
    """One model answer; text fields are the fragments they are streamed in."""

    reasoning: tuple[str, ...] = ()
    text: tuple[str, ...] = ()
    calls: tuple[Call, ...] = ()
    finish_reason: str = "stop"
    input_tokens: int = 42
    output_tokens: int = 17
    reasoning_tokens: int = 0

    @property
    def status(self) -> str:
        return "incomplete" if self.finish_reason == "length" else "completed"

    @property
    def incomplete_details(self) -> JsonObject | None:
        return {"reason": "max_output_tokens"} if self.finish_reason == "length" else None

    def responses_usage(self) -> JsonObject:
        return {
            "input_tokens": self.input_tokens,
            "input_tokens_details": {"cached_tokens": 0},
            "output_tokens": self.output_tokens,
            "output_tokens_details": {"reasoning_tokens": self.reasoning_tokens},
            "total_tokens": self.input_tokens + self.output_tokens,
        }

    def chat_usage(self) -> JsonObject:
        return {
            "prompt_tokens": self.input_tokens,
            "completion_tokens": self.output_tokens,
            "total_tokens": self.input_tokens + self.output_tokens,
            "completion_tokens_details": {"reasoning_tokens": self.reasoning_tokens},
        }


# ----------------------------------------------------------------------------- vLLM's /v1/responses


def responses_items(answer: Answer, tag: str) -> list[JsonObject]:
    """The answer's final output items, in vLLM's shapes (its own item ids)."""
    items: list[JsonObject] = []
    if answer.reasoning:
        items.append(
            {
                "id": f"rs_{tag}",
                "type": "reasoning",
                "summary": [],
                "content": [{"type": "reasoning_text", "text": "".join(answer.reasoning)}],
                "status": "completed",
            }
        )
    if answer.text:
        part = {"type": "output_text", "text": "".join(answer.text), "annotations": []}
        items.append(
            {
                "id": f"msg_{tag}",
                "type": "message",
                "role": "assistant",
                "status": "incomplete" if answer.status == "incomplete" else "completed",
                "content": [part],
            }
        )
    for number, call in enumerate(answer.calls):
        items.append(
            {
                "id": f"fc_{tag}{number}",
                "type": "function_call",
                "call_id": call.call_id,
                "name": call.name,
                "arguments": call.full_arguments,
                "status": "completed",
            }
        )
    return items


def responses_object(answer: Answer, tag: str, status: str, output: list[JsonObject]) -> JsonObject:
    done = status != "in_progress"
    return {
        "id": f"resp_{tag}",
        "object": "response",
        "created_at": CREATED,
        "model": tag,
        "status": status,
        "output": output,
        "usage": answer.responses_usage() if done else None,
        "incomplete_details": answer.incomplete_details if done else None,
    }


def responses_events(answer: Answer, tag: str) -> list[JsonObject]:
    """The stream vLLM sends for ``answer`` (event shapes as in ``tests.fakes.round_events``
    and the recordings of ``../shared/cassettes/upstream/events``), one delta per fragment."""
    events: list[JsonObject] = [
        {"type": "response.created", "response": responses_object(answer, tag, "in_progress", [])},
        {
            "type": "response.in_progress",
            "response": responses_object(answer, tag, "in_progress", []),
        },
    ]
    items = responses_items(answer, tag)
    for index, item in enumerate(items):
        where = {"output_index": index, "item_id": item["id"]}
        if item["type"] == "reasoning":
            text = item["content"][0]["text"]
            part: JsonObject = {"type": "reasoning_text", "text": ""}
            events += [
                {
                    "type": "response.output_item.added",
                    "output_index": index,
                    "item": {**item, "content": None, "status": "in_progress"},
                },
                {
                    "type": "response.reasoning_part.added",
                    **where,
                    "content_index": 0,
                    "part": part,
                },
            ]
            events += [
                {"type": "response.reasoning_text.delta", **where, "content_index": 0, "delta": d}
                for d in answer.reasoning
            ]
            events += [
                {"type": "response.reasoning_text.done", **where, "content_index": 0, "text": text},
                {
                    "type": "response.reasoning_part.done",
                    **where,
                    "content_index": 0,
                    "part": {**part, "text": text},
                },
            ]
        elif item["type"] == "message":
            text = item["content"][0]["text"]
            part = {"type": "output_text", "text": "", "annotations": []}
            events += [
                {
                    "type": "response.output_item.added",
                    "output_index": index,
                    "item": {**item, "content": [], "status": "in_progress"},
                },
                {"type": "response.content_part.added", **where, "content_index": 0, "part": part},
            ]
            events += [
                {"type": "response.output_text.delta", **where, "content_index": 0, "delta": d}
                for d in answer.text
            ]
            events += [
                {"type": "response.output_text.done", **where, "content_index": 0, "text": text},
                {
                    "type": "response.content_part.done",
                    **where,
                    "content_index": 0,
                    "part": {**part, "text": text},
                },
            ]
        else:
            call = answer.calls[int(item["id"].removeprefix(f"fc_{tag}"))]
            events.append(
                {
                    "type": "response.output_item.added",
                    "output_index": index,
                    "item": {**item, "arguments": "", "status": "in_progress"},
                }
            )
            events += [
                {"type": "response.function_call_arguments.delta", **where, "delta": d}
                for d in call.arguments
            ]
            events.append(
                {
                    "type": "response.function_call_arguments.done",
                    **where,
                    "name": call.name,
                    "arguments": call.full_arguments,
                }
            )
        events.append({"type": "response.output_item.done", "output_index": index, "item": item})
    terminal = "response.completed" if answer.status == "completed" else "response.incomplete"
    events.append(
        {"type": terminal, "response": responses_object(answer, tag, answer.status, items)}
    )
    return [{**event, "sequence_number": number} for number, event in enumerate(events)]


# ----------------------------------------------------------------------------- chat completions


def chat_chunks(answer: Answer, tag: str) -> list[JsonObject]:
    """The ``chat.completion.chunk`` stream a chat server sends for ``answer``."""
    base = {"id": f"chatcmpl-{tag}", "object": "chat.completion.chunk", "created": CREATED}
    base["model"] = tag

    def chunk(delta: JsonObject, finish_reason: str | None = None) -> JsonObject:
        choice = {"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish_reason}
        return {**base, "choices": [choice]}

    chunks = [chunk({"role": "assistant", "content": ""})]
    chunks += [chunk({"reasoning_content": fragment}) for fragment in answer.reasoning]
    chunks += [chunk({"content": fragment}) for fragment in answer.text]
    for index, call in enumerate(answer.calls):
        opening = {
            "index": index,
            "id": call.call_id,
            "type": "function",
            "function": {"name": call.name, "arguments": ""},
        }
        chunks.append(chunk({"tool_calls": [opening]}))
        chunks += [
            chunk({"tool_calls": [{"index": index, "function": {"arguments": fragment}}]})
            for fragment in call.arguments
        ]
    chunks.append(chunk({}, answer.finish_reason))
    chunks.append({**base, "choices": [], "usage": answer.chat_usage()})
    return chunks


def chat_completion(answer: Answer, tag: str) -> JsonObject:
    """The ``chat.completion`` a chat server answers for ``answer``."""
    message: JsonObject = {"role": "assistant", "content": "".join(answer.text) or None}
    if answer.reasoning:
        message["reasoning_content"] = "".join(answer.reasoning)
    if answer.calls:
        message["tool_calls"] = [
            {
                "id": call.call_id,
                "type": "function",
                "function": {"name": call.name, "arguments": call.full_arguments},
            }
            for call in answer.calls
        ]
    return {
        "id": f"chatcmpl-{tag}",
        "object": "chat.completion",
        "created": CREATED,
        "model": tag,
        "choices": [
            {
                "index": 0,
                "message": message,
                "logprobs": None,
                "finish_reason": answer.finish_reason,
            }
        ],
        "usage": answer.chat_usage(),
    }


def sse_body(payloads: list[JsonObject], *, named: bool) -> list[bytes]:
    """SSE frames (``event:`` lines as vLLM's Responses stream has them), then ``[DONE]``."""
    frames = []
    for payload in payloads:
        name = f"event: {payload['type']}\n" if named else ""
        frames.append(f"{name}data: {json.dumps(payload)}\n\n".encode())
    frames.append(b"data: [DONE]\n\n")
    return frames


# ----------------------------------------------------------------------------- the upstream


@dataclass
class AnswerServer:
    """Answers ``/v1/responses`` and ``/v1/chat/completions`` with the answer named by the
    request's ``model``; records every request body by path."""

    answers: dict[str, Answer]
    received: list[tuple[str, JsonObject]] = field(default_factory=list)

    def sent(self, path: str, model: str) -> list[JsonObject]:
        return [body for p, body in self.received if p == path and body.get("model") == model]

    def app(self) -> Starlette:
        async def responses(request: Request) -> Response:
            body, answer = await self._take(request)
            tag = str(body["model"])
            if body.get("stream"):
                return _stream(sse_body(responses_events(answer, tag), named=True))
            items = responses_items(answer, tag)
            return JSONResponse(responses_object(answer, tag, answer.status, items))

        async def chat(request: Request) -> Response:
            body, answer = await self._take(request)
            tag = str(body["model"])
            if body.get("stream"):
                return _stream(sse_body(chat_chunks(answer, tag), named=False))
            return JSONResponse(chat_completion(answer, tag))

        return Starlette(
            routes=[
                Route("/v1/responses", responses, methods=["POST"]),
                Route("/v1/chat/completions", chat, methods=["POST"]),
            ]
        )

    async def _take(self, request: Request) -> tuple[JsonObject, Answer]:
        body: JsonObject = json.loads(await request.body())
        self.received.append((request.url.path, body))
        return body, self.answers[str(body["model"])]


def _stream(frames: list[bytes]) -> StreamingResponse:
    async def chunks() -> AsyncIterator[bytes]:
        for frame in frames:  # one write per frame: the gateway parses them as they come
            yield frame
            await asyncio.sleep(0)

    return StreamingResponse(chunks(), media_type="text/event-stream")


# ----------------------------------------------------------------------------- scenarios

WEATHER = Call("call_weather_7", "get_weather", ('{"city"', ': "Par', 'is"}'))
TIME = Call("call_time_8", "get_time", ('{"tz": ', '"Europe/Paris"}'))

SCENARIOS: dict[str, Answer] = {
    "text": Answer(text=("It is ", "sunny in ", "Paris."), output_tokens=5),
    "reasoning": Answer(
        reasoning=("The user asks ", "about Paris; ", "I know it."),
        text=("Sunny, ", "about 14:00."),
        output_tokens=20,
        reasoning_tokens=12,
    ),
    "call": Answer(calls=(WEATHER,), finish_reason="tool_calls", output_tokens=9),
    "parallel": Answer(calls=(WEATHER, TIME), finish_reason="tool_calls", output_tokens=18),
    "length": Answer(
        text=("Paris is the capital ", "of France and its weather ", "today is"),
        finish_reason="length",
        output_tokens=MAX_OUTPUT_TOKENS,
    ),
    "text-and-call": Answer(
        text=("Let me ", "check the weather."),
        calls=(WEATHER,),
        finish_reason="tool_calls",
        output_tokens=15,
    ),
}


@dataclass
class Stacks:
    server: AnswerServer
    responses: openai.OpenAI  # the gateway over the responses upstream
    chat: openai.OpenAI  # the gateway over the chat upstream


@contextlib.contextmanager
def gateway(upstream_url: str, kind: UpstreamKind, data_dir: Path) -> Iterator[openai.OpenAI]:
    """The gateway in front of ``upstream_url`` on a real port, and an SDK client for it."""
    settings = Settings(upstream_url=upstream_url, upstream_kind=kind, data_dir=data_dir)
    with serve_in_thread(create_app(settings)) as url:
        client = openai.OpenAI(base_url=f"{url}/v1", api_key="sk-test", max_retries=0)
        yield client
        client.close()


@pytest.fixture(scope="module")
def stacks(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stacks]:
    """One upstream, a gateway of each kind in front of it (each with its own database)."""
    server = AnswerServer(dict(SCENARIOS))
    with (
        serve_in_thread(server.app()) as upstream_url,
        gateway(upstream_url, "responses", tmp_path_factory.mktemp("responses")) as responses,
        gateway(upstream_url, "chat", tmp_path_factory.mktemp("chat")) as chat,
    ):
        yield Stacks(server, responses, chat)


# ----------------------------------------------------------------------------- the client's side


def dump(model: Any) -> JsonObject:
    data: JsonObject = model.model_dump(mode="json", warnings=False)
    return data


def normalized(value: Any) -> Any:
    """``value`` with gateway ids numbered by first appearance and clock readings blanked."""
    seen: dict[str, str] = {}

    def walk(node: Any, key: str | None = None) -> Any:
        if key in _TIMES and node is not None:
            return "<time>"
        if isinstance(node, dict):
            return {k: walk(v, k) for k, v in node.items()}
        if isinstance(node, list):
            return [walk(v) for v in node]
        if isinstance(node, str):
            match = _GATEWAY_ID.match(node)
            if match is not None:
                return seen.setdefault(node, f"{match.group(1)}_<{len(seen) + 1}>")
        return node

    return walk(value)


def request_fields(model: str, **extra: Any) -> JsonObject:
    return {
        "model": model,
        "instructions": INSTRUCTIONS,
        "input": PROMPT,
        "tools": TOOLS,
        "tool_choice": "auto",
        "max_output_tokens": MAX_OUTPUT_TOKENS,
        **extra,
    }


def stream(client: openai.OpenAI, **fields: Any) -> tuple[list[JsonObject], JsonObject]:
    """One streamed response: its events and final response (stream contract checked, the
    SDK's accumulator run, the stored response equal to the final one)."""
    with client.responses.stream(**fields) as response_stream:
        events = [dump(event) for event in response_stream]
        if events[-1]["type"] == "response.completed":
            final = without_parsed(dump(response_stream.get_final_response()))
        else:  # the SDK accumulates completed responses only
            final = without_parsed(events[-1]["response"])
    terminal = assert_lifecycle(events)
    assert without_parsed(terminal) == final
    assert dump(client.responses.retrieve(final["id"])) == final
    return events, final


def create(client: openai.OpenAI, **fields: Any) -> JsonObject:
    final = dump(client.responses.create(**fields))
    assert dump(client.responses.retrieve(final["id"])) == final
    return final


def expected_output(answer: Answer) -> list[JsonObject]:
    """The client's output items for ``answer`` (``tests.lifecycle.project`` view)."""
    out: list[JsonObject] = []
    if answer.reasoning:
        out.append({"type": "reasoning", "content": ["".join(answer.reasoning)], "summary": []})
    if answer.text:
        text = ("output_text", "".join(answer.text))
        out.append({"type": "message", "role": "assistant", "content": [text]})
    for call in answer.calls:
        out.append(
            {
                "type": "function_call",
                "name": call.name,
                "arguments": json.loads(call.full_arguments),
            }
        )
    return out


def check_answer(final: JsonObject, answer: Answer) -> None:
    """The response says what the model answered, whichever kind served it."""
    assert final["status"] == answer.status
    assert final["incomplete_details"] == answer.incomplete_details
    assert project(final["output"]) == expected_output(answer)
    calls = [item for item in final["output"] if item["type"] == "function_call"]
    assert [(c["call_id"], c["arguments"], c["status"]) for c in calls] == [
        (call.call_id, call.full_arguments, "completed") for call in answer.calls
    ]
    statuses = [item["status"] for item in final["output"] if item["type"] == "message"]
    assert statuses == (
        ["incomplete" if answer.status == "incomplete" else "completed"] if answer.text else []
    )
    usage = final["usage"]
    assert usage["input_tokens"] == answer.input_tokens
    assert usage["output_tokens"] == answer.output_tokens
    assert usage["total_tokens"] == answer.input_tokens + answer.output_tokens
    assert usage["input_tokens_details"]["cached_tokens"] == 0
    assert usage["output_tokens_details"]["reasoning_tokens"] == answer.reasoning_tokens
    for item in final["output"]:
        assert _GATEWAY_ID.match(item["id"]), item["id"]  # the gateway's ids on both sides


def expected_chat_request(model: str, *, streamed: bool) -> JsonObject:
    """The chat-completions body the gateway sends for ``request_fields(model)``."""
    tools = [
        {
            "type": "function",
            "function": {
                "name": tool["name"],
                "description": tool["description"],
                "parameters": tool["parameters"],
                **({"strict": tool["strict"]} if "strict" in tool else {}),
            },
        }
        for tool in TOOLS
    ]
    body: JsonObject = {
        "model": model,
        "messages": [
            {"role": "system", "content": INSTRUCTIONS},
            {"role": "user", "content": PROMPT},
        ],
        "tools": tools,
        "tool_choice": "auto",
        "max_tokens": MAX_OUTPUT_TOKENS,
        "stream": streamed,
    }
    if streamed:
        body["stream_options"] = {"include_usage": True}
    return body


def check_sent(stacks: Stacks, model: str, *, streamed: bool) -> None:
    """Each gateway made one upstream call for the request, on its own path."""
    (responses_body,) = stacks.server.sent("/v1/responses", model)
    assert responses_body["instructions"] == INSTRUCTIONS
    assert responses_body["max_output_tokens"] == MAX_OUTPUT_TOKENS
    assert [tool["name"] for tool in responses_body["tools"]] == ["get_weather", "get_time"]
    assert responses_body.get("stream", False) is streamed
    (chat_body,) = stacks.server.sent("/v1/chat/completions", model)
    assert chat_body == expected_chat_request(model, streamed=streamed)


# ----------------------------------------------------------------------------- the tests

scenarios = pytest.mark.parametrize("name", sorted(SCENARIOS))


def reset(stacks: Stacks) -> None:
    stacks.server.received.clear()


@scenarios
def test_streamed_events_and_items_are_the_same(stacks: Stacks, name: str) -> None:
    reset(stacks)
    answer = SCENARIOS[name]
    events_r, final_r = stream(stacks.responses, **request_fields(name))
    events_c, final_c = stream(stacks.chat, **request_fields(name))

    check_answer(final_r, answer)
    check_answer(final_c, answer)
    assert [e["type"] for e in events_c] == [e["type"] for e in events_r]
    assert normalized(events_c) == normalized(events_r)
    assert normalized(final_c) == normalized(final_r)
    # Deltas arrive as the upstream sent them, not as one block.
    deltas = [e["delta"] for e in events_c if e["type"].endswith(".delta")]
    expected = [*answer.reasoning, *answer.text, *(f for c in answer.calls for f in c.arguments)]
    assert deltas == expected
    terminal = "response.completed" if answer.status == "completed" else "response.incomplete"
    assert events_c[-1]["type"] == terminal
    check_sent(stacks, name, streamed=True)


@scenarios
def test_json_items_are_the_same(stacks: Stacks, name: str) -> None:
    reset(stacks)
    answer = SCENARIOS[name]
    final_r = create(stacks.responses, **request_fields(name))
    final_c = create(stacks.chat, **request_fields(name))

    check_answer(final_r, answer)
    check_answer(final_c, answer)
    assert normalized(final_c) == normalized(final_r)
    check_sent(stacks, name, streamed=False)


@pytest.mark.parametrize("streamed", [True, False], ids=["stream", "json"])
def test_chat_request_carries_instructions_tools_choice_and_limits(
    stacks: Stacks, streamed: bool
) -> None:
    """The translated request: instructions as the system message, function tools in the chat
    shape, a named tool_choice, max_output_tokens as max_tokens, the sampling fields, and usage
    asked for in streams."""
    reset(stacks)
    fields = request_fields(
        "call",
        tool_choice={"type": "function", "name": "get_weather"},
        parallel_tool_calls=False,
        temperature=0.2,
    )
    if streamed:
        _, final_c = stream(stacks.chat, **fields)
        _, final_r = stream(stacks.responses, **fields)
    else:
        final_c = create(stacks.chat, **fields)
        final_r = create(stacks.responses, **fields)
    check_answer(final_c, SCENARIOS["call"])
    assert normalized(final_c) == normalized(final_r)
    assert final_c["tool_choice"] == {"type": "function", "name": "get_weather"}

    (sent,) = stacks.server.sent("/v1/chat/completions", "call")
    assert sent == {
        **expected_chat_request("call", streamed=streamed),
        "tool_choice": {"type": "function", "function": {"name": "get_weather"}},
        "parallel_tool_calls": False,
        "temperature": 0.2,
    }
    assert sent["messages"][0] == {"role": "system", "content": INSTRUCTIONS}
    assert sent["tools"][0] == {
        "type": "function",
        "function": {
            "name": "get_weather",
            "description": GET_WEATHER["description"],
            "parameters": GET_WEATHER["parameters"],
            "strict": True,
        },
    }
    assert sent["max_tokens"] == MAX_OUTPUT_TOKENS
    assert ("stream_options" in sent) is streamed
    if streamed:
        assert sent["stream_options"] == {"include_usage": True}
    # The responses upstream got the Responses fields unchanged.
    (forwarded,) = stacks.server.sent("/v1/responses", "call")
    assert forwarded["tool_choice"] == {"type": "function", "name": "get_weather"}
    assert forwarded["parallel_tool_calls"] is False
