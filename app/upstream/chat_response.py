"""chat.completion -> Responses ``Response`` object (pure, no I/O).

The streaming translation (``chat.completion.chunk`` -> Responses stream events) lives in
``app.upstream.chat_stream`` and is re-exported here; both build their items, status and usage
with ``app.upstream.chat_items``, so a streamed answer folds to what the non-streaming one is.
"""

from __future__ import annotations

import time
from typing import Any

import orjson

from app.core.ids import new_id
from app.errors import UpstreamHTTPError, UpstreamProtocolError
from app.net.http import error_envelope
from app.protocol.items import AnyItem, ContentPart, FunctionCallItem
from app.protocol.json_types import JsonObject
from app.upstream.chat_items import (
    ResponseHead,
    arguments_text,
    error_of,
    function_call_item,
    mark_incomplete,
    message_item,
    output_text_part,
    reasoning_item,
    reasoning_of,
    reasoning_text_part,
    refusal_part,
    response_object,
    status_of,
    text_of,
    usage_of,
)
from app.upstream.chat_stream import ChatStreamTranslator

__all__ = ["ChatStreamTranslator", "to_response"]


def to_response(completion: JsonObject, request: JsonObject) -> JsonObject:
    """The Responses object for a non-streaming chat completion; ``request`` is the Responses
    body that was sent. A ``{"error": ...}`` body (some servers answer errors with HTTP 200)
    raises ``UpstreamHTTPError`` (502)."""
    if error_of(completion) is not None:
        raise UpstreamHTTPError(502, error_envelope(502, orjson.dumps(completion)))
    choices = completion.get("choices")
    choice = _first_choice(choices)
    if choice is None:
        raise UpstreamProtocolError("the upstream's chat completion has no choices")
    message = choice.get("message")
    message = message if isinstance(message, dict) else {}

    output: list[AnyItem] = []
    reasoning = reasoning_of(message)
    if reasoning:
        output.append(reasoning_item(new_id("rs"), [reasoning_text_part(reasoning)], "completed"))
    parts: list[ContentPart] = []
    text = text_of(message.get("content"))
    if text:
        parts.append(output_text_part(text))
    refusal = message.get("refusal")
    if isinstance(refusal, str) and refusal:
        parts.append(refusal_part(refusal))
    if parts:
        output.append(message_item(new_id("msg"), parts, "completed"))
    calls = message.get("tool_calls")
    for call in calls if isinstance(calls, list) else []:
        if isinstance(call, dict):
            output.append(_function_call(call))
    legacy = message.get("function_call")
    if isinstance(legacy, dict) and not calls:
        output.append(_function_call({"function": legacy}))

    status, incomplete = status_of(choice.get("finish_reason"))
    mark_incomplete(output, status)
    created = completion.get("created")
    head = ResponseHead(
        response_id=new_id("resp"),
        created_at=created if isinstance(created, int) else int(time.time()),
        model=completion.get("model") or request.get("model"),
    )
    return response_object(head, status, output, usage_of(completion.get("usage")), incomplete)


def _function_call(call: JsonObject) -> FunctionCallItem:
    function = call.get("function")
    function = function if isinstance(function, dict) else {}
    call_id = call.get("id")
    name = function.get("name")
    return function_call_item(
        new_id("fc"),
        call_id if isinstance(call_id, str) and call_id else new_id("call"),
        name if isinstance(name, str) else "",
        arguments_text(function.get("arguments")),
        "completed",
    )


def _first_choice(choices: Any) -> JsonObject | None:
    if not isinstance(choices, list):
        return None
    dicts = [c for c in choices if isinstance(c, dict)]
    for choice in dicts:
        if choice.get("index") in (0, None):
            return choice
    return dicts[0] if dicts else None
