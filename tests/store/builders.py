"""Items, responses and ``NewResponse`` values for the store tests."""

from __future__ import annotations

from typing import Any

from app.core.ids import new_id
from app.core.ports import NewResponse
from app.protocol.json_types import JsonObject


def message(text: str, role: str = "user", item_id: str | None = None) -> JsonObject:
    kind = "output_text" if role == "assistant" else "input_text"
    return {
        "id": item_id or new_id("msg"),
        "type": "message",
        "role": role,
        "status": "completed",
        "content": [{"type": kind, "text": text}],
    }


def function_call(name: str = "get_weather") -> JsonObject:
    call_id = new_id("call")
    return {
        "id": new_id("fc"),
        "type": "function_call",
        "call_id": call_id,
        "name": name,
        "arguments": '{"city": "Paris"}',
        "status": "completed",
    }


def response(
    output: list[JsonObject],
    *,
    previous_response_id: str | None = None,
    conversation_id: str | None = None,
    status: str = "completed",
    response_id: str | None = None,
) -> JsonObject:
    body: dict[str, Any] = {
        "id": response_id or new_id("resp"),
        "object": "response",
        "created_at": 1_790_000_000,
        "status": status,
        "model": "gpt-test",
        "output": output,
        "previous_response_id": previous_response_id,
        "usage": {"input_tokens": 3, "output_tokens": 2, "total_tokens": 5},
    }
    if conversation_id is not None:
        body["conversation"] = {"id": conversation_id}
    return body


def turn(
    text: str = "hi",
    *,
    history_ids: list[str] | None = None,
    conversation_id: str | None = None,
    previous_response_id: str | None = None,
    inputs: list[JsonObject] | None = None,
    outputs: list[JsonObject] | None = None,
    stored_inputs: list[JsonObject] | None = None,
    response_id: str | None = None,
    root_id: str | None = None,
) -> NewResponse:
    """A new response: fresh ``inputs`` (default: one user message) plus ``stored_inputs``
    (already stored, referenced by id), and ``outputs`` (default: one assistant message)."""
    fresh = inputs if inputs is not None else [message(text)]
    referenced = stored_inputs or []
    produced = outputs if outputs is not None else [message(f"answer to {text}", "assistant")]
    return NewResponse(
        response=response(
            produced,
            previous_response_id=previous_response_id,
            conversation_id=conversation_id,
            response_id=response_id,
        ),
        history_ids=list(history_ids or []),
        input_item_ids=[item["id"] for item in [*referenced, *fresh]],
        new_items=[*fresh, *produced],
        conversation_id=conversation_id,
        root_id=root_id,
    )


def output_ids(new: NewResponse) -> list[str]:
    return [item["id"] for item in new.response["output"]]


def ids(items: list[JsonObject]) -> list[str]:
    return [item["id"] for item in items]
