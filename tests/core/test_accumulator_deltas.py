"""The text-delta fast path (``ItemEvents._on_text_delta`` reusing the previous delta's address)
gives exactly what the full look-up gives, whatever the deltas' order."""

from __future__ import annotations

from typing import Any

import pytest

from app.core.accumulator import ResponseAccumulator
from app.protocol.json_types import JsonObject


def _delta(
    kind: str, item: str, output_index: int, content_index: int | None, text: str
) -> JsonObject:
    event: JsonObject = {
        "type": kind,
        "item_id": item,
        "output_index": output_index,
        "delta": text,
    }
    if content_index is not None:
        event["content_index"] = content_index
    return event


def _added(item: str, output_index: int, kind: str = "message") -> JsonObject:
    return {
        "type": "response.output_item.added",
        "output_index": output_index,
        "item": {"id": item, "type": kind, "status": "in_progress", "content": []},
    }


def _part_done(item: str, output_index: int, content_index: int) -> JsonObject:
    return {
        "type": "response.content_part.done",
        "item_id": item,
        "output_index": output_index,
        "content_index": content_index,
        "part": {"type": "output_text", "text": "", "annotations": []},
    }


TEXT = "response.output_text.delta"
REASONING = "response.reasoning_text.delta"
REFUSAL = "response.refusal.delta"

CASES: dict[str, list[JsonObject]] = {
    "one part": [_added("m1", 0), *[_delta(TEXT, "m1", 0, 0, f"t{i} ") for i in range(5)]],
    "two parts interleaved": [
        _added("m1", 0),
        _delta(TEXT, "m1", 0, 0, "a"),
        _delta(TEXT, "m1", 0, 1, "b"),
        _delta(TEXT, "m1", 0, 0, "c"),
        _delta(TEXT, "m1", 0, 1, "d"),
    ],
    "two items interleaved": [
        _added("r1", 0, "reasoning"),
        _added("m1", 1),
        _delta(REASONING, "r1", 0, 0, "think"),
        _delta(TEXT, "m1", 1, 0, "say"),
        _delta(REASONING, "r1", 0, 0, " more"),
        _delta(TEXT, "m1", 1, 0, " more"),
    ],
    "a delta after its part is done opens a new part": [
        _added("m1", 0),
        _delta(TEXT, "m1", 0, 0, "a"),
        _part_done("m1", 0, 0),
        _delta(TEXT, "m1", 0, 0, "b"),
        _delta(TEXT, "m1", 0, 0, "c"),
    ],
    "a delta after its item is done opens a new item": [
        _added("m1", 0),
        _delta(TEXT, "m1", 0, 0, "a"),
        {
            "type": "response.output_item.done",
            "output_index": 0,
            "item": {"id": "m1", "type": "message", "status": "completed", "content": []},
        },
        _delta(TEXT, "m1", 0, 0, "b"),
        _delta(TEXT, "m1", 0, 0, "c"),
    ],
    "no item announced, no content_index": [
        _delta(TEXT, "m1", 0, None, "a"),
        _delta(TEXT, "m1", 0, None, "b"),
        _delta(REFUSAL, "m1", 0, None, "no"),
        _delta(REFUSAL, "m1", 0, None, "pe"),
        _delta(TEXT, "m1", 0, None, "c"),
    ],
    "logprobs kept when sent": [
        _added("m1", 0),
        {**_delta(TEXT, "m1", 0, 0, "a"), "logprobs": [{"token": "a", "logprob": -0.1}]},
        {**_delta(TEXT, "m1", 0, 0, "b"), "logprobs": None},
        _delta(TEXT, "m1", 0, 0, "c"),
    ],
}


def _run(events: list[JsonObject], fast: bool) -> tuple[list[Any], list[JsonObject]]:
    accumulator = ResponseAccumulator()
    items = accumulator._handlers[TEXT].__self__  # type: ignore[attr-defined]
    out: list[Any] = []
    for event in events:
        if not fast:
            items._last_delta = None  # every delta takes the full look-up
        out.extend(accumulator.feed({**event}))
    out.extend(accumulator.finish())
    return out, accumulator.output


@pytest.mark.parametrize("name", list(CASES))
def test_the_fast_path_gives_what_the_full_look_up_gives(name: str) -> None:
    fast_events, fast_output = _run(CASES[name], fast=True)
    slow_events, slow_output = _run(CASES[name], fast=False)
    assert _without_ids(fast_events) == _without_ids(slow_events)
    assert _without_ids(fast_output) == _without_ids(slow_output)


def test_deltas_of_one_part_add_up() -> None:
    events, output = _run(CASES["one part"], fast=True)
    deltas = [event for event in events if event["type"] == TEXT]
    assert [event["content_index"] for event in deltas] == [0] * 5
    assert len({event["item_id"] for event in deltas}) == 1
    assert output[0]["content"][0]["text"] == "t0 t1 t2 t3 t4 "


def _without_ids(value: Any) -> Any:
    """Item ids are new UUIDs in each run: compared by their order of appearance."""
    seen: dict[str, str] = {}

    def walk(node: Any) -> Any:
        if isinstance(node, dict):
            return {
                key: (_rename(seen, val) if key in ("id", "item_id") else walk(val))
                for key, val in node.items()
            }
        if isinstance(node, list):
            return [walk(entry) for entry in node]
        return node

    return walk(value)


def _rename(seen: dict[str, str], value: Any) -> Any:
    if not isinstance(value, str):
        return value
    return seen.setdefault(value, f"id{len(seen)}")
