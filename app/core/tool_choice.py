"""``tool_choice`` against the tools a request offers: what OpenAI refuses before inference.

The tools a request offers are its own ``tools``: a continuation (``previous_response_id`` or
``conversation``) inherits none, as with OpenAI, so a choice must name a tool of this request.
Hosted tools the gateway leaves out are not the question here: a choice of one is the
toolkit's to translate.
"""

from __future__ import annotations

from typing import Any

from app.errors import InvalidRequestError
from app.protocol.json_types import JsonObject
from app.protocol.requests import (
    AllowedToolsChoice,
    CreateResponseRequest,
    CustomChoice,
    FunctionChoice,
)

# Choice types that name one tool of that type by ``name``.
_NAMED_CHOICES = frozenset({"function", "custom"})


def check_tool_choice(request: CreateResponseRequest) -> None:
    """A 400 naming ``tool_choice`` when it asks for a tool the request does not offer."""
    choice = request.tool_choice
    tools = request.tools or []
    if choice == "required" and not tools:
        raise InvalidRequestError(
            "Invalid value for 'tool_choice': 'required' is only allowed when 'tools' are "
            "specified.",
            param="tool_choice",
            code="invalid_value",
        )
    if isinstance(choice, FunctionChoice | CustomChoice):
        _check_named(choice.type, choice.name, tools, "tool_choice")
    elif isinstance(choice, AllowedToolsChoice):
        for index, entry in enumerate(choice.tools):
            if entry.get("type") in _NAMED_CHOICES:
                _check_named(entry["type"], entry.get("name"), tools, f"tool_choice.tools[{index}]")


def _check_named(kind: str, name: Any, tools: list[JsonObject], param: str) -> None:
    if any(t.get("type") == kind and t.get("name") == name for t in tools):
        return
    raise InvalidRequestError(
        f"Tool choice '{kind}' with name '{name}' not found in 'tools' parameter.",
        param=param,
        code="invalid_value",
    )
