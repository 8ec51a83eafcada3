"""Request bodies of the Responses API, validated for shape only.

The model keeps unknown fields (``extra="allow"``): a gateway must pass through what a newer
client or a vendor extension sends. Items and tools stay plain JSON objects here so that unknown
item and tool types are carried through unchanged; ``protocol.items`` and ``protocol.tools`` name
the ones the gateway understands.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

JsonObject = dict[str, Any]


class ConversationRef(BaseModel):
    model_config = ConfigDict(extra="allow")
    id: str


class CreateResponseRequest(BaseModel):
    """``POST /v1/responses``."""

    model_config = ConfigDict(extra="allow")

    model: str | None = None
    input: str | list[JsonObject] | None = None
    instructions: str | list[JsonObject] | None = None
    stream: bool = False
    store: bool | None = None
    background: bool | None = None
    previous_response_id: str | None = None
    conversation: str | ConversationRef | None = None
    tools: list[JsonObject] | None = None
    tool_choice: Literal["none", "auto", "required"] | JsonObject | None = None
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
    reasoning: JsonObject | None = None
    text: JsonObject | None = None
    truncation: Literal["auto", "disabled"] | None = None
    user: str | None = None
    safety_identifier: str | None = None
    prompt_cache_key: str | None = None
    service_tier: str | None = None
    stream_options: JsonObject | None = None

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
