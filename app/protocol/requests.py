"""Request bodies of the Responses API, validated for shape.

The model keeps unknown fields (``extra="allow"``): a gateway must pass through what a newer
client or a vendor extension sends. Items and tools stay plain JSON objects here so that unknown
item and tool types are carried through unchanged; ``protocol.items`` and ``protocol.tools`` name
the ones the gateway understands. The parameters OpenAI defines are typed as OpenAI types them
(``reasoning``, ``text``, ``tool_choice`` …), so that a malformed value is a 400 naming it
rather than a surprise upstream; their own unknown keys are carried too. A create request is
parsed once, by the HTTP front end, into a ``ParsedRequest``: the kernel decides on its typed
``params`` and forwards its raw ``body``.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Discriminator, Field, StrictBool, Tag, field_validator

from app.errors import InvalidRequestError
from app.protocol.json_types import JsonObject

# OpenAI's ``ResponseIncludable`` (openai SDK 3.57).
OPENAI_INCLUDES = (
    "file_search_call.results",
    "web_search_call.results",
    "web_search_call.action.sources",
    "message.input_image.image_url",
    "computer_call_output.output.image_url",
    "code_interpreter_call.outputs",
    "reasoning.encrypted_content",
    "message.output_text.logprobs",
)
# OpenAI's values and those the gateway's tool kinds answer (``register_include_values``).
KNOWN_INCLUDES: set[str] = set(OPENAI_INCLUDES)


def register_include_values(values: Iterable[str]) -> None:
    """Accept the ``include`` values a tool kind answers (``app.main`` calls it when it wires
    the toolkit)."""
    KNOWN_INCLUDES.update(values)


SummaryMode = Literal["auto", "concise", "detailed"]


class _Open(BaseModel):
    """An OpenAI object whose known keys are typed and whose other keys are kept."""

    model_config = ConfigDict(extra="allow")


class ConversationRef(_Open):
    id: str


class ReasoningParam(_Open):
    # An open string: OpenAI adds efforts ("xhigh", "max") and servers have their own.
    effort: str | None = None
    summary: SummaryMode | None = None
    generate_summary: SummaryMode | None = None


class TextFormatText(_Open):
    type: Literal["text"]


class TextFormatJsonObject(_Open):
    type: Literal["json_object"]


class TextFormatJsonSchema(_Open):
    type: Literal["json_schema"]
    name: str = Field(max_length=64, pattern=r"^[a-zA-Z0-9_-]+$")
    schema_: JsonObject = Field(alias="schema")
    description: str | None = None
    strict: bool | None = None


class TextFormatUnknown(_Open):
    """Where a format of another type lands: its ``type`` is the error."""

    type: Literal["text", "json_object", "json_schema"]


_FORMAT_TAGS = {
    "text": "TextFormatText",
    "json_object": "TextFormatJsonObject",
    "json_schema": "TextFormatJsonSchema",
}


def _tag_by_type(tags: dict[str, str], fallback: str) -> Any:
    """A pydantic discriminator choosing the model by the object's ``type``; tags are class
    names so that ``body.format_loc`` leaves them out of ``param``."""

    def tag(value: Any) -> str | None:
        if not isinstance(value, dict):
            return None
        kind = value.get("type")
        return tags.get(kind, fallback) if isinstance(kind, str) else fallback

    return tag


TextFormat = Annotated[
    Annotated[TextFormatText, Tag("TextFormatText")]
    | Annotated[TextFormatJsonObject, Tag("TextFormatJsonObject")]
    | Annotated[TextFormatJsonSchema, Tag("TextFormatJsonSchema")]
    | Annotated[TextFormatUnknown, Tag("TextFormatUnknown")],
    Discriminator(
        _tag_by_type(_FORMAT_TAGS, "TextFormatUnknown"),
        custom_error_type="invalid_type",
        custom_error_message="Expected an object with a 'type'",
    ),
]


class TextParam(_Open):
    format: TextFormat | None = None
    verbosity: Literal["low", "medium", "high"] | None = None


class FunctionChoice(_Open):
    type: Literal["function"]
    name: str


class CustomChoice(_Open):
    type: Literal["custom"]
    name: str


class McpChoice(_Open):
    type: Literal["mcp"]
    server_label: str
    name: str | None = None


class AllowedToolsChoice(_Open):
    type: Literal["allowed_tools"]
    mode: Literal["auto", "required"]
    tools: list[JsonObject]


class TypedChoice(_Open):
    """A built-in tool chosen by type (``file_search``, ``web_search_preview``, ``shell`` …)."""

    type: str


_CHOICE_TAGS = {
    "function": "FunctionChoice",
    "custom": "CustomChoice",
    "mcp": "McpChoice",
    "allowed_tools": "AllowedToolsChoice",
}

ToolChoiceObject = Annotated[
    Annotated[FunctionChoice, Tag("FunctionChoice")]
    | Annotated[CustomChoice, Tag("CustomChoice")]
    | Annotated[McpChoice, Tag("McpChoice")]
    | Annotated[AllowedToolsChoice, Tag("AllowedToolsChoice")]
    | Annotated[TypedChoice, Tag("TypedChoice")],
    Discriminator(
        _tag_by_type(_CHOICE_TAGS, "TypedChoice"),
        custom_error_type="invalid_type",
        custom_error_message="Expected 'none', 'auto', 'required' or an object with a 'type'",
    ),
]


class PromptParam(_Open):
    id: str
    version: str | None = None
    variables: JsonObject | None = None


class StreamOptionsParam(_Open):
    include_obfuscation: bool | None = None


class ContextManagementParam(_Open):
    type: str
    compact_threshold: int | None = None


SIMULATE_FIELD = "simulate"


class CreateResponseRequest(BaseModel):
    """``POST /v1/responses``."""

    model_config = ConfigDict(extra="allow")

    model: str
    input: str | list[JsonObject] | None = None
    instructions: str | list[JsonObject] | None = None
    stream: bool | None = False
    store: bool | None = None
    background: bool | None = None
    previous_response_id: str | None = None
    conversation: str | ConversationRef | None = None
    tools: list[JsonObject] | None = None
    tool_choice: Literal["none", "auto", "required"] | ToolChoiceObject | None = None
    parallel_tool_calls: bool | None = None
    max_output_tokens: int | None = Field(default=None, ge=1)
    max_tool_calls: int | None = Field(default=None, ge=0)
    temperature: float | None = Field(default=None, ge=0, le=2)
    top_p: float | None = Field(default=None, ge=0, le=1)
    top_logprobs: int | None = Field(default=None, ge=0, le=20)
    presence_penalty: float | None = Field(default=None, ge=-2, le=2)
    frequency_penalty: float | None = Field(default=None, ge=-2, le=2)
    metadata: dict[str, str] | None = None
    include: list[str] | None = None
    reasoning: ReasoningParam | None = None
    text: TextParam | None = None
    # respgate's own: a dry run of the gateway's tool engines (every engine-run call of this
    # response is simulated; nothing is written to a real system). Sent with the ``openai``
    # SDK as ``extra_body={"simulate": True}``; never forwarded upstream.
    simulate: StrictBool | None = None
    truncation: Literal["auto", "disabled"] | None = None
    user: str | None = None
    safety_identifier: str | None = None
    prompt: PromptParam | None = None
    prompt_cache_key: str | None = None
    prompt_cache_retention: str | None = None
    service_tier: str | None = None
    stream_options: StreamOptionsParam | None = None
    context_management: list[ContextManagementParam] | None = None

    @field_validator("tools")
    @classmethod
    def _tools_have_types(cls, tools: list[JsonObject] | None) -> list[JsonObject] | None:
        for index, tool in enumerate(tools or ()):
            kind = tool.get("type")
            if not isinstance(kind, str):
                raise ValueError(f"tools[{index}] needs a string 'type'")
            if kind == "function" and not isinstance(tool.get("name"), str):
                raise ValueError(f"tools[{index}] of type 'function' needs a string 'name'")
        return tools

    @field_validator("input")
    @classmethod
    def _items_are_typed(
        cls, value: str | list[JsonObject] | None
    ) -> str | list[JsonObject] | None:
        if isinstance(value, list):
            for index, item in enumerate(value):
                if "type" not in item and "role" not in item:
                    raise ValueError(f"input[{index}] needs a 'type' (or a 'role' for a message)")
        return value


@dataclass(frozen=True, slots=True)
class ParsedRequest:
    """A create request parsed once: the typed model the gateway decides on, the body as
    the client sent it, which is what the upstream receives (unknown fields included), and the
    tenant it runs for (``app.core.tenancy``: what it reads and stores is that tenant's)."""

    params: CreateResponseRequest
    body: JsonObject
    tenant: str

    @classmethod
    def from_body(cls, body: JsonObject, tenant: str) -> ParsedRequest:
        """Validate ``body`` as the API does (strict: no coercion); pydantic's error on a bad
        one (the HTTP front end reports it as a 400 itself)."""
        return cls(CreateResponseRequest.model_validate(body, strict=True), body, tenant)


def check_create_request(request: CreateResponseRequest) -> None:
    """What OpenAI checks across parameters, once each has the right shape."""
    _check_include(request.include or [])
    if request.background and request.store is False:
        raise InvalidRequestError(
            "Background mode requires 'store' to be true: set 'store' to true or "
            "'background' to false.",
            param="background",
            code="invalid_value",
        )


def _check_include(values: list[str]) -> None:
    for index, value in enumerate(values):
        if value not in KNOWN_INCLUDES:
            supported = ", ".join(f"'{v}'" for v in sorted(KNOWN_INCLUDES))
            raise InvalidRequestError(
                f"Invalid value: '{value}'. Supported values are: {supported}.",
                param=f"include[{index}]",
                code="invalid_value",
            )
