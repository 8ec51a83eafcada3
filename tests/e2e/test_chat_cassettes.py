"""The recorded chat-completions traffic in cassettes/chat/, replayed strictly as the upstream of
a gateway with ``upstream_kind = "chat"``, driven by the official ``openai`` SDK.

Strict replay answers 409 unless the gateway's translated chat request equals the recorded one,
so every case checks the request translation as well as the answer's.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest

from app.main import create_app
from app.protocol.json_types import JsonObject
from app.recording.cassette import load_cassette
from app.recording.replay import create_replay_app
from app.settings import Settings
from tests.helpers import in_process, local_egress, openai_client, serve_in_thread
from tests.lifecycle import assert_lifecycle

CASSETTES = Path(__file__).resolve().parents[2] / "cassettes" / "chat"

WEATHER = {
    "type": "function",
    "name": "get_weather",
    "description": "Get the current weather in a city",
    "parameters": {
        "type": "object",
        "properties": {"location": {"type": "string", "description": "City name"}},
        "required": ["location"],
        "additionalProperties": False,
    },
    "strict": True,
}
PARIS = "What's the weather in Paris right now?"
DECIMALS = "9.11 and 9.8, which is greater?"
LIGHTHOUSE = "Tell me a long story about a lighthouse."


@dataclass
class Case:
    cassette: str
    request: JsonObject
    # What the client gets: ("message", text, status) / ("reasoning", text prefix) /
    # ("function_call", name, arguments as a JSON string).
    output: list[tuple[str, ...]] = field(default_factory=list)
    status: str = "completed"
    incomplete_reason: str | None = None
    usage: tuple[int, int] | None = None  # input, output tokens
    reasoning_tokens: int = 0
    error: tuple[str, str] | None = None  # code, message prefix: the stream fails

    @property
    def stream(self) -> bool:
        return bool(self.request.get("stream"))


def weather(model: str, *, stream: bool, question: str = PARIS) -> JsonObject:
    return {
        "model": model,
        "input": question,
        "tools": [WEATHER],
        "tool_choice": "auto",
        "stream": stream,
    }


CASES = [
    Case(
        "vllm-text.yaml",
        {
            "model": "Qwen/Qwen2.5-7B-Instruct",
            "input": "Reply with one short sentence: what is the capital of France?",
        },
        [("message", "The capital of France is Paris.", "completed")],
        usage=(40, 8),
    ),
    Case(
        "vllm-text-streaming.yaml",
        {
            "model": "Qwen/Qwen2.5-7B-Instruct",
            "input": "Reply with one short sentence: what is the capital of France?",
            "stream": True,
        },
        [("message", "The capital of France is Paris.", "completed")],
        usage=(40, 8),
    ),
    Case(
        "vllm-tool-call.yaml",
        weather("Qwen/Qwen2.5-7B-Instruct", stream=False),
        [("function_call", "get_weather", '{"location": "Paris"}')],
        usage=(212, 21),
    ),
    Case(
        "vllm-tool-call-streaming.yaml",
        weather("Qwen/Qwen2.5-7B-Instruct", stream=True),
        [("function_call", "get_weather", '{"location": "Paris"}')],
        usage=(212, 21),
    ),
    Case(
        "vllm-parallel-tool-calls.yaml",
        weather(
            "Qwen/Qwen2.5-7B-Instruct",
            stream=False,
            question="What's the weather in Paris and in Tokyo?",
        ),
        [
            ("function_call", "get_weather", '{"location": "Paris"}'),
            ("function_call", "get_weather", '{"location": "Tokyo"}'),
        ],
        usage=(215, 42),
    ),
    Case(
        "vllm-parallel-tool-calls-streaming.yaml",
        weather(
            "Qwen/Qwen2.5-7B-Instruct",
            stream=True,
            question="What's the weather in Paris and in Tokyo?",
        ),
        [
            ("function_call", "get_weather", '{"location": "Paris"}'),
            ("function_call", "get_weather", '{"location": "Tokyo"}'),
        ],
        usage=(215, 42),
    ),
    # Ollama: arguments as a JSON object (native /api/chat form; see the cassette's notes) and
    # as the string its /v1 endpoint sends; the client gets a JSON string either way.
    Case(
        "ollama-tool-call.yaml",
        weather("llama3.1:8b", stream=False),
        [("function_call", "get_weather", '{"location":"Paris"}')],
        usage=(176, 18),
    ),
    Case(
        "ollama-tool-call-streaming.yaml",
        weather("llama3.1:8b", stream=True),
        [("function_call", "get_weather", '{"location":"Paris"}')],
        usage=(176, 18),
    ),
    Case(
        "ollama-tool-call-string-args.yaml",
        weather("llama3.1:8b", stream=False),
        [("function_call", "get_weather", '{"location":"Paris"}')],
        usage=(176, 18),
    ),
    Case(
        "ollama-tool-call-string-args-streaming.yaml",
        weather("llama3.1:8b", stream=True),
        [("function_call", "get_weather", '{"location":"Paris"}')],
        usage=(176, 18),
    ),
    Case(
        "llamacpp-tool-call-object-args.yaml",
        weather("Qwen3.5-35B-A3B", stream=False),
        [
            ("reasoning", "The user wants the current weather in Paris."),
            ("function_call", "get_weather", '{"location":"Paris"}'),
        ],
        usage=(318, 41),
    ),
    Case(
        "vllm-reasoning-content-streaming.yaml",
        {"model": "deepseek-ai/DeepSeek-R1-Distill-Qwen-7B", "input": DECIMALS, "stream": True},
        [
            ("reasoning", "Okay, so I need to compare 9.11 and 9.8."),
            ("message", "\n\n9.8 is greater than 9.11.", "completed"),
        ],
        usage=(17, 52),
    ),
    Case(
        "vllm-reasoning-streaming.yaml",
        {"model": "Qwen/Qwen3-8B", "input": DECIMALS, "stream": True},
        [
            ("reasoning", "The user asks which is greater: 9.11 or 9.8."),
            ("message", "\n\n9.8 is greater than 9.11.", "completed"),
        ],
        usage=(17, 48),
    ),
    Case(
        "deepseek-reasoning-content.yaml",
        {"model": "deepseek-reasoner", "input": DECIMALS},
        [
            ("reasoning", "We need to compare 9.11 and 9.8."),
            ("message", "9.8 is greater than 9.11.", "completed"),
        ],
        usage=(17, 71),
        reasoning_tokens=61,
    ),
    Case(
        "llamacpp-length-cutoff.yaml",
        {
            "model": "gemma-3-4b-it",
            "input": "Write a short story about a lighthouse keeper.",
            "max_output_tokens": 16,
        },
        [
            (
                "message",
                "Elias had tended the lighthouse on Gull Rock for thirty years, and in all that",
                "incomplete",
            )
        ],
        status="incomplete",
        incomplete_reason="max_output_tokens",
        usage=(21, 16),
    ),
    Case(
        "llamacpp-length-cutoff-streaming.yaml",
        {
            "model": "gemma-3-4b-it",
            "input": "Write a short story about a lighthouse keeper.",
            "max_output_tokens": 16,
            "stream": True,
        },
        [
            (
                "message",
                "Elias had tended the lighthouse on Gull Rock for thirty years, and in all that",
                "incomplete",
            )
        ],
        status="incomplete",
        incomplete_reason="max_output_tokens",
        usage=(21, 16),
    ),
    Case(
        "vllm-error-mid-stream.yaml",
        {"model": "Qwen/Qwen2.5-7B-Instruct", "input": LIGHTHOUSE, "stream": True},
        error=("400", "EngineCore encountered an issue."),
    ),
    Case(
        "llamacpp-error-mid-stream-data.yaml",
        {"model": "gemma-3-4b-it", "input": LIGHTHOUSE, "stream": True},
        error=("500", "Context size has been exceeded."),
    ),
    # The older server's ``error: {...}`` SSE field, which SSE clients ignore.
    Case(
        "llamacpp-error-mid-stream.yaml",
        {"model": "qwen2.5-7b-instruct", "input": LIGHTHOUSE, "stream": True},
        error=("500", "Context size has been exceeded."),
    ),
]


@contextlib.contextmanager
def chat_gateway(cassette: str, **settings: Any) -> Iterator[httpx.Client]:
    """A gateway (in this process) whose chat upstream is the cassette, replayed strictly."""
    replay = create_replay_app(load_cassette(CASSETTES / cassette), strict=True)
    with serve_in_thread(replay) as upstream:
        app = create_app(Settings(upstream_url=upstream, upstream_kind="chat", **settings))
        with in_process(app) as gateway:
            yield gateway


def summarize(output: list[JsonObject]) -> list[tuple[str, ...]]:
    summary: list[tuple[str, ...]] = []
    for item in output:
        if item["type"] == "message":
            summary.append(("message", item["content"][0]["text"], item["status"]))
        elif item["type"] == "reasoning":
            summary.append(("reasoning", item["content"][0]["text"]))
        elif item["type"] == "function_call":
            summary.append(("function_call", item["name"], item["arguments"]))
        else:
            summary.append((item["type"],))
    return summary


def check_output(case: Case, response: JsonObject) -> None:
    summary = summarize(response["output"])
    assert len(summary) == len(case.output)
    for got, expected in zip(summary, case.output, strict=True):
        if expected[0] == "reasoning":
            assert got[0] == "reasoning" and got[1].startswith(expected[1])
        else:
            assert got == expected
    for item in response["output"]:
        if item["type"] == "function_call":
            json.loads(item["arguments"])  # always a JSON string
            assert item["call_id"] and item["status"] == "completed"
    assert response["status"] == case.status
    if case.incomplete_reason is None:
        assert response["incomplete_details"] is None
    else:
        assert response["incomplete_details"] == {"reason": case.incomplete_reason}
    assert case.usage is not None
    usage = response["usage"]
    assert (usage["input_tokens"], usage["output_tokens"]) == case.usage
    assert usage["total_tokens"] == sum(case.usage)
    assert usage["output_tokens_details"]["reasoning_tokens"] == case.reasoning_tokens


@pytest.mark.parametrize("case", CASES, ids=lambda case: case.cassette.removesuffix(".yaml"))
def test_chat_cassette(case: Case) -> None:
    with chat_gateway(case.cassette) as gateway:
        client = openai_client(gateway)
        if not case.stream:
            response = client.responses.create(**case.request).model_dump(
                mode="json", exclude_unset=True
            )
            check_output(case, response)
            stored = gateway.get(f"/v1/responses/{response['id']}").json()
            assert summarize(stored["output"]) == summarize(response["output"])
            return
        events = [
            event.model_dump(mode="json", exclude_unset=True)
            for event in client.responses.create(**case.request)
        ]
        assert_lifecycle(events)
        final = events[-1]
        if case.error is not None:
            code, message = case.error
            error = next(e for e in events if e["type"] == "error")
            assert error["code"] == code and error["message"].startswith(message)
            assert final["type"] == "response.failed"
            # ``Response.error.code`` takes OpenAI's codes only; the ``error`` event carries any.
            assert final["response"]["error"]["code"] == "server_error"
            assert final["response"]["error"]["message"] == error["message"]
            return
        kind = "response.completed" if case.status == "completed" else "response.incomplete"
        assert final["type"] == kind
        check_output(case, final["response"])
        stored = gateway.get(f"/v1/responses/{final['response']['id']}").json()
        assert stored["output"] == final["response"]["output"]


def test_every_chat_cassette_is_replayed() -> None:
    on_disk = {path.name for path in CASSETTES.glob("*.yaml")}
    replayed = {case.cassette for case in CASES} | {
        "vllm-tool-loop-sum.yaml",
        "vllm-tool-loop-sum-streaming.yaml",
    }
    assert on_disk == replayed


def test_every_chat_cassette_says_how_it_was_made() -> None:
    for path in CASSETTES.glob("*.yaml"):
        recording = load_cassette(path).extra["recording"]
        assert recording["kind"] in ("hand-written", "recorded"), path.name
        assert recording["sources"] or recording["kind"] == "recorded", path.name


@pytest.mark.parametrize("stream", [False, True])
def test_mcp_tool_loop_over_recorded_chat_traffic(counter_url: str, stream: bool) -> None:
    """The recorded two-round exchange drives a real MCP server: the second recorded request
    carries the tool result the counter server really returned."""
    name = "vllm-tool-loop-sum-streaming.yaml" if stream else "vllm-tool-loop-sum.yaml"
    with chat_gateway(name, egress=local_egress()) as gateway:
        client = openai_client(gateway)
        request: JsonObject = {
            "model": "Qwen/Qwen2.5-7B-Instruct",
            "input": "Use the counter's sum tool to add 2 and 3, then tell me the result.",
            "tools": [
                {
                    "type": "mcp",
                    "server_label": "counter",
                    "server_url": counter_url,
                    "require_approval": "never",
                    "allowed_tools": ["sum"],
                }
            ],
        }
        if stream:
            events = [
                e.model_dump(mode="json", exclude_unset=True)
                for e in client.responses.create(**request, stream=True)
            ]
            assert_lifecycle(events)
            response = events[-1]["response"]
        else:
            response = client.responses.create(**request).model_dump(
                mode="json", exclude_unset=True
            )
    types = [item["type"] for item in response["output"]]
    assert types == ["mcp_list_tools", "mcp_call", "message"]
    call = response["output"][1]
    assert (call["name"], call["output"], call.get("error")) == ("sum", "5", None)
    assert json.loads(call["arguments"]) == {"a": 2, "b": 3}
    assert response["output"][2]["content"][0]["text"] == "2 + 3 = 5."
    assert response["usage"]["input_tokens"] == 236 + 283  # summed over both rounds
