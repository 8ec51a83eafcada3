"""What a request asks for, by content: how a replay matches a request to recorded turns.

Two requests ask the same thing when their bodies have the same prompt fields (``PROMPT_KEYS``:
``model``, ``instructions``, ``input``, ``messages``, ``prompt``) once normalized:
``input: "Hi"`` is the same as ``input: [{"role": "user", "content": "Hi"}]`` and as the typed
``{"type": "message", "role": "user", "content": [{"type": "input_text", "text": "Hi"}]}``,
and item ``id``s and ``status``es (which a gateway generates) are ignored. Everything else in
the body (``stream``, ``store``, sampling parameters, ...) does not take part.
:func:`first_difference` names where two bodies differ (strict replay).
"""

from __future__ import annotations

import json
from typing import Any

PROMPT_KEYS = ("model", "instructions", "input", "messages", "prompt")
_TEXT_PARTS = frozenset({"input_text", "output_text", "text"})
_GENERATED_KEYS = frozenset({"id", "status"})


def content_key(body: Any) -> str | None:
    """A canonical string of the body's prompt fields; ``None`` when it has none."""
    if not isinstance(body, dict):
        return None
    fields = {key: _normalize(key, body[key]) for key in PROMPT_KEYS if body.get(key) is not None}
    if not fields:
        return None
    return json.dumps(fields, sort_keys=True, ensure_ascii=False)


def _normalize(key: str, value: Any) -> Any:
    if key == "input":
        items = [{"role": "user", "content": value}] if isinstance(value, str) else value
        return [_normalize_item(item) for item in items] if isinstance(items, list) else items
    if key == "messages" and isinstance(value, list):
        return [_normalize_item(item) for item in value]
    return value


def _normalize_item(item: Any) -> Any:
    if not isinstance(item, dict):
        return item
    normal = {k: v for k, v in item.items() if k not in _GENERATED_KEYS}
    if "role" in normal and normal.get("type", "message") == "message":
        normal["type"] = "message"
        normal["content"] = _normalize_content(normal.get("content"))
    return normal


def _normalize_content(content: Any) -> Any:
    if isinstance(content, str):
        return [{"text": content}]
    if not isinstance(content, list):
        return content
    parts: list[Any] = []
    for part in content:
        if isinstance(part, dict) and part.get("type") in _TEXT_PARTS:
            parts.append({"text": part.get("text")})
        else:
            parts.append(part)
    return parts


def describe_request(body: Any, limit: int = 160) -> str:
    """A short human description of what a request asks: its model and last prompt text."""
    if not isinstance(body, dict):
        return "a request without a JSON body"
    described = []
    if isinstance(body.get("model"), str):
        described.append(f"model {body['model']!r}")
    prompt = _last_prompt_text(body)
    if prompt is not None:
        text = prompt if len(prompt) <= limit else prompt[: limit - 3] + "..."
        described.append(f"input {text!r}")
    return ", ".join(described) or "a request without model or input"


def _last_prompt_text(body: dict[str, Any]) -> str | None:
    value = body.get("input", body.get("messages", body.get("prompt")))
    if isinstance(value, str):
        return value
    if not isinstance(value, list) or not value:
        return None
    for item in reversed(value):
        text = _item_text(item)
        if text is not None:
            return text
    return json.dumps(value[-1], ensure_ascii=False)


def _item_text(item: Any) -> str | None:
    if not isinstance(item, dict) or item.get("role") not in ("user", "system", "developer"):
        return None
    content = item.get("content")
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        texts = [p.get("text") for p in content if isinstance(p, dict) and p.get("text")]
        return " ".join(str(t) for t in texts) if texts else None
    return None


def first_difference(recorded: Any, received: Any, path: str = "") -> str | None:
    """Describe the first place where two JSON values differ, or ``None`` if equal."""
    if isinstance(recorded, dict) and isinstance(received, dict):
        for key in sorted(set(recorded) | set(received), key=str):
            sub = f"{path}.{key}" if path else str(key)
            if key not in received:
                return f"'{sub}' is missing (recorded {_short(recorded[key])})"
            if key not in recorded:
                return f"'{sub}' was not recorded (received {_short(received[key])})"
            diff = first_difference(recorded[key], received[key], sub)
            if diff is not None:
                return diff
        return None
    if isinstance(recorded, list) and isinstance(received, list):
        for i, (a, b) in enumerate(zip(recorded, received, strict=False)):
            diff = first_difference(a, b, f"{path}[{i}]")
            if diff is not None:
                return diff
        if len(recorded) != len(received):
            where = path or "body"
            return f"'{where}' has {len(received)} items, recorded {len(recorded)}"
        return None
    if isinstance(recorded, bool) == isinstance(received, bool) and recorded == received:
        return None
    where = path or "body"
    return f"'{where}' differs: recorded {_short(recorded)}, received {_short(received)}"


def _short(value: Any, limit: int = 120) -> str:
    text = json.dumps(value, ensure_ascii=False)
    return text if len(text) <= limit else text[: limit - 3] + "..."
