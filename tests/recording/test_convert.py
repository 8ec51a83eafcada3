"""SSE <-> JSON conversion of recorded Responses answers, checked with the SDK's typed models."""

from __future__ import annotations

import json
from typing import Any

import pytest
from openai.types.responses import Response, ResponseStreamEvent
from pydantic import TypeAdapter

from app.recording.cassette import RecordedResponse, sse_data_events
from app.recording.convert import as_json, as_sse, final_response, response_events

EVENTS: TypeAdapter[Any] = TypeAdapter(ResponseStreamEvent)


def a_response(status: str = "completed", vendor_item: bool = False) -> dict[str, Any]:
    """A Response with one item of every kind the conversion fills in (and, with
    ``vendor_item``, one that it does not know)."""
    response: dict[str, Any] = {
        "id": "resp_1",
        "object": "response",
        "created_at": 1,
        "model": "m",
        "status": status,
        "parallel_tool_calls": True,
        "tool_choice": "auto",
        "tools": [],
        "output": [
            {
                "type": "reasoning",
                "id": "rs_1",
                "summary": [{"type": "summary_text", "text": "thinking about it"}],
                "content": [{"type": "reasoning_text", "text": "step by step"}],
            },
            {
                "type": "message",
                "id": "msg_1",
                "role": "assistant",
                "status": "completed",
                "content": [
                    {"type": "output_text", "text": "Hello", "annotations": []},
                    {"type": "refusal", "refusal": "not that"},
                ],
            },
            {
                "type": "function_call",
                "id": "fc_1",
                "call_id": "call_1",
                "name": "get_weather",
                "arguments": '{"city": "Paris"}',
                "status": "completed",
            },
        ],
        "usage": {
            "input_tokens": 3,
            "input_tokens_details": {"cached_tokens": 0, "cache_write_tokens": 0},
            "output_tokens": 5,
            "output_tokens_details": {"reasoning_tokens": 2},
            "total_tokens": 8,
        },
    }
    if vendor_item:
        response["output"].append({"type": "vendor_item", "id": "v_1", "payload": [1, 2]})
    return response


def test_the_synthesized_stream_is_the_standard_sequence() -> None:
    response = a_response()
    Response.model_validate(response)
    events = response_events(response)
    for event in events:
        EVENTS.validate_python(event)
    assert [e["sequence_number"] for e in events] == list(range(len(events)))
    types = [e["type"] for e in events]
    assert types[:3] == ["response.created", "response.in_progress", "response.output_item.added"]
    assert events[0]["response"]["usage"] is None
    assert events[0]["response"]["status"] == "in_progress"
    assert events[0]["response"]["output"] == []
    assert types[-1] == "response.completed"
    assert events[-1]["response"] == response
    done = [e["item"] for e in events if e["type"] == "response.output_item.done"]
    assert done == response["output"]
    for kind in (
        "response.reasoning_summary_text.delta",
        "response.reasoning_text.delta",
        "response.content_part.added",
        "response.output_text.delta",
        "response.refusal.delta",
        "response.function_call_arguments.delta",
    ):
        assert kind in types


def test_an_unknown_item_is_carried_through_as_added_then_done() -> None:
    events = response_events(a_response(vendor_item=True))
    vendor = [e for e in events if e.get("item", {}).get("type") == "vendor_item"]
    assert [e["type"] for e in vendor] == [
        "response.output_item.added",
        "response.output_item.done",
    ]
    assert (
        vendor[0]["item"]
        == vendor[1]["item"]
        == {"type": "vendor_item", "id": "v_1", "payload": [1, 2]}
    )
    assert vendor[1]["output_index"] == 3


def test_deltas_fill_in_what_the_added_items_leave_out() -> None:
    events = response_events(a_response())
    added = {e["item"]["id"]: e["item"] for e in events if e["type"].endswith("item.added")}
    assert added["msg_1"]["content"] == [] and added["msg_1"]["status"] == "in_progress"
    assert added["fc_1"]["arguments"] == ""
    text = "".join(e["delta"] for e in events if e["type"] == "response.output_text.delta")
    arguments = "".join(
        e["delta"] for e in events if e["type"] == "response.function_call_arguments.delta"
    )
    assert (text, arguments) == ("Hello", '{"city": "Paris"}')


@pytest.mark.parametrize(
    ("status", "terminal"),
    [("completed", "response.completed"), ("incomplete", "response.incomplete")],
)
def test_json_to_sse_and_back(status: str, terminal: str) -> None:
    recorded = RecordedResponse(body=a_response(status))
    streamed = as_sse(recorded)
    assert streamed is not None and streamed.content_type.startswith("text/event-stream")
    assert sse_data_events(streamed)[-1]["type"] == terminal
    assert "".join(streamed.sse or []).count("event: ") == len(sse_data_events(streamed))
    back = as_json(streamed)
    assert back is not None and back.body == recorded.body


@pytest.mark.parametrize("terminal", ["response.failed", "response.done"])
def test_the_json_form_of_a_stream_is_its_terminal_response(terminal: str) -> None:
    response = a_response("failed")
    lines = [
        f"data: {json.dumps({'type': 'response.created', 'response': {'id': 'resp_1'}})}\n",
        "\n",
        f"data: {json.dumps({'type': terminal, 'response': response})}\n",
        "\n",
        "data: [DONE]\n",
        "\n",
    ]
    recorded = RecordedResponse(sse=lines)
    assert final_response(recorded) == response
    converted = as_json(recorded)
    assert converted is not None and converted.body == response
    assert converted.content_type == "application/json"


@pytest.mark.parametrize(
    "recorded",
    [
        RecordedResponse(status_code=400, body={"error": {"message": "bad"}}),
        RecordedResponse(body={"object": "list", "data": []}),
        RecordedResponse(status_code=500, sse=["data: {}\n", "\n"]),
        RecordedResponse(sse=['data: {"type": "response.created"}\n', "\n"]),
    ],
)
def test_what_is_not_a_successful_responses_answer_is_not_converted(
    recorded: RecordedResponse,
) -> None:
    assert (as_sse(recorded) if recorded.sse is None else as_json(recorded)) is None
