"""The Responses stream events the chat translation emits, built as ``protocol.events`` types.

``text_delta_event`` and ``text_done_event`` are a streamed part's events by part type
(``output_text``, ``refusal``, ``reasoning_text``); ``as_json`` hands a list of them to the
upstream port, which carries events as JSON objects.
"""

from __future__ import annotations

from typing import cast

from app.protocol import events as ev
from app.protocol.events import (
    OutputTextDeltaEvent,
    OutputTextDoneEvent,
    PartAddress,
    ReasoningTextDeltaEvent,
    ReasoningTextDoneEvent,
    RefusalDeltaEvent,
    RefusalDoneEvent,
    StreamEvent,
)
from app.protocol.items import ContentPart
from app.protocol.json_types import JsonObject
from app.upstream.chat_items import output_text_part, reasoning_text_part, refusal_part


def part_of(kind: str, value: str) -> ContentPart:
    if kind == "output_text":
        return output_text_part(value)
    if kind == "refusal":
        return refusal_part(value)
    return reasoning_text_part(value)


def text_delta_event(kind: str, address: PartAddress, delta: str) -> StreamEvent:
    if kind == "output_text":
        text: OutputTextDeltaEvent = {
            "type": ev.OUTPUT_TEXT_DELTA,
            **address,
            "delta": delta,
            "logprobs": [],
        }
        return text
    if kind == "refusal":
        refusal: RefusalDeltaEvent = {"type": ev.REFUSAL_DELTA, **address, "delta": delta}
        return refusal
    reasoning: ReasoningTextDeltaEvent = {
        "type": ev.REASONING_TEXT_DELTA,
        **address,
        "delta": delta,
    }
    return reasoning


def text_done_event(kind: str, address: PartAddress, value: str) -> StreamEvent:
    if kind == "output_text":
        text: OutputTextDoneEvent = {
            "type": ev.OUTPUT_TEXT_DONE,
            **address,
            "text": value,
            "logprobs": [],
        }
        return text
    if kind == "refusal":
        refusal: RefusalDoneEvent = {"type": ev.REFUSAL_DONE, **address, "refusal": value}
        return refusal
    reasoning: ReasoningTextDoneEvent = {"type": ev.REASONING_TEXT_DONE, **address, "text": value}
    return reasoning


def as_json(events: list[StreamEvent]) -> list[JsonObject]:
    """The events as the upstream port carries them: JSON objects (which they are at run time)."""
    return cast(list[JsonObject], events)
