"""Output and input item shapes the gateway understands.

Items travel as plain JSON objects (so that unknown item types pass through untouched); these
TypedDicts give the known ones names for type checkers at no run-time cost on the hot path, one
class per ``type`` (after openai-python's ``types/responses``). ``AnyItem`` is their union plus
``JsonObject``, the open fallback every other item (``mcp_call``, a vendor's own …) travels as.
The item types the gateway knows are the core ones and those its tool kinds register
(``register_item_kinds``), so that the protocol names no tool.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
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


class CompactionItem(TypedDict):
    """What ``POST /v1/responses/compact`` returns last, and a client sends back as input:
    ``encrypted_content`` is opaque to the client (``core.compaction`` writes and reads it)."""

    type: Literal["compaction"]
    id: str
    encrypted_content: str
    created_by: NotRequired[str | None]


# The items the gateway builds itself.
# (``CompactionItem`` is built by ``core.compact`` only and travels as a ``JsonObject``.)
KnownItem = MessageItem | FunctionCallItem | FunctionCallOutputItem | ReasoningItem
# Any item of an output or an input: a known shape, or one carried through as it came.
AnyItem = KnownItem | JsonObject


# Narrowing by ``type``: the items and parts the kernel builds and closes have their type's
# fields (an upstream's raw items are not checked here).


def is_function_call(item: AnyItem) -> TypeGuard[FunctionCallItem]:
    return item.get("type") == "function_call"


def is_output_text(part: ContentPart) -> TypeGuard[OutputText]:
    return part.get("type") == "output_text"


# Prefix of generated ids, per item type (OpenAI's conventions): the core item types here, the
# tool kinds' when the app is wired (``register_item_kinds``). A type in this table is one the
# gateway knows: it names such items itself and fills what a strict client validates on them.
ITEM_ID_PREFIXES: dict[str, str] = {
    "message": "msg",
    "function_call": "fc",
    "function_call_output": "fco",
    "reasoning": "rs",
    "compaction": "cmp",
}
_CORE_ITEM_TYPES = frozenset(ITEM_ID_PREFIXES)

# Per item type of a tool kind: what fills the fields a strict client validates, in place.
ITEM_FILLERS: dict[str, Callable[[JsonObject], None]] = {}


@dataclass(frozen=True, slots=True)
class ItemKind:
    """An item type a tool kind owns (``core.tools.ToolKindSpec``).

    ``id_prefix``: the gateway names such items itself, ``{id_prefix}_…`` (``None``: they are
    not a type the gateway knows, and keep the ids they come with); ``fill``: fills what a
    strict client validates on such an item, in place (``None``: nothing to fill).
    """

    type: str
    id_prefix: str | None = None
    fill: Callable[[JsonObject], None] | None = None


def register_item_kinds(kinds: Iterable[ItemKind]) -> None:
    """Make the tool kinds' item types known (``app.main`` calls it when it wires the toolkit).

    Registering a kind again is harmless; giving a known type another id prefix or filler, or
    redefining a core type, is a ``ValueError``.
    """
    for kind in kinds:
        if kind.id_prefix is None:
            continue
        known = ITEM_ID_PREFIXES.get(kind.type)
        filler = ITEM_FILLERS.get(kind.type)
        if kind.type in _CORE_ITEM_TYPES or (
            known is not None and (known != kind.id_prefix or filler is not kind.fill)
        ):
            raise ValueError(f"the item type {kind.type!r} is already registered")
        ITEM_ID_PREFIXES[kind.type] = kind.id_prefix
        if kind.fill is not None:
            ITEM_FILLERS[kind.type] = kind.fill


def fill_item(item: JsonObject) -> None:
    """Run the fill of ``item``'s type, if its tool kind registered one."""
    kind = item.get("type")
    fill = ITEM_FILLERS.get(kind) if isinstance(kind, str) else None
    if fill is not None:
        fill(item)


# Item types whose content is a list of parts addressed by ``content_index``.
CONTENT_PART_ITEMS = frozenset({"message", "reasoning"})
