"""Checks of the stream contract every client stream must keep (DESIGN.md, "One lifecycle")."""

from __future__ import annotations

import json
from typing import Any

TERMINAL = {"response.completed", "response.incomplete", "response.failed"}


def assert_lifecycle(events: list[dict[str, Any]]) -> dict[str, Any]:
    """Assert the contract; return the terminal event's response."""
    assert events, "no events"
    types = [e["type"] for e in events]
    assert types[0] == "response.created", types[:3]
    assert types[1] == "response.in_progress", types[:3]
    assert types.count("response.created") == 1
    assert [e["sequence_number"] for e in events] == list(range(len(events)))
    terminals = [i for i, t in enumerate(types) if t in TERMINAL]
    assert len(terminals) == 1, [types[i] for i in terminals]
    assert terminals[0] == len(events) - 1, "terminal event is not last"
    response_id = events[0]["response"]["id"]
    assert events[-1]["response"]["id"] == response_id
    opened: dict[int, dict[str, Any]] = {}
    closed: dict[int, dict[str, Any]] = {}
    parts: dict[int, list[str]] = {}
    for event in events:
        kind = event["type"]
        index = event.get("output_index")
        if kind == "response.output_item.added":
            assert index == len(opened), f"output_index {index} out of order"
            opened[index] = event["item"]
            parts[index] = []
        elif kind == "response.output_item.done":
            assert index in opened and index not in closed, f"done for {index} without added"
            closed[index] = event["item"]
            assert event["item"].get("id") == opened[index].get("id"), "item id changed"
        elif isinstance(index, int) and kind.startswith("response."):
            if kind in ("response.error",):
                continue
            assert index in opened and index not in closed, f"{kind} outside its item {index}"
            if "item_id" in event and opened[index].get("id") is not None:
                assert event["item_id"] == opened[index]["id"], (kind, event["item_id"])
            if kind == "response.content_part.added":
                assert event["content_index"] == len(parts[index]), "content_index not a position"
                parts[index].append(event["part"]["type"])
            elif "content_index" in event:
                assert event["content_index"] < len(parts[index]), f"{kind} before its part"
    assert set(opened) == set(closed), "items left open"
    final = events[-1]["response"]
    assert [item.get("id") for item in final["output"]] == [
        closed[i].get("id") for i in sorted(closed)
    ]
    json.dumps(final)
    return dict(final)


def project(items: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The content of output items, without ids, statuses and formatting of JSON arguments."""
    out: list[dict[str, Any]] = []
    for item in items:
        kind = item.get("type")
        view: dict[str, Any] = {"type": kind}
        if kind == "message":
            view["role"] = item.get("role")
            view["content"] = [
                (part.get("type"), part.get("text") or part.get("refusal") or "")
                for part in item.get("content") or []
            ]
        elif kind == "function_call":
            view["name"] = item.get("name")
            try:
                view["arguments"] = json.loads(item.get("arguments") or "null")
            except ValueError:
                view["arguments"] = item.get("arguments")
        elif kind == "reasoning":
            view["content"] = [part.get("text") for part in item.get("content") or []]
            view["summary"] = [part.get("text") for part in item.get("summary") or []]
        else:
            view.update({k: v for k, v in item.items() if k not in ("id", "status")})
        out.append(view)
    return out
