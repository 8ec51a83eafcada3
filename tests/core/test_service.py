"""ResponsesService: the streaming and the JSON path give the same final Response (over the
recordings of tests/fixtures; tests/recording/test_shared_corpus.py does it over ../shared)."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from app.core.service import ResponsesService
from app.core.tenancy import DEFAULT_TENANT
from app.errors import UpstreamProtocolError
from app.protocol.requests import ParsedRequest
from tests.cassette_cases import StreamCase, case, streaming_cases
from tests.fakes import FakeUpstream, MemoryResponseStore
from tests.lifecycle import assert_lifecycle, project


def with_final_output(cases: list[StreamCase]) -> list[StreamCase]:
    return [c for c in cases if c.final_response and c.final_response.get("output")]


CASES = with_final_output(streaming_cases())

# Fields of the Open Responses schema's required list (ResponseResource.json).
REQUIRED_FIELDS = {
    "id", "object", "created_at", "completed_at", "status", "incomplete_details", "model",
    "previous_response_id", "instructions", "output", "error", "tools", "tool_choice",
    "truncation", "parallel_tool_calls", "text", "top_p", "presence_penalty",
    "frequency_penalty", "top_logprobs", "temperature", "reasoning", "user", "usage",
    "max_output_tokens", "max_tool_calls", "store", "background", "service_tier", "metadata",
    "safety_identifier", "prompt_cache_key",
}  # fmt: skip
NON_NULL = {
    "id", "object", "created_at", "status", "model", "output", "tools", "tool_choice",
    "truncation", "parallel_tool_calls", "text", "top_p", "presence_penalty",
    "frequency_penalty", "top_logprobs", "temperature", "store", "background", "service_tier",
    "metadata",
}  # fmt: skip


def make_service(upstream: FakeUpstream) -> ResponsesService:
    return ResponsesService(upstream, MemoryResponseStore())


async def run_stream(service: ResponsesService, body: dict[str, Any]) -> list[dict[str, Any]]:
    events = await service.open_stream(ParsedRequest.from_body(body, tenant=DEFAULT_TENANT), {})
    return [event async for event in events]


def comparable(response: dict[str, Any]) -> dict[str, Any]:
    out = {k: v for k, v in response.items() if k not in ("id", "created_at", "completed_at")}
    out["output"] = project(response["output"])
    return out


def assert_strict_fields(response: dict[str, Any]) -> None:
    assert set(response) >= REQUIRED_FIELDS, REQUIRED_FIELDS - set(response)
    nulls = {k for k in NON_NULL if response[k] is None}
    assert not nulls, nulls
    usage = response["usage"]
    if response["status"] == "in_progress":
        assert usage is None  # as OpenAI's: no usage before the response is done
    else:
        assert usage["input_tokens_details"]["cached_tokens"] >= 0
        assert usage["input_tokens_details"]["cache_write_tokens"] >= 0
        assert usage["output_tokens_details"]["reasoning_tokens"] >= 0
    for item in response["output"]:
        if item["type"] == "message":
            assert item["id"] and item["status"] in ("completed", "incomplete")
    for tool in response["tools"]:
        if tool["type"] == "function":
            assert isinstance(tool["strict"], bool)


@pytest.mark.parametrize("stream_case", CASES, ids=lambda c: c.name)
async def test_stream_path_equals_json_path(stream_case: StreamCase) -> None:
    await assert_stream_path_equals_json_path(stream_case)


async def assert_stream_path_equals_json_path(stream_case: StreamCase) -> None:
    final = copy.deepcopy(stream_case.final_response)
    assert final is not None
    # What a non-streaming call would return: some servers describe themselves in
    # ``response.created`` and leave those fields out of the final object.
    for event in stream_case.events:
        if event.get("type") in ("response.created", "response.in_progress"):
            final = {**event["response"], **final}
    streamed = make_service(FakeUpstream(events=stream_case.events))
    as_json = make_service(FakeUpstream(body=final))
    # The paths are compared on one round; the server-side state is tested elsewhere.
    stateless = {
        k: v
        for k, v in stream_case.request.items()
        if k not in ("previous_response_id", "conversation")
    }
    body = {**stateless, "stream": True}

    events = await run_stream(streamed, body)
    from_stream = assert_lifecycle(events)
    from_json = await as_json.create(
        ParsedRequest.from_body({**body, "stream": False}, tenant=DEFAULT_TENANT), {}
    )

    assert_strict_fields(from_stream)
    assert_strict_fields(from_json)
    assert from_stream["status"] == from_json["status"] == "completed"
    assert comparable(from_stream) == {**comparable(from_json), "output": project(final["output"])}
    assert comparable(from_json)["output"] == project(final["output"])
    assert from_stream["completed_at"] is not None and from_json["completed_at"] is not None


async def test_created_and_completed_carry_the_same_id_and_every_strict_field() -> None:
    source = case("text_only/responses/resp-single-gpt-4o-streaming")
    events = await run_stream(make_service(FakeUpstream(events=source.events)), source.request)
    assert_strict_fields(events[0]["response"])
    assert events[0]["response"]["status"] == "in_progress"
    assert events[0]["response"]["id"].startswith("resp_")
    assert events[-1]["response"]["usage"]["total_tokens"] > 0


async def test_request_fields_are_echoed_and_function_tools_get_strict() -> None:
    source = case("tool-call-named-Qwen")
    body = {**source.request, "metadata": {"k": "v"}, "instructions": "be brief"}
    events = await run_stream(make_service(FakeUpstream(events=source.events)), body)
    final = assert_lifecycle(events)
    assert final["metadata"] == {"k": "v"}
    assert final["instructions"] == "be brief"
    assert final["tool_choice"] == source.request["tool_choice"]
    assert all(tool["strict"] is True for tool in final["tools"])


async def test_request_is_sent_upstream_unchanged() -> None:
    source = case("tool-call-named-Qwen")
    upstream = FakeUpstream(events=source.events)
    await run_stream(make_service(upstream), copy.deepcopy(source.request))
    assert upstream.requests == [source.request]


async def test_upstream_failure_mid_stream_gives_error_then_failed() -> None:
    source = case("text_only/responses/resp-single-gpt-4o-streaming")
    partial = [e for e in source.events if e["type"] != "response.completed"][:6]
    upstream = FakeUpstream(events=partial, fail_after=UpstreamProtocolError("connection lost"))
    events = await run_stream(make_service(upstream), source.request)
    final = assert_lifecycle(events)
    assert [e["type"] for e in events[-2:]] == ["error", "response.failed"]
    assert events[-2]["code"] == "upstream_protocol_error"
    assert final["status"] == "failed" and final["error"]["message"] == "connection lost"
    assert upstream.streams[0].closed


async def test_stream_that_just_stops_is_a_failure_not_a_silent_cut() -> None:
    source = case("text_only/responses/resp-single-gpt-4o-streaming")
    partial = [e for e in source.events if e["type"] != "response.completed"]
    events = await run_stream(make_service(FakeUpstream(events=partial)), source.request)
    assert_lifecycle(events)
    assert events[-1]["type"] == "response.failed"


async def test_upstream_error_event_fails_the_response() -> None:
    source = case("text_only/responses/resp-single-gpt-4o-streaming")
    events_in = [*source.events[:4], {"type": "error", "code": "overloaded", "message": "busy"}]
    events = await run_stream(make_service(FakeUpstream(events=events_in)), source.request)
    final = assert_lifecycle(events)
    assert events[-2] == {
        "type": "error",
        "code": "overloaded",
        "message": "busy",
        "param": None,
        "sequence_number": events[-2]["sequence_number"],
    }
    # ``Response.error.code`` takes OpenAI's codes only; the ``error`` event carries any.
    assert final["error"] == {"code": "server_error", "message": "busy"}
