"""The accumulator over upstream events with fields of the wrong type: checked once on entry
(``protocol.events.checked_event``), they fold as before the check moved there: such a field
folds as if it were missing, and an event its handler cannot use is ignored."""

from __future__ import annotations

import copy
import json
import re
from typing import Any

import pytest

from app.core.accumulator import ResponseAccumulator
from app.protocol import events as ev
from tests.protocol.test_checked_event import CHECKED_FIELDS

Event = dict[str, Any]
_GATEWAY_ID = re.compile(r"\b(msg|fc|rs|call)_[0-9A-Za-z]+")


def _fold(events: list[Event]) -> str:
    """The client events and the final state, with the gateway's random ids numbered."""
    accumulator = ResponseAccumulator()
    out = [accumulator.feed(copy.deepcopy(event)) for event in events]
    state = [out, accumulator.finish(), accumulator.output, accumulator.upstream_response]
    names: dict[str, str] = {}
    text = json.dumps(state, sort_keys=True)
    return _GATEWAY_ID.sub(lambda m: names.setdefault(m.group(0), f"id{len(names)}"), text)


_OPENED = [
    {"type": ev.RESPONSE_CREATED, "response": {"id": "resp_1", "status": "in_progress"}},
    {
        "type": ev.OUTPUT_ITEM_ADDED,
        "output_index": 0,
        "item": {"type": "message", "id": "msg_1", "role": "assistant", "content": []},
    },
]


@pytest.mark.parametrize(
    ("kind", "field"),
    [(kind, field) for kind, fields in sorted(CHECKED_FIELDS.items()) for field in fields],
)
@pytest.mark.parametrize("junk", [5, ["x"], None])
def test_a_field_of_the_wrong_type_folds_as_a_missing_one(kind: str, field: str, junk: Any) -> None:
    event: Event = {"type": kind, **copy.deepcopy(CHECKED_FIELDS[kind])}
    if kind in (ev.OUTPUT_ITEM_ADDED, ev.OUTPUT_ITEM_DONE):
        event["item"] = {"type": "message", "id": "msg_2", "content": []}
    missing = {key: value for key, value in event.items() if key != field}
    assert _fold([*_OPENED, {**event, field: junk}]) == _fold([*_OPENED, missing])


@pytest.mark.parametrize("item", [None, "x", ["x"]])
@pytest.mark.parametrize("kind", [ev.OUTPUT_ITEM_ADDED, ev.OUTPUT_ITEM_DONE])
def test_an_item_event_without_an_item_object_is_ignored(kind: str, item: Any) -> None:
    accumulator = ResponseAccumulator()
    assert accumulator.feed({"type": kind, "output_index": 0, "item": item}) == []
    assert accumulator.output == []


def test_a_lifecycle_event_without_a_response_object_keeps_the_last_one() -> None:
    accumulator = ResponseAccumulator()
    accumulator.feed({"type": ev.RESPONSE_CREATED, "response": {"id": "resp_1"}})
    assert accumulator.feed({"type": ev.RESPONSE_IN_PROGRESS, "response": "x"}) == []
    assert accumulator.upstream_response == {"id": "resp_1"}


def test_a_terminal_event_with_a_response_of_another_type_still_ends_the_response() -> None:
    accumulator = ResponseAccumulator()
    accumulator.feed(_OPENED[1])
    events = accumulator.feed({"type": ev.RESPONSE_INCOMPLETE, "response": ["x"]})
    assert accumulator.finished and accumulator.status == "incomplete"
    assert [event["type"] for event in events] == [ev.OUTPUT_ITEM_DONE]
    assert accumulator.output[0]["status"] == "incomplete"


def test_an_annotation_that_is_not_an_object_is_carried_but_not_stored() -> None:
    accumulator = ResponseAccumulator()
    accumulator.feed(_OPENED[1])
    event = {"type": ev.OUTPUT_TEXT_ANNOTATION_ADDED, "output_index": 0, "annotation": "x"}
    out = accumulator.feed(event)
    assert out[-1]["annotation"] == "x"
    assert out[-1]["annotation_index"] == -1
    assert accumulator.output[0]["content"][0].get("annotations") == []


def test_a_delta_of_another_type_is_sent_on_as_an_empty_delta() -> None:
    accumulator = ResponseAccumulator()
    accumulator.feed(_OPENED[1])
    out = accumulator.feed({"type": ev.OUTPUT_TEXT_DELTA, "output_index": 0, "delta": 5})
    assert out[-1]["delta"] == ""
    assert accumulator.output[0]["content"][0]["text"] == ""
