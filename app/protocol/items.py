"""Output and input item shapes the gateway understands.

Items travel as plain JSON objects (so that unknown item types pass through untouched); these
TypedDicts give the known ones names for type checkers at no run-time cost on the hot path.
"""

from __future__ import annotations

from typing import Any, Literal, NotRequired, TypedDict


class OutputText(TypedDict):
    type: Literal["output_text"]
    text: str
    annotations: list[dict[str, Any]]
    logprobs: NotRequired[list[dict[str, Any]] | None]


class ReasoningText(TypedDict):
    type: Literal["reasoning_text"]
    text: str


class SummaryText(TypedDict):
    type: Literal["summary_text"]
    text: str


class MessageItem(TypedDict):
    type: Literal["message"]
    id: str
    role: Literal["assistant", "user", "system", "developer"]
    status: Literal["in_progress", "completed", "incomplete"]
    content: list[dict[str, Any]]


class FunctionCallItem(TypedDict):
    type: Literal["function_call"]
    id: str
    call_id: str
    name: str
    arguments: str
    status: Literal["in_progress", "completed", "incomplete"]


class ReasoningItem(TypedDict):
    type: Literal["reasoning"]
    id: str
    summary: list[SummaryText]
    content: NotRequired[list[ReasoningText] | None]
    encrypted_content: NotRequired[str | None]
    status: NotRequired[str]


# Prefix of generated ids, per item type (OpenAI's conventions).
ITEM_ID_PREFIXES: dict[str, str] = {
    "message": "msg",
    "function_call": "fc",
    "function_call_output": "fco",
    "reasoning": "rs",
    "mcp_call": "mcp",
    "mcp_list_tools": "mcpl",
    "mcp_approval_request": "mcpr",
    "web_search_call": "ws",
    "file_search_call": "fs",
}

# Item types whose content is a list of parts addressed by ``content_index``.
CONTENT_PART_ITEMS = frozenset({"message", "reasoning"})
