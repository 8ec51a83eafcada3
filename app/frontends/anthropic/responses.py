"""A final Responses ``Response`` -> Anthropic's ``Message``.

Output items become content blocks in order: ``reasoning`` -> ``thinking`` (the reasoning text,
else its summary; an encrypted reasoning is the ``signature``), a message's ``output_text`` and
``refusal`` parts -> ``text``, ``function_call`` -> ``tool_use`` (``id`` is the ``call_id``),
``mcp_call`` -> ``mcp_tool_use`` and ``mcp_tool_result``. Hosted tool calls the gateway ran
(web and file search) leave no block: their results are in the text that follows.
"""

from __future__ import annotations

from typing import Any

import orjson

from app.protocol.json_types import JsonObject


def message_id(response_id: str) -> str:
    """A Messages id for a response id (``resp_abc`` -> ``msg_abc``)."""
    return "msg_" + response_id.removeprefix("resp_")


def reasoning_text(item: JsonObject) -> str:
    parts = item.get("content") or item.get("summary") or []
    return "".join(str(p.get("text") or "") for p in parts if isinstance(p, dict))


def tool_input(arguments: Any) -> Any:
    """A call's arguments as the ``input`` object (``{}`` when they are not a JSON object)."""
    if isinstance(arguments, dict):
        return arguments
    try:
        value = orjson.loads(arguments or "{}")
    except orjson.JSONDecodeError:
        return {}
    return value if isinstance(value, dict) else {}


def content_blocks(item: JsonObject) -> list[JsonObject]:
    """The content blocks one output item becomes."""
    kind = item.get("type")
    if kind == "reasoning":
        signature = item.get("encrypted_content")
        return [
            {
                "type": "thinking",
                "thinking": reasoning_text(item),
                "signature": signature if isinstance(signature, str) else "",
            }
        ]
    if kind == "message":
        blocks = []
        for part in item.get("content") or []:
            if part.get("type") == "output_text":
                blocks.append({"type": "text", "text": part.get("text") or "", "citations": None})
            elif part.get("type") == "refusal":
                blocks.append(
                    {"type": "text", "text": part.get("refusal") or "", "citations": None}
                )
        return blocks
    if kind == "function_call":
        return [
            {
                "type": "tool_use",
                "id": item.get("call_id") or item.get("id"),
                "name": item.get("name"),
                "input": tool_input(item.get("arguments")),
            }
        ]
    if kind == "mcp_call":
        return mcp_blocks(item)
    return []


def mcp_blocks(item: JsonObject) -> list[JsonObject]:
    call_id = str(item.get("id"))
    error = item.get("error")
    result = error if error else item.get("output")
    return [
        {
            "type": "mcp_tool_use",
            "id": call_id,
            "name": item.get("name"),
            "server_name": item.get("server_label"),
            "input": tool_input(item.get("arguments")),
        },
        {
            "type": "mcp_tool_result",
            "tool_use_id": call_id,
            "is_error": bool(error),
            "content": [{"type": "text", "text": str(result or ""), "citations": None}],
        },
    ]


def stop_reason(response: JsonObject) -> str:
    """``tool_use`` when the model called a client tool, ``max_tokens`` when cut short."""
    output = response.get("output") or []
    if any(item.get("type") == "function_call" for item in output):
        return "tool_use"
    details = response.get("incomplete_details") or {}
    if response.get("status") == "incomplete" and details.get("reason") == "max_output_tokens":
        return "max_tokens"
    return "end_turn"


def stop_details(response: JsonObject, stop_sequences: tuple[str, ...]) -> tuple[str, str | None]:
    """The stop reason and sequence. An upstream does not say which stop sequence ended the
    text (the sequence is not in the output), so ``stop_sequence`` is reported only when the
    text ends with one the client named: otherwise a stop is ``end_turn``."""
    reason = stop_reason(response)
    if reason != "end_turn" or not stop_sequences:
        return reason, None
    text = "".join(
        part.get("text") or ""
        for item in response.get("output") or []
        if item.get("type") == "message"
        for part in item.get("content") or []
    )
    for sequence in stop_sequences:
        if sequence and text.endswith(sequence):
            return "stop_sequence", sequence
    return reason, None


def usage(response_usage: Any) -> JsonObject:
    """Responses usage -> Anthropic's (whose ``input_tokens`` excludes the cached ones)."""
    data = response_usage if isinstance(response_usage, dict) else {}
    details = data.get("input_tokens_details") or {}
    cached = int(details.get("cached_tokens") or 0)
    return {
        "input_tokens": max(int(data.get("input_tokens") or 0) - cached, 0),
        "output_tokens": int(data.get("output_tokens") or 0),
        "cache_creation_input_tokens": 0,
        "cache_read_input_tokens": cached,
    }


def to_message(
    response: JsonObject,
    model: str,
    stop_sequences: tuple[str, ...] = (),
    *,
    omit_thinking: bool = False,
) -> JsonObject:
    """The ``Message`` for a final response; ``model`` is the name the client asked for;
    ``omit_thinking``: thinking blocks without their text (``thinking.display: "omitted"``)."""
    content = [block for item in response.get("output") or [] for block in content_blocks(item)]
    if omit_thinking:
        content = [{**b, "thinking": ""} if b["type"] == "thinking" else b for b in content]
    reason, sequence = stop_details(response, stop_sequences)
    return {
        "id": message_id(str(response.get("id") or "")),
        "type": "message",
        "role": "assistant",
        "model": model,
        "content": content,
        "stop_reason": reason,
        "stop_sequence": sequence,
        "usage": usage(response.get("usage")),
    }
