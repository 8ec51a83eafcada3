"""Request bodies of the Conversations API (``/v1/conversations``), validated for shape only.

Unlike ``POST /v1/responses`` (whose unknown fields are forwarded upstream), these requests end
at the gateway: an unknown top-level field is a 400, as OpenAI answers. Items stay plain JSON
objects so that item types the gateway does not know are stored unchanged; ``check_items``
checks what every item needs. ``metadata`` is typed loosely here and checked by
``protocol.metadata.check_metadata``; both answer with OpenAI's messages, params and codes.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict

from app.errors import InvalidRequestError
from app.protocol.json_types import JsonObject
from app.protocol.metadata import json_type_name

# OpenAI: "You may add up to 20 items at a time."
MAX_ITEMS_PER_REQUEST = 20
MESSAGE_ROLES = ("user", "assistant", "system", "developer")


class CreateConversationRequest(BaseModel):
    """``POST /v1/conversations``."""

    model_config = ConfigDict(extra="forbid")

    items: list[JsonObject] | None = None
    metadata: Any = None


class UpdateConversationRequest(BaseModel):
    """``POST /v1/conversations/{conversation_id}``: ``metadata`` replaces the old one."""

    model_config = ConfigDict(extra="forbid")

    metadata: Any


class CreateItemsRequest(BaseModel):
    """``POST /v1/conversations/{conversation_id}/items``."""

    model_config = ConfigDict(extra="forbid")

    items: list[JsonObject]


def reject_unknown_fields(model: type[BaseModel], body: JsonObject) -> None:
    """OpenAI's answer to a field the endpoint does not take (before shape validation)."""
    for key in body:
        if key not in model.model_fields:
            raise InvalidRequestError(
                f"Unknown parameter: '{key}'.", param=key, code="unknown_parameter"
            )


def check_items(items: list[JsonObject], param: str = "items") -> None:
    """At most 20 items; each has a string ``type`` (or a ``role``: a message), and a message
    has a known ``role`` and a string or list ``content``. Other item types are kept as sent."""
    if len(items) > MAX_ITEMS_PER_REQUEST:
        raise InvalidRequestError(
            f"Invalid '{param}': array too long. Expected an array with maximum length "
            f"{MAX_ITEMS_PER_REQUEST}, but got an array with length {len(items)} instead.",
            param=param,
            code="array_above_max_length",
        )
    for index, item in enumerate(items):
        where = f"{param}[{index}]"
        if "type" not in item and "role" not in item:
            raise _missing(f"{where}.type")
        kind = item.get("type", "message")
        if not isinstance(kind, str):
            raise _invalid_type(f"{where}.type", "a string", kind)
        if kind != "message":
            continue
        role = item.get("role")
        if role is None:
            raise _missing(f"{where}.role")
        if role not in MESSAGE_ROLES:
            supported = ", ".join(f"'{r}'" for r in MESSAGE_ROLES[:-1])
            raise InvalidRequestError(
                f"Invalid value: '{role}'. Supported values are: {supported}, and "
                f"'{MESSAGE_ROLES[-1]}'.",
                param=f"{where}.role",
                code="invalid_value",
            )
        content = item.get("content")
        if content is None:
            raise _missing(f"{where}.content")
        if not isinstance(content, str | list):
            raise _invalid_type(f"{where}.content", "one of a string or array", content)


def _missing(param: str) -> InvalidRequestError:
    return InvalidRequestError(
        f"Missing required parameter: '{param}'.", param=param, code="missing_required_parameter"
    )


def _invalid_type(param: str, expected: str, value: object) -> InvalidRequestError:
    return InvalidRequestError(
        f"Invalid type for '{param}': expected {expected}, but got {json_type_name(value)} "
        "instead.",
        param=param,
        code="invalid_type",
    )
