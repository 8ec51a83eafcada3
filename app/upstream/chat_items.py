"""Output items, status and usage of a chat completion in the Responses API's shapes.

Shared by the non-streaming (``chat_response``) and streaming (``chat_stream``) translations,
so that both build identical items from the same chat answer.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

import orjson

from app.protocol.items import (
    AnyItem,
    ContentPart,
    FunctionCallItem,
    ItemStatus,
    MessageItem,
    OutputText,
    ReasoningItem,
    ReasoningText,
    Refusal,
)
from app.protocol.json_types import JsonObject

# finish_reason -> incomplete_details; anything else (stop, tool_calls ...) completes.
_INCOMPLETE: dict[str, JsonObject] = {
    "length": {"reason": "max_output_tokens"},
    "content_filter": {"reason": "content_filter"},
}


@dataclass(slots=True)
class ResponseHead:
    """Who a translated Response object is: its id, creation time and model."""

    response_id: str
    created_at: int
    model: Any


def response_object(
    head: ResponseHead,
    status: str,
    output: list[AnyItem],
    usage: JsonObject | None,
    incomplete_details: JsonObject | None,
) -> JsonObject:
    return {
        "id": head.response_id,
        "object": "response",
        "created_at": head.created_at,
        "status": status,
        "model": head.model,
        "output": output,
        "usage": usage,
        "incomplete_details": incomplete_details,
        "error": None,
    }


def status_of(finish_reason: Any) -> tuple[Literal["completed", "incomplete"], JsonObject | None]:
    details = _INCOMPLETE.get(finish_reason) if isinstance(finish_reason, str) else None
    if details is None:
        return "completed", None
    return "incomplete", dict(details)


def mark_incomplete(output: list[AnyItem], status: str) -> None:
    """A cut-off answer: the message the cut hit (the last item) is incomplete."""
    if status == "incomplete" and output and output[-1].get("type") == "message":
        output[-1]["status"] = "incomplete"


def usage_of(usage: Any) -> JsonObject | None:
    if not isinstance(usage, dict):
        return None
    input_tokens = as_int(usage.get("prompt_tokens"))
    output_tokens = as_int(usage.get("completion_tokens"))
    total = usage.get("total_tokens")
    prompt_details = usage.get("prompt_tokens_details")
    completion_details = usage.get("completion_tokens_details")
    cached = prompt_details.get("cached_tokens") if isinstance(prompt_details, dict) else None
    thought = (
        completion_details.get("reasoning_tokens") if isinstance(completion_details, dict) else None
    )
    return {
        "input_tokens": input_tokens,
        "input_tokens_details": {"cached_tokens": as_int(cached)},
        "output_tokens": output_tokens,
        "output_tokens_details": {"reasoning_tokens": as_int(thought)},
        "total_tokens": as_int(total) if total is not None else input_tokens + output_tokens,
    }


def error_of(chunk: JsonObject) -> JsonObject | None:
    """The error a chat body or chunk carries: ``{"error": {...}}``, ``{"error": "text"}`` or
    vLLM's flat ``{"object": "error", "message": ...}``; None for a normal body."""
    error = chunk.get("error")
    if isinstance(error, dict):
        return error
    if isinstance(error, str) and error:
        return {"message": error}
    if chunk.get("object") == "error":
        return chunk
    return None


def reasoning_of(message: JsonObject) -> str:
    """``reasoning_content`` (DeepSeek, llama.cpp, older vLLM) or ``reasoning`` (newer vLLM,
    Ollama): never both, some servers send the same text twice."""
    text = message.get("reasoning_content")
    if isinstance(text, str) and text:
        return text
    text = message.get("reasoning")
    return text if isinstance(text, str) else ""


def text_of(content: Any) -> str:
    """Chat message content (a string, or a list of text parts) as text."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(
            part["text"]
            for part in content
            if isinstance(part, dict) and isinstance(part.get("text"), str)
        )
    return ""


def output_text_part(text: str) -> OutputText:
    return {"type": "output_text", "text": text, "annotations": [], "logprobs": []}


def refusal_part(refusal: str) -> Refusal:
    return {"type": "refusal", "refusal": refusal}


def reasoning_text_part(text: str) -> ReasoningText:
    return {"type": "reasoning_text", "text": text}


def reasoning_item(item_id: str, parts: list[ContentPart], status: ItemStatus) -> ReasoningItem:
    return {
        "id": item_id,
        "type": "reasoning",
        "summary": [],
        "content": parts,
        "status": status,
    }


def message_item(item_id: str, parts: list[ContentPart], status: ItemStatus) -> MessageItem:
    return {
        "id": item_id,
        "type": "message",
        "role": "assistant",
        "status": status,
        "content": parts,
    }


def function_call_item(
    item_id: str, call_id: str, name: str, arguments: str, status: ItemStatus
) -> FunctionCallItem:
    return {
        "id": item_id,
        "type": "function_call",
        "call_id": call_id,
        "name": name,
        "arguments": arguments,
        "status": status,
    }


def as_int(value: Any) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


def arguments_text(arguments: Any) -> str:
    """Function-call arguments as the JSON string OpenAI's API carries (Ollama sends objects)."""
    if isinstance(arguments, str):
        return arguments or "{}"
    if arguments is None:
        return "{}"
    return orjson.dumps(arguments).decode()
