"""The accumulator over the streaming recordings of tests/fixtures, and their real-world quirks
(tests/recording/test_shared_corpus.py runs it over every recording of ../shared too)."""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest

from app.core.accumulator import ResponseAccumulator
from app.core.response import normalize_item
from app.core.stream import ResponseLifecycle
from tests.cassette_cases import StreamCase, case, streaming_cases
from tests.lifecycle import assert_lifecycle, project

CASES = streaming_cases()
Event = dict[str, Any]


def fold(events: list[Event]) -> tuple[ResponseAccumulator, list[Event]]:
    """Run events through the accumulator and wrap them in a lifecycle, as the service does."""
    accumulator = ResponseAccumulator()
    lifecycle = ResponseLifecycle()
    out = lifecycle.opening({"id": "resp_test", "output": [], "status": "in_progress"})
    for event in events:
        out.extend(lifecycle.stamp(e) for e in accumulator.feed(copy.deepcopy(event)))
        if accumulator.finished:
            break
    out.extend(lifecycle.stamp(e) for e in accumulator.finish())
    final = {"id": "resp_test", "status": accumulator.status, "output": accumulator.output}
    out.append(lifecycle.closing(final))
    return accumulator, out


def text_of(items: list[Event]) -> str:
    return "".join(
        part.get("text", "")
        for item in items
        if item.get("type") == "message"
        for part in item.get("content") or []
    )


def expected_output(stream_case: StreamCase) -> list[Event] | None:
    final = stream_case.final_response
    if final is None or not final.get("output"):
        return None
    return [normalize_item(copy.deepcopy(item)) for item in final["output"]]


def test_there_are_recordings_to_check() -> None:
    assert len(CASES) >= 10


def assert_folds_to_the_final_output(stream_case: StreamCase) -> None:
    accumulator, events = fold(stream_case.events)
    assert_lifecycle(events)
    expected = expected_output(stream_case)
    if expected is not None:
        assert project(accumulator.output) == project(expected)
    elif stream_case.expected_text is not None:
        assert text_of(accumulator.output).strip() == stream_case.expected_text
    else:
        assert accumulator.output, "no output folded"
    assert accumulator.status == "completed"


@pytest.mark.parametrize("stream_case", CASES, ids=lambda c: c.name)
def test_stream_folds_to_the_upstreams_final_output(stream_case: StreamCase) -> None:
    assert_folds_to_the_final_output(stream_case)


@pytest.mark.parametrize("stream_case", CASES, ids=lambda c: c.name)
def test_text_deltas_are_forwarded_one_for_one(stream_case: StreamCase) -> None:
    """Every upstream text delta reaches the client as it arrives: never merged, never held."""
    accumulator = ResponseAccumulator()
    for event in stream_case.events:
        emitted = accumulator.feed(copy.deepcopy(event))
        if event.get("type") in ("response.output_text.delta", "response.reasoning_text.delta"):
            deltas = [e for e in emitted if e["type"] == event["type"]]
            assert [e["delta"] for e in deltas] == [event["delta"]]


# ---------------------------------------------------------------- quirks of real upstreams


def _gpt_oss() -> StreamCase:
    return case("reasoning-single-openai-gpt-oss-20b-streaming")


def test_message_without_output_item_added_is_opened_by_the_gateway() -> None:
    """gpt-oss on vLLM: the message after reasoning comes with no ``output_item.added``."""
    source = _gpt_oss()
    events = [
        e
        for e in source.events
        if not (e["type"] == "response.output_item.added" and e["item"]["type"] == "message")
        and e["type"] != "response.content_part.added"
    ]
    accumulator, out = fold(events)
    assert_lifecycle(out)
    assert project(accumulator.output) == project(expected_output(source) or [])
    added = [e["item"]["type"] for e in out if e["type"] == "response.output_item.added"]
    assert added == ["reasoning", "message"]


def test_message_reusing_the_reasoning_item_id_gets_its_own_item() -> None:
    source = _gpt_oss()
    reasoning_id = next(
        e["item"]["id"] for e in source.events if e["type"] == "response.output_item.added"
    )
    events = []
    for event in source.events:
        event = copy.deepcopy(event)
        if event["type"] == "response.output_item.added" and event["item"]["type"] == "message":
            continue
        if event["type"] == "response.output_item.done" and event["item"]["type"] == "message":
            event["item"]["id"] = reasoning_id
        if event.get("output_index") == 1 and "item_id" in event:
            event["item_id"] = reasoning_id
        events.append(event)
    accumulator, out = fold(events)
    assert_lifecycle(out)
    ids = [item["id"] for item in accumulator.output]
    assert len(set(ids)) == 2
    assert text_of(accumulator.output) == "HELLO"


def test_sglang_negative_sequence_numbers_are_renumbered() -> None:
    source = case("sglang-tool-call-auto")
    events = [{**e, "sequence_number": -1} for e in source.events]
    _, out = fold(events)
    final = assert_lifecycle(out)
    assert [item["type"] for item in final["output"]] == ["reasoning", "message", "function_call"]


def test_items_that_arrive_only_as_done_are_opened_and_replayed() -> None:
    source = case("tool-call-required-Qwen")
    done_only = [
        e
        for e in source.events
        if e["type"] in ("response.created", "response.output_item.done", "response.completed")
    ]
    accumulator, out = fold(done_only)
    assert_lifecycle(out)
    assert project(accumulator.output) == project(expected_output(source) or [])
    deltas = [e for e in out if e["type"] == "response.function_call_arguments.delta"]
    assert len(deltas) == 2


def test_message_only_as_done_streams_its_text() -> None:
    source = case("text_only/responses/resp-single-gpt-4o-streaming")
    done_only = [
        e for e in source.events if e["type"] in ("response.output_item.done", "response.completed")
    ]
    accumulator, out = fold(done_only)
    assert_lifecycle(out)
    text = "".join(e["delta"] for e in out if e["type"] == "response.output_text.delta")
    assert text == text_of(accumulator.output) == text_of(expected_output(source) or [])


def test_response_done_ends_the_response_like_completed() -> None:
    source = case("text_only/responses/resp-single-gpt-4o-streaming")
    events = [
        {**e, "type": "response.done"} if e["type"] == "response.completed" else e
        for e in source.events
    ]
    accumulator, out = fold(events)
    assert accumulator.status == "completed"
    assert accumulator.usage is not None and accumulator.usage["total_tokens"] > 0
    assert out[-1]["type"] == "response.completed"


def test_only_a_terminal_event_with_output_is_expanded_into_items() -> None:
    source = case("sglang-tool-call-auto")
    terminal = [e for e in source.events if e["type"] == "response.completed"]
    accumulator, out = fold(terminal)
    assert_lifecycle(out)
    assert project(accumulator.output) == project(expected_output(source) or [])


def test_reasoning_part_events_become_content_part_events() -> None:
    _, out = fold(_gpt_oss().events)
    types = {e["type"] for e in out}
    assert "response.reasoning_part.added" not in types
    parts = [e["part"]["type"] for e in out if e["type"] == "response.content_part.added"]
    assert parts == ["reasoning_text", "output_text"]


def test_content_index_is_a_position_in_the_item() -> None:
    """vLLM opens gpt-oss's message part at content_index 1; the client sees position 0."""
    _, out = fold(_gpt_oss().events)
    message_events = [e for e in out if e.get("output_index") == 1 and "content_index" in e]
    assert message_events and {e["content_index"] for e in message_events} == {0}


def test_reasoning_summary_events_fold_into_summary() -> None:
    events: list[Event] = [
        {"type": "response.created", "response": {"id": "r", "output": []}},
        {
            "type": "response.output_item.added",
            "output_index": 0,
            "item": {"id": "rs_1", "type": "reasoning", "summary": []},
        },
        {
            "type": "response.reasoning_summary_text.delta",
            "item_id": "rs_1",
            "output_index": 0,
            "summary_index": 0,
            "delta": "Think",
        },
        {
            "type": "response.reasoning_summary_text.delta",
            "item_id": "rs_1",
            "output_index": 0,
            "summary_index": 0,
            "delta": "ing.",
        },
        {
            "type": "response.reasoning_summary_text.done",
            "item_id": "rs_1",
            "output_index": 0,
            "summary_index": 0,
            "text": "Thinking.",
        },
        {"type": "response.completed", "response": {"id": "r", "status": "completed"}},
    ]
    accumulator, out = fold(events)
    assert_lifecycle(out)
    assert accumulator.output[0]["summary"] == [{"type": "summary_text", "text": "Thinking."}]
    assert out[3]["type"] == "response.reasoning_summary_part.added"


def test_parallel_function_calls_with_interleaved_argument_deltas() -> None:
    source = case("tool-call-required-Qwen")
    calls: dict[int, list[Event]] = {}
    head: list[Event] = []
    tail: list[Event] = []
    for event in source.events:
        index = event.get("output_index")
        if isinstance(index, int):
            calls.setdefault(index, []).append(event)
        elif not calls:
            head.append(event)
        else:
            tail.append(event)
    first, second = calls[0], calls[1]
    interleaved: list[Event] = []
    for position in range(max(len(first), len(second))):
        interleaved.extend(first[position : position + 1])
        interleaved.extend(second[position : position + 1])
    accumulator, out = fold(head + interleaved + tail)
    assert_lifecycle(out)
    assert project(accumulator.output) == project(expected_output(source) or [])


def test_unknown_events_and_items_are_carried_through_unchanged() -> None:
    vendor_event = {"type": "vendor.telemetry", "payload": {"gpu": 3}, "sequence_number": 7}
    unknown_item = {"type": "hologram", "id": "holo_1", "frames": [1, 2, 3]}
    events: list[Event] = [
        {"type": "response.created", "response": {"id": "r"}},
        vendor_event,
        {"type": "response.output_item.added", "output_index": 0, "item": unknown_item},
        {"type": "response.hologram.frame", "output_index": 0, "item_id": "holo_1", "frame": 4},
        {
            "type": "response.output_item.done",
            "output_index": 0,
            "item": {**unknown_item, "frames": [1, 2, 3, 4]},
        },
        {"type": "response.completed", "response": {"id": "r", "status": "completed"}},
    ]
    accumulator, out = fold(events)
    assert_lifecycle(out)
    passed = [e for e in out if e["type"] == "vendor.telemetry"]
    assert passed == [{**vendor_event, "sequence_number": passed[0]["sequence_number"]}]
    frame = next(e for e in out if e["type"] == "response.hologram.frame")
    assert frame["frame"] == 4 and frame["item_id"] == "holo_1"
    assert accumulator.output == [{**unknown_item, "frames": [1, 2, 3, 4]}]
    added = next(e for e in out if e["type"] == "response.output_item.added")
    assert added["item"] == unknown_item


def test_stream_that_ends_with_done_marker_and_no_terminal_completes() -> None:
    source = case("text_only/responses/resp-single-gpt-4o-streaming")
    events = [e for e in source.events if e["type"] != "response.completed"]
    events.append({"type": "[DONE]"})
    accumulator, out = fold(events)
    assert accumulator.status == "completed"
    assert_lifecycle(out)


def test_open_items_are_closed_as_incomplete_when_the_response_is_incomplete() -> None:
    source = case("text_only/responses/resp-single-gpt-4o-streaming")
    events = [
        e
        for e in source.events
        if e["type"]
        not in (
            "response.output_text.done",
            "response.content_part.done",
            "response.output_item.done",
            "response.completed",
        )
    ]
    events.append(
        {
            "type": "response.incomplete",
            "response": {
                "status": "incomplete",
                "incomplete_details": {"reason": "max_output_tokens"},
            },
        }
    )
    accumulator, out = fold(events)
    assert_lifecycle(out)
    assert accumulator.status == "incomplete"
    assert accumulator.incomplete_details == {"reason": "max_output_tokens"}
    assert accumulator.output[0]["status"] == "incomplete"
    assert out[-1]["type"] == "response.incomplete"
    json.dumps(out)
