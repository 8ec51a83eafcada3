"""The official ``openai`` SDK against the gateway in front of replayed real upstream traffic.

For each recording: the client sends the recorded request; the test asserts that the request
the gateway sent upstream equals the recorded one, and that the final output equals what the
recorded upstream produced.
"""

from __future__ import annotations

import inspect
from typing import Any

import openai
import pytest

from app.recording.cassette import Turn, sse_data_events
from tests.e2e.conftest import SharedStack
from tests.helpers import without_parsed
from tests.lifecycle import assert_lifecycle, project
from tests.recordings import SHARED as SHARED_CASSETTES
from tests.recordings import needs_shared

pytestmark = needs_shared

JSON_CASES = [
    "text_only/responses/resp-single-gpt-4o-nonstreaming.yaml",
    "reasoning/responses/reasoning-single-Qwen-Qwen3-30B-A3B-FP8-nonstreaming.yaml",
    "reasoning/responses/reasoning-single-openai-gpt-oss-20b-nonstreaming.yaml",
    "tool_calls/tool-call-auto-Qwen-Qwen3-30B-A3B-FP8-nonstreaming.yaml",
    "tool_calls/tool-call-named-Qwen-Qwen3-30B-A3B-FP8-nonstreaming.yaml",
    "tool_calls/tool-call-none-Qwen-Qwen3-30B-A3B-FP8-nonstreaming.yaml",
    "tool_calls/tool-call-required-Qwen-Qwen3-30B-A3B-FP8-nonstreaming.yaml",
    "sglang/sglang-tool-call-auto-Qwen-Qwen3-8B-nonstreaming.yaml",
    "file_search/vllm-file-search-openai-gpt-oss-20b.json",
]
STREAM_CASES = [
    "text_only/responses/resp-single-gpt-4o-streaming.yaml",
    "reasoning/responses/reasoning-single-Qwen-Qwen3-30B-A3B-FP8-streaming.yaml",
    "reasoning/responses/reasoning-single-openai-gpt-oss-20b-streaming.yaml",
    "tool_calls/tool-call-named-Qwen-Qwen3-30B-A3B-FP8-streaming.yaml",
    "tool_calls/tool-call-required-Qwen-Qwen3-30B-A3B-FP8-streaming.yaml",
    "sglang/sglang-tool-call-auto-Qwen-Qwen3-8B-streaming.yaml",
    "events/text-only-vllm-gemma4.yaml",
    "events/function-call-vllm-gemma4.yaml",
]
# Multi-turn recordings whose client resent the whole history itself (no server state needed).
STATELESS_MULTI_TURN = [
    "sglang/sglang-stateful-Qwen-Qwen3-8B-nonstreaming.yaml",
]

_CREATE_PARAMS = set(inspect.signature(openai.OpenAI(api_key="x").responses.create).parameters)


def sdk_kwargs(body: dict[str, Any]) -> dict[str, Any]:
    """Split a recorded body into the SDK's keyword arguments and ``extra_body``."""
    known = {k: v for k, v in body.items() if k in _CREATE_PARAMS}
    extra = {k: v for k, v in body.items() if k not in _CREATE_PARAMS}
    if extra:
        known["extra_body"] = extra
    return known


def recorded_output(turn: Turn) -> list[dict[str, Any]]:
    if turn.response.body is not None:
        output: list[dict[str, Any]] = turn.response.body["output"]
        return output
    for event in reversed(sse_data_events(turn)):
        if event.get("type") == "response.completed" and event["response"].get("output"):
            final: list[dict[str, Any]] = event["response"]["output"]
            return final
    return []


def responses_turns(cassette_turns: list[Turn]) -> list[Turn]:
    return [t for t in cassette_turns if t.request.path == "/v1/responses"]


@pytest.mark.parametrize("relative", JSON_CASES + STATELESS_MULTI_TURN)
def test_create_matches_recording(replay_stack: SharedStack, relative: str) -> None:
    stack = replay_stack.play(SHARED_CASSETTES / relative)
    turns = responses_turns(stack.cassette.turns)
    for turn in turns:
        body = dict(turn.request.body)
        response = stack.client.responses.create(**sdk_kwargs(body))
        data = response.model_dump(mode="json", warnings=False)
        assert response.status == "completed"
        assert project(data["output"]) == project(recorded_output(turn))
        assert response.id.startswith("resp_")
        assert response.usage is not None
    sent = stack.received()
    assert [r["body"] for r in sent] == [t.request.body for t in turns]
    assert {r["path"] for r in sent} == {"/v1/responses"}


@pytest.mark.parametrize("relative", STREAM_CASES)
def test_stream_matches_recording(replay_stack: SharedStack, relative: str) -> None:
    stack = replay_stack.play(SHARED_CASSETTES / relative)
    (turn,) = responses_turns(stack.cassette.turns)
    body = {k: v for k, v in turn.request.body.items() if k != "stream"}
    events: list[dict[str, Any]] = []
    with stack.client.responses.stream(**sdk_kwargs(body)) as stream:
        for event in stream:
            events.append(event.model_dump(mode="json", warnings=False))
        final = stream.get_final_response()
    completed = assert_lifecycle(events)
    assert final.status == "completed"
    assert final.model_dump(mode="json", warnings=False)["output"] == completed["output"]
    # Stored once, before the client saw it complete: retrieval gives the same object.
    stored = stack.client.responses.retrieve(final.id)
    assert stored.model_dump(mode="json", warnings=False) == without_parsed(events[-1]["response"])
    expected = recorded_output(turn)
    if expected:
        assert project(completed["output"]) == project(expected)
    else:
        text = stack.cassette.extra.get("expected_text")
        call = stack.cassette.extra.get("expected_function_call")
        if text is not None:
            assert final.output_text.strip() == text
        if call is not None:
            (item,) = [i for i in completed["output"] if i["type"] == "function_call"]
            assert item["name"] == call["name"]
    sent = stack.received()
    assert [r["body"] for r in sent] == [turn.request.body]


def test_streamed_text_arrives_as_deltas(replay_stack: SharedStack) -> None:
    relative = "reasoning/responses/reasoning-single-openai-gpt-oss-20b-streaming.yaml"
    stack = replay_stack.play(SHARED_CASSETTES / relative)
    (turn,) = responses_turns(stack.cassette.turns)
    body = {k: v for k, v in turn.request.body.items() if k != "stream"}
    recorded = [e for e in sse_data_events(turn) if e["type"].endswith(".delta")]
    with stack.client.responses.stream(**sdk_kwargs(body)) as stream:
        deltas = [e.delta for e in stream if e.type.endswith(".delta")]
    assert deltas == [e["delta"] for e in recorded]


def test_models_are_forwarded(replay_stack: SharedStack) -> None:
    relative = "text_only/responses/resp-single-gpt-4o-nonstreaming.yaml"
    stack = replay_stack.play(SHARED_CASSETTES / relative)
    models = [m.id for m in stack.client.models.list()]
    assert models == ["gpt-4o"]
