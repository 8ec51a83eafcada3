"""Rehydration: the stored history a request continues from, plus its new input.

``rehydrate`` reads a parent's checkpoint (``previous_response_id``) or a conversation's items
with one bulk read, checks that the continuation is valid (every pending client function call
has an output), and returns what the upstream must see and what a stored response records.
Every read is the caller's tenant's (``core.tenancy``): another tenant's response, conversation
or ``item_reference`` is not found, as an unknown id is.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from app.core.ids import new_id
from app.core.jsoncopy import clone
from app.core.ports import ResponseStore
from app.errors import InvalidRequestError, NotFoundError
from app.protocol.items import ITEM_ID_PREFIXES
from app.protocol.json_types import JsonObject
from app.protocol.requests import ConversationRef, CreateResponseRequest

_TEXT_PART = {"assistant": "output_text"}  # every other role writes input_text


@dataclass(slots=True)
class History:
    """What a request continues from, and its own input."""

    history_ids: list[str] = field(default_factory=list)
    history_items: list[JsonObject] = field(default_factory=list)
    # The request's input as stored (ids assigned, OpenAI's canonical shapes).
    input_items: list[JsonObject] = field(default_factory=list)
    # Items among ``input_items`` that are not stored yet.
    new_input_items: list[JsonObject] = field(default_factory=list)
    conversation_id: str | None = None
    # The first response of the ``previous_response_id`` chain the request continues (None:
    # no parent); saved as the new response's ``root_id``.
    root_id: str | None = None

    @property
    def session_id(self) -> str | None:
        """The tool engine session of the request: its conversation's id, else its chain's
        root response id; None for a fresh request (its own response id then)."""
        return self.conversation_id if self.conversation_id is not None else self.root_id

    @property
    def stateful(self) -> bool:
        return bool(self.history_ids) or self.conversation_id is not None

    def upstream_input(self) -> list[JsonObject]:
        """History then the new input, as the upstream receives them."""
        return [*self.history_items, *self.input_items]


def conversation_id_of(request: CreateResponseRequest) -> str | None:
    conversation = request.conversation
    if isinstance(conversation, ConversationRef):
        return conversation.id
    return conversation


def canonical_item(item: JsonObject) -> JsonObject:
    """An input item in the shape OpenAI stores and lists it (``type``, ``id``, parts)."""
    out = clone(item)
    kind = out.get("type")
    if kind is None and "role" in out:
        kind = out["type"] = "message"
    if kind == "message":
        content = out.get("content")
        part_type = _TEXT_PART.get(str(out.get("role")), "input_text")
        if isinstance(content, str):
            part: JsonObject = {"type": part_type, "text": content}
            if part_type == "output_text":
                part["annotations"] = []
            out["content"] = [part]
        out.setdefault("status", "completed")
    elif kind in ("function_call", "function_call_output") or (
        isinstance(kind, str) and kind.endswith("_call_output")
    ):
        out.setdefault("status", "completed")
    return out


def id_prefix(item: JsonObject) -> str:
    kind = item.get("type")
    return ITEM_ID_PREFIXES.get(kind, "item") if isinstance(kind, str) else "item"


def check_item_id(item: JsonObject, param: str) -> None:
    """A client-chosen id must carry its type's prefix, as OpenAI requires."""
    item_id = item.get("id")
    if item_id is None:
        return
    prefix = id_prefix(item)
    if not isinstance(item_id, str) or (prefix != "item" and not item_id.startswith(prefix)):
        raise InvalidRequestError(
            f"Invalid '{param}.id': '{item_id}'. Expected an ID that begins with '{prefix}'.",
            param=f"{param}.id",
            code="invalid_value",
        )


async def resolve_items(
    store: ResponseStore,
    raw_items: list[JsonObject],
    param: str,
    *,
    keep_ids: bool,
    tenant: str,
) -> tuple[list[JsonObject], list[JsonObject]]:
    """Input items with ids: ``tenant``'s stored ones (and ``item_reference``s) are read back,
    new ones get ids. Returns ``(items, new_items)``.

    With ``keep_ids`` (the Conversations API) a new item keeps the id its client chose, which
    must carry its type's prefix. Without (``input`` of a response) an id the store does not
    know gets replaced in the stored copy: clients replaying history carry the upstream's
    item ids (``recorded_2``, vLLM's ``msg_…`` on a reasoning item), which are neither
    well-formed nor unique.
    """
    canonical = [canonical_item(item) for item in raw_items]
    wanted = [
        item["id"] for item in canonical if isinstance(item.get("id"), str) and item.get("id")
    ]
    # One read: ``load_items`` skips the ids the store does not know.
    stored = (
        {item["id"]: item for item in await store.load_items(wanted, tenant=tenant)}
        if wanted
        else {}
    )
    items: list[JsonObject] = []
    new_items: list[JsonObject] = []
    for index, item in enumerate(canonical):
        item_id = item.get("id")
        if isinstance(item_id, str) and item_id in stored:
            items.append(stored[item_id])
            continue
        if item.get("type") == "item_reference":
            raise NotFoundError(
                f"Item with id '{item_id}' not found.", param=f"{param}[{index}].id"
            )
        if item_id and keep_ids:
            check_item_id(item, f"{param}[{index}]")
        else:
            item["id"] = new_id(id_prefix(item))
        items.append(item)
        new_items.append(item)
    return items, new_items


def as_input_list(value: Any) -> list[JsonObject]:
    if value is None:
        return []
    if isinstance(value, str):
        return [{"type": "message", "role": "user", "content": value}]
    return [item for item in value if isinstance(item, dict)]


def pending_call_ids(output: list[JsonObject]) -> list[str]:
    """Client function calls a response ended with."""
    return [
        str(item["call_id"])
        for item in output
        if item.get("type") == "function_call" and item.get("call_id")
    ]


async def rehydrate(
    store: ResponseStore, request: CreateResponseRequest, *, tenant: str
) -> History:
    """The history and input of ``tenant``'s request (see the module docstring)."""
    previous_id = request.previous_response_id
    conversation_id = conversation_id_of(request)
    if previous_id and request.conversation is not None:
        raise InvalidRequestError(
            "Mutually exclusive parameters: Ensure you are only providing one of: "
            "'previous_response_id' or 'conversation'.",
            param="conversation",
            code="mutually_exclusive_parameters",
        )
    history = History(conversation_id=conversation_id)
    raw_input = as_input_list(request.input)
    if previous_id:
        parent = await store.get_response(previous_id, tenant=tenant)
        if parent is None:
            raise InvalidRequestError(
                f"Previous response with id '{previous_id}' not found.",
                param="previous_response_id",
                code="previous_response_not_found",
            )
        answered = {
            item.get("call_id") for item in raw_input if item.get("type") == "function_call_output"
        }
        for call_id in pending_call_ids(parent.response.get("output") or []):
            if call_id not in answered:
                raise InvalidRequestError(
                    f"No tool output found for function call {call_id}.", param="input"
                )
        history.history_ids = list(parent.checkpoint_ids)
        history.root_id = parent.root_id
        history.history_items = await store.load_items(history.history_ids, tenant=tenant)
    elif conversation_id is not None:
        items = await store.conversation_items(conversation_id, tenant=tenant)
        if items is None:
            raise NotFoundError(
                f"Conversation with id '{conversation_id}' not found.", param="conversation"
            )
        history.history_items = items
        history.history_ids = [str(item["id"]) for item in items]
    history.input_items, history.new_input_items = await resolve_items(
        store, raw_input, "input", keep_ids=False, tenant=tenant
    )
    return history
