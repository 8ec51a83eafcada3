"""``protocol.events.checked_event``: each upstream event is checked once where it enters the
kernel. A known event whose handler ignores it without a field is dropped (``None``); a field
the kernel reads that has another type is left out (its handler falls back as for a missing
one); every other field, and every event of another type, comes through untouched."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from app.protocol import events as ev
from app.protocol.events import checked_event

Event = dict[str, Any]
_JUNK: list[Any] = [None, 5, 1.5, "text", ["x"], {"a": 1}]

# Per event type: the fields whose type is checked, with a well-typed value for each.
_PART_ADDRESS = {"item_id": "msg_1", "output_index": 0, "content_index": 0}
_SUMMARY_ADDRESS = {"item_id": "rs_1", "output_index": 0, "summary_index": 0}
_PART = {"type": "output_text", "text": ""}
CHECKED_FIELDS: dict[str, Event] = {
    ev.RESPONSE_COMPLETED: {"response": {"status": "completed"}},
    ev.RESPONSE_INCOMPLETE: {"response": {}},
    ev.RESPONSE_FAILED: {"response": {}},
    ev.RESPONSE_DONE: {"response": {}},
    ev.OUTPUT_ITEM_ADDED: {"output_index": 0},
    ev.OUTPUT_ITEM_DONE: {"output_index": 0},
    ev.CONTENT_PART_ADDED: {**_PART_ADDRESS, "part": _PART},
    ev.CONTENT_PART_DONE: {**_PART_ADDRESS, "part": _PART},
    ev.REASONING_PART_ADDED: {**_PART_ADDRESS, "part": _PART},
    ev.REASONING_PART_DONE: {**_PART_ADDRESS, "part": _PART},
    ev.OUTPUT_TEXT_DELTA: {**_PART_ADDRESS, "delta": "a"},
    ev.REFUSAL_DELTA: {**_PART_ADDRESS, "delta": "a"},
    ev.REASONING_TEXT_DELTA: {**_PART_ADDRESS, "delta": "a"},
    ev.OUTPUT_TEXT_DONE: {**_PART_ADDRESS, "text": "a"},
    ev.REASONING_TEXT_DONE: {**_PART_ADDRESS, "text": "a"},
    ev.REFUSAL_DONE: {**_PART_ADDRESS, "refusal": "no"},
    ev.OUTPUT_TEXT_ANNOTATION_ADDED: _PART_ADDRESS,
    ev.FUNCTION_CALL_ARGUMENTS_DELTA: {"item_id": "fc_1", "output_index": 0, "delta": "{"},
    ev.FUNCTION_CALL_ARGUMENTS_DONE: {"item_id": "fc_1", "output_index": 0, "arguments": "{}"},
    ev.REASONING_SUMMARY_PART_ADDED: {**_SUMMARY_ADDRESS, "part": {"type": "summary_text"}},
    ev.REASONING_SUMMARY_PART_DONE: {**_SUMMARY_ADDRESS, "part": {"type": "summary_text"}},
    ev.REASONING_SUMMARY_TEXT_DELTA: {**_SUMMARY_ADDRESS, "delta": "a"},
    ev.REASONING_SUMMARY_TEXT_DONE: {**_SUMMARY_ADDRESS, "text": "a"},
}
# Fields the handler reads without a checked type, or that it does not read: never touched.
UNCHECKED = {"name": 5, "annotation": "x", "logprobs": "x", "sequence_number": "x", "role": 1}
_ITEM = {"type": "message", "id": "msg_1", "content": []}


def _well_formed(kind: str) -> Event:
    event: Event = {"type": kind, **copy.deepcopy(CHECKED_FIELDS[kind]), **UNCHECKED}
    if kind in (ev.OUTPUT_ITEM_ADDED, ev.OUTPUT_ITEM_DONE):
        event["item"] = dict(_ITEM)
    # A field another event type checks is not this one's to check.
    for other in ("content_index", "summary_index", "delta", "text", "refusal", "arguments"):
        event.setdefault(other, 7)
    return event


@pytest.mark.parametrize("kind", sorted(CHECKED_FIELDS))
def test_a_well_formed_event_is_the_same_object(kind: str) -> None:
    event = _well_formed(kind)
    assert checked_event(event) is event


@pytest.mark.parametrize(
    ("kind", "field", "junk"),
    [
        (kind, field, junk)
        for kind, fields in sorted(CHECKED_FIELDS.items())
        for field in fields
        for junk in _JUNK
        if not isinstance(junk, type(fields[field]))
    ],
)
def test_a_field_of_another_type_is_left_out_and_the_rest_kept(
    kind: str, field: str, junk: Any
) -> None:
    event = _well_formed(kind)
    event[field] = junk
    before = copy.deepcopy(event)
    checked = checked_event(event)
    expected = {key: value for key, value in before.items() if key != field}
    assert checked == expected
    assert event == before  # the upstream's object is not changed


def test_two_fields_of_another_type_are_both_left_out() -> None:
    event = {**_well_formed(ev.OUTPUT_TEXT_DELTA), "delta": 5, "item_id": ["x"]}
    checked = checked_event(event)
    assert checked is not None
    assert "delta" not in checked and "item_id" not in checked
    assert checked["content_index"] == 0


def test_an_int_field_accepts_what_isinstance_int_accepts() -> None:
    # bool is an int: the handlers took ``True`` as index 1 before, and still do.
    event = {**_well_formed(ev.OUTPUT_TEXT_DELTA), "content_index": True}
    assert checked_event(event) is event


@pytest.mark.parametrize("kind", sorted(ev.LIFECYCLE_EVENTS))
@pytest.mark.parametrize("response", [*_JUNK[:5], "missing"])
def test_a_lifecycle_event_without_a_response_object_is_dropped(kind: str, response: Any) -> None:
    event: Event = {"type": kind} if response == "missing" else {"type": kind, "response": response}
    assert checked_event(event) is None


@pytest.mark.parametrize("kind", sorted(ev.LIFECYCLE_EVENTS))
def test_a_lifecycle_event_with_a_response_object_is_kept(kind: str) -> None:
    event = {"type": kind, "response": {"id": "resp_1"}}
    assert checked_event(event) is event


@pytest.mark.parametrize("kind", [ev.OUTPUT_ITEM_ADDED, ev.OUTPUT_ITEM_DONE])
@pytest.mark.parametrize("item", [*_JUNK[:5], "missing"])
def test_an_item_event_without_an_item_object_is_dropped(kind: str, item: Any) -> None:
    event: Event = {"type": kind, "output_index": 0}
    if item != "missing":
        event["item"] = item
    assert checked_event(event) is None


@pytest.mark.parametrize(
    "event",
    [
        {"type": "response.mcp_call.in_progress", "item_id": 5, "output_index": "x"},
        {"type": "vendor.event", "delta": 5, "part": "x", "response": []},
        {"type": ev.ERROR, "code": 5, "message": None, "param": ["x"]},
        {"type": ev.STREAM_DONE},
        {"type": 5, "item": "x"},
        {"object": "response", "output": "x"},
    ],
)
def test_events_of_other_types_come_through_untouched(event: Event) -> None:
    before = copy.deepcopy(event)
    assert checked_event(event) is event
    assert event == before
