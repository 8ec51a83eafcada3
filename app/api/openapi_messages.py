"""``/openapi.json``'s description of Anthropic's Messages routes (``routes.messages``), plain
Starlette routes that FastAPI's generator does not see: merged in by ``app.api.openapi``."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict

from app.protocol.json_types import JsonObject

SCHEMA_REF = "#/components/schemas/{model}"


class MessagesRequest(BaseModel):
    """Anthropic's Messages request (the fields every request has; others may follow)."""

    model_config = ConfigDict(extra="allow")

    model: str
    messages: list[JsonObject]
    max_tokens: int
    system: str | list[JsonObject] | None = None
    tools: list[JsonObject] | None = None
    stream: bool | None = None


class CountTokensRequest(BaseModel):
    """Anthropic's token counting request: a Messages request without ``max_tokens``."""

    model_config = ConfigDict(extra="allow")

    model: str
    messages: list[JsonObject]
    system: str | list[JsonObject] | None = None
    tools: list[JsonObject] | None = None


class Message(BaseModel):
    """Anthropic's Message."""

    id: str
    type: str = "message"
    role: str = "assistant"
    model: str
    content: list[JsonObject]
    stop_reason: str | None
    stop_sequence: str | None
    usage: JsonObject


class TokenCount(BaseModel):
    """The estimated input tokens (tiktoken, not the served model's tokenizer)."""

    input_tokens: int


class AnthropicErrorDetail(BaseModel):
    type: str
    message: str


class AnthropicError(BaseModel):
    """Every error of the Messages routes: Anthropic's envelope."""

    type: str = "error"
    error: AnthropicErrorDetail


MODELS: tuple[type[BaseModel], ...] = (
    MessagesRequest,
    CountTokensRequest,
    Message,
    TokenCount,
    AnthropicError,
)


def _ref(model: type[BaseModel]) -> JsonObject:
    return {"$ref": SCHEMA_REF.format(model=model.__name__)}


def _operation(
    summary: str, request: type[BaseModel], answer: type[BaseModel], operation_id: str
) -> JsonObject:
    errors = {"application/json": {"schema": _ref(AnthropicError)}}
    content: JsonObject = {"application/json": {"schema": _ref(answer)}}
    if answer is Message:
        # Before OpenAPI 3.2 (``itemSchema``), a stream's ``schema`` describes each event.
        event = {"event": {"type": "string"}, "data": {"type": "string"}}
        content["text/event-stream"] = {
            "schema": {
                "type": "object",
                "description": "One of Anthropic's server-sent events.",
                "properties": event,
                "required": ["event", "data"],
            }
        }
    return {
        "summary": summary,
        "operationId": operation_id,
        "requestBody": {
            "required": True,
            "content": {"application/json": {"schema": _ref(request)}},
        },
        "responses": {
            "200": {
                "description": "JSON, or an event stream when `stream` is true",
                "content": content,
            },
            **{
                str(status): {"description": "Anthropic's error envelope", "content": errors}
                for status in (400, 401, 404, 413, 429, 500, 529)
            },
        },
    }


PATHS: dict[str, JsonObject] = {
    "/v1/messages": {
        "post": _operation(
            "Create a message (Anthropic's Messages API)",
            MessagesRequest,
            Message,
            "create_message",
        )
    },
    "/v1/messages/count_tokens": {
        "post": _operation(
            "Count a message's input tokens (an estimate)",
            CountTokensRequest,
            TokenCount,
            "count_message_tokens",
        )
    },
}
