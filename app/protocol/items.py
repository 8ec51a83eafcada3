"""Output and input item shapes the gateway understands.

Items travel as plain JSON objects (so that unknown item types pass through untouched); these
TypedDicts give the known ones names for type checkers at no run-time cost on the hot path, one
class per ``type`` (after openai-python's ``types/responses``). ``AnyItem`` is their union plus
``JsonObject``, the open fallback every other item (``mcp_call``, a vendor's own …) travels as.
"""

from __future__ import annotations

from typing import Literal, NotRequired, TypedDict, TypeGuard

from app.protocol.json_types import JsonObject

ItemStatus = Literal["in_progress", "completed", "incomplete"]


class OutputText(TypedDict):
    type: Literal["output_text"]
    text: str
    annotations: list[JsonObject]
    logprobs: NotRequired[list[JsonObject] | None]


class Refusal(TypedDict):
    type: Literal["refusal"]
    refusal: str


class ReasoningText(TypedDict):
    type: Literal["reasoning_text"]
    text: str


class SummaryText(TypedDict):
    type: Literal["summary_text"]
    text: str


# A part of a message's or a reasoning item's ``content``, known or carried through.
ContentPart = OutputText | Refusal | ReasoningText | JsonObject


class MessageItem(TypedDict):
    type: Literal["message"]
    id: str
    role: Literal["assistant", "user", "system", "developer"]
    status: ItemStatus
    content: list[ContentPart]


class FunctionCallItem(TypedDict):
    type: Literal["function_call"]
    id: str
    call_id: str
    name: str
    arguments: str
    status: ItemStatus


class FunctionCallOutputItem(TypedDict):
    type: Literal["function_call_output"]
    id: NotRequired[str]
    call_id: str
    output: str | list[JsonObject]
    status: NotRequired[ItemStatus]


class ReasoningItem(TypedDict):
    type: Literal["reasoning"]
    id: str
    summary: list[SummaryText]
    content: NotRequired[list[ContentPart] | None]
    encrypted_content: NotRequired[str | None]
    status: NotRequired[ItemStatus]


# The items the gateway builds itself.
KnownItem = MessageItem | FunctionCallItem | FunctionCallOutputItem | ReasoningItem
# Any item of an output or an input: a known shape, or one carried through as it came.
AnyItem = KnownItem | JsonObject


# Narrowing by ``type``: the items and parts the kernel builds and closes have their type's
# fields (an upstream's raw items are not checked here).


def is_function_call(item: AnyItem) -> TypeGuard[FunctionCallItem]:
    return item.get("type") == "function_call"


def is_output_text(part: ContentPart) -> TypeGuard[OutputText]:
    return part.get("type") == "output_text"


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
