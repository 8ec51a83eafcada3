"""Serve a recorded Responses answer in the other form: SSE -> JSON and JSON -> SSE.

A replayed cassette may hold only the streamed or only the JSON answer to a request. The JSON
form of a stream is the ``response`` of its terminal event (``response.completed``,
``.incomplete``, ``.failed`` or ``.done``); the stream form of a JSON Response is the event
sequence a Responses server sends for it: ``response.created``, ``response.in_progress``, then
per output item ``output_item.added``, its parts' ``*.added`` / ``*.delta`` / ``*.done`` events
and ``output_item.done``, and one terminal event, numbered by ``sequence_number`` from 0.
"""

from __future__ import annotations

import json
from typing import Any

from app.core.jsoncopy import clone
from app.core.stream import ResponseLifecycle
from app.protocol import events as ev
from app.protocol.json_types import JsonObject
from app.recording.cassette import (
    JSON_CONTENT_TYPE,
    SSE_CONTENT_TYPE,
    RecordedResponse,
    sse_data_events,
)


def final_response(recorded: RecordedResponse) -> JsonObject | None:
    """The Response of an SSE answer's last terminal event, or ``None`` when it has none."""
    for event in reversed(sse_data_events(recorded)):
        response = event.get("response")
        if event.get("type") in ev.TERMINAL_EVENTS and isinstance(response, dict):
            return response
    return None


def is_response_object(body: Any) -> bool:
    """Whether a JSON body is a Response (what ``POST /v1/responses`` answers)."""
    return isinstance(body, dict) and isinstance(body.get("output"), list)


def as_json(recorded: RecordedResponse) -> RecordedResponse | None:
    """The JSON form of a successful SSE answer, or ``None`` when it cannot be converted."""
    if recorded.sse is None or recorded.status_code != 200:
        return None
    response = final_response(recorded)
    if response is None:
        return None
    return RecordedResponse(
        status_code=200, headers={"content-type": JSON_CONTENT_TYPE}, body=response
    )


def as_sse(recorded: RecordedResponse) -> RecordedResponse | None:
    """The SSE form of a successful JSON Response, or ``None`` when it cannot be converted."""
    if recorded.sse is not None or recorded.status_code != 200:
        return None
    body = recorded.body
    if not isinstance(body, dict) or not is_response_object(body):
        return None
    lines: list[str] = []
    for event in response_events(body):
        lines += [f"event: {event['type']}\n", f"data: {json.dumps(event)}\n", "\n"]
    return RecordedResponse(status_code=200, headers={"content-type": SSE_CONTENT_TYPE}, sse=lines)


def response_events(response: JsonObject) -> list[JsonObject]:
    """The standard event sequence that streams ``response``."""
    lifecycle = ResponseLifecycle()
    opening = clone(response)
    opening.update(status="in_progress", output=[], usage=None)
    events = lifecycle.opening(opening)
    for index, item in enumerate(response.get("output") or []):
        if isinstance(item, dict):
            events += [lifecycle.stamp(event) for event in item_events(item, index)]
    events.append(lifecycle.closing(clone(response)))
    return events


def item_events(item: JsonObject, output_index: int) -> list[JsonObject]:
    """``output_item.added``, the events that fill the item in, ``output_item.done``."""
    kind = item.get("type")
    where = {"item_id": item.get("id"), "output_index": output_index}
    if kind == "message":
        body = _message_events(item, where)
        empty: JsonObject = {"content": []}
    elif kind == "function_call":
        body = _arguments_events(item, where)
        empty = {"arguments": ""}
    elif kind == "reasoning":
        body = _reasoning_events(item, where)
        empty = {"content": [], "summary": []}
    else:
        body, empty = [], {}
    added = {**clone(item), **empty}
    if "status" in item:
        added["status"] = "in_progress"
    return [
        {"type": ev.OUTPUT_ITEM_ADDED, "output_index": output_index, "item": added},
        *body,
        {"type": ev.OUTPUT_ITEM_DONE, "output_index": output_index, "item": clone(item)},
    ]


def _message_events(item: JsonObject, where: JsonObject) -> list[JsonObject]:
    events: list[JsonObject] = []
    for content_index, part in enumerate(item.get("content") or []):
        if not isinstance(part, dict):
            continue
        at = {**where, "content_index": content_index}
        kind = part.get("type")
        empty = {**clone(part), "text": ""} if kind == "output_text" else clone(part)
        if kind == "refusal":
            empty["refusal"] = ""
        events.append({"type": ev.CONTENT_PART_ADDED, **at, "part": empty})
        if kind == "output_text":
            text = str(part.get("text") or "")
            events.append({"type": ev.OUTPUT_TEXT_DELTA, **at, "delta": text, "logprobs": []})
            events.append({"type": ev.OUTPUT_TEXT_DONE, **at, "text": text, "logprobs": []})
        elif kind == "refusal":
            refusal = str(part.get("refusal") or "")
            events.append({"type": ev.REFUSAL_DELTA, **at, "delta": refusal})
            events.append({"type": ev.REFUSAL_DONE, **at, "refusal": refusal})
        events.append({"type": ev.CONTENT_PART_DONE, **at, "part": clone(part)})
    return events


def _arguments_events(item: JsonObject, where: JsonObject) -> list[JsonObject]:
    arguments = str(item.get("arguments") or "")
    return [
        {"type": ev.FUNCTION_CALL_ARGUMENTS_DELTA, **where, "delta": arguments},
        {"type": ev.FUNCTION_CALL_ARGUMENTS_DONE, **where, "arguments": arguments},
    ]


def _reasoning_events(item: JsonObject, where: JsonObject) -> list[JsonObject]:
    events: list[JsonObject] = []
    for summary_index, part in enumerate(item.get("summary") or []):
        if not isinstance(part, dict):
            continue
        at = {**where, "summary_index": summary_index}
        text = str(part.get("text") or "")
        empty = {**clone(part), "text": ""}
        events += [
            {"type": ev.REASONING_SUMMARY_PART_ADDED, **at, "part": empty},
            {"type": ev.REASONING_SUMMARY_TEXT_DELTA, **at, "delta": text},
            {"type": ev.REASONING_SUMMARY_TEXT_DONE, **at, "text": text},
            {"type": ev.REASONING_SUMMARY_PART_DONE, **at, "part": clone(part)},
        ]
    for content_index, part in enumerate(item.get("content") or []):
        if isinstance(part, dict) and part.get("type") == "reasoning_text":
            at = {**where, "content_index": content_index}
            text = str(part.get("text") or "")
            events += [
                {"type": ev.REASONING_TEXT_DELTA, **at, "delta": text},
                {"type": ev.REASONING_TEXT_DONE, **at, "text": text},
            ]
    return events
