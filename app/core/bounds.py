"""The size bound of a gateway tool call's result (``[limits] max_tool_result_bytes``).

A result over the bound is cut at that many UTF-8 bytes (on a character boundary) and ends with
a note saying so, both in what the model reads and in the item the client sees and the store
keeps: a 50 MB MCP result no longer goes whole upstream, into the stream and into the store.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from app.core.tools import ToolResult


def bound_result(result: ToolResult, limit: int | None) -> ToolResult:
    """``result`` with its model output and every long string of its item cut to ``limit``
    bytes (the same object when nothing is over)."""
    if limit is None:
        return result
    output = cut_text(result.model_output, limit)
    item = _bound(result.item, limit)
    if output is result.model_output and item is result.item:
        return result
    return replace(result, model_output=output, item=item)


def cut_text(text: str, limit: int) -> str:
    """``text`` itself when it has at most ``limit`` UTF-8 bytes; else its first ``limit``
    bytes and a note to the reader."""
    if len(text) <= limit // 4:  # no character takes more than 4 bytes
        return text
    encoded = text.encode("utf-8", "surrogatepass")
    if len(encoded) <= limit:
        return text
    kept = encoded[:limit].decode("utf-8", "ignore")
    return (
        f"{kept}\n\n[respgate: this tool result was {len(encoded)} bytes; only its first "
        f"{limit} bytes are shown (the gateway's limit on one tool result).]"
    )


# What the model sent (a call's arguments, a search's queries) is not the result: never cut.
_MODEL_INPUT = frozenset({"arguments", "action", "input", "queries"})


def _bound(value: Any, limit: int) -> Any:
    if isinstance(value, str):
        return cut_text(value, limit)
    if isinstance(value, dict):
        bounded = {
            key: item if key in _MODEL_INPUT else _bound(item, limit) for key, item in value.items()
        }
        changed = any(bounded[key] is not item for key, item in value.items())
        return bounded if changed else value
    if isinstance(value, list):
        items = [_bound(item, limit) for item in value]
        changed = any(new is not old for new, old in zip(items, value, strict=True))
        return items if changed else value
    return value
