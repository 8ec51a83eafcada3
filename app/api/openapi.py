"""``/openapi.json`` for every route, the two hot plain-Starlette routes included.

``POST /v1/responses`` and ``POST /v1/chat/completions`` are plain Starlette routes (no
per-request dependency solving, see ``routes.responses.HOT_ROUTES``), which FastAPI's generator
does not see. Their path items are added here from the pydantic models that describe them, once,
when the schema is first asked for: the hot path stays as fast as it is.
"""

from __future__ import annotations

from fastapi import FastAPI
from fastapi.openapi.utils import get_openapi
from pydantic import BaseModel, ConfigDict

from app.api import openapi_messages
from app.protocol.json_types import JsonObject
from app.protocol.requests import CreateResponseRequest

SCHEMA_REF = "#/components/schemas/{model}"


class ResponseObject(BaseModel):
    """OpenAI's Response object (the fields every response has; others may follow)."""

    model_config = ConfigDict(extra="allow")

    id: str
    object: str = "response"
    created_at: int
    status: str
    model: str
    output: list[JsonObject]
    usage: JsonObject | None = None
    error: JsonObject | None = None
    incomplete_details: JsonObject | None = None
    previous_response_id: str | None = None
    store: bool = True


class ChatCompletionRequest(BaseModel):
    """OpenAI's chat completion request; forwarded to the upstream unchanged."""

    model_config = ConfigDict(extra="allow")

    model: str
    messages: list[JsonObject]
    stream: bool | None = None


class ChatCompletion(BaseModel):
    """The upstream's chat completion, unchanged."""

    model_config = ConfigDict(extra="allow")

    id: str
    object: str = "chat.completion"
    created: int
    model: str
    choices: list[JsonObject]
    usage: JsonObject | None = None


class ErrorDetail(BaseModel):
    message: str
    type: str
    param: str | None
    code: str | None


class ErrorEnvelope(BaseModel):
    """Every error the gateway answers: OpenAI's envelope."""

    error: ErrorDetail


# Before OpenAPI 3.2 (``itemSchema``), a stream's ``schema`` describes each of its events.
_EVENT_STREAM = {
    "text/event-stream": {
        "schema": {
            "type": "object",
            "description": "A server-sent event: `event: <type>`, `data: <the event as JSON>`; "
            "the stream ends with `data: [DONE]`.",
            "properties": {"event": {"type": "string"}, "data": {"type": "string"}},
            "required": ["data"],
        }
    }
}


def _ref(model: type[BaseModel]) -> JsonObject:
    return {"$ref": SCHEMA_REF.format(model=model.__name__)}


def _errors(*statuses: int) -> JsonObject:
    json = {"application/json": {"schema": _ref(ErrorEnvelope)}}
    return {str(s): {"description": "OpenAI's error envelope", "content": json} for s in statuses}


def _operation(
    summary: str, request: type[BaseModel], answer: type[BaseModel], operation_id: str
) -> JsonObject:
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
                "content": {"application/json": {"schema": _ref(answer)}, **_EVENT_STREAM},
            },
            **_errors(400, 404, 413, 502, 504),
        },
    }


HOT_PATHS: dict[str, JsonObject] = {
    "/v1/responses": {
        "post": _operation(
            "Create a model response", CreateResponseRequest, ResponseObject, "create_response"
        )
    },
    "/v1/chat/completions": {
        "post": _operation(
            "Create a chat completion (forwarded to the upstream)",
            ChatCompletionRequest,
            ChatCompletion,
            "create_chat_completion",
        )
    },
}
_MODELS: tuple[type[BaseModel], ...] = (
    CreateResponseRequest,
    ResponseObject,
    ChatCompletionRequest,
    ChatCompletion,
    ErrorEnvelope,
    *openapi_messages.MODELS,
)


# The routes that read nothing from the request.
_NO_INPUT = frozenset({"/health", "/ready"})


def _document_errors(paths: JsonObject, schemas: JsonObject) -> None:
    """The errors FastAPI's routes really answer, in OpenAI's envelope: a 400 for bad input
    (a body, a path, a query parameter such as ``limit``: most routes read them themselves, and
    ``app.api.errors`` answers FastAPI's own validation errors with a 400, not the 422 FastAPI
    documents), a 404 where a path names an object, a 503 from ``/ready`` when an upstream is
    not ready. tests/api/test_schemathesis.py holds every answer to the document."""
    for path, item in paths.items():
        for operation in item.values():
            answers: JsonObject = operation.setdefault("responses", {})
            answers.pop("422", None)
            statuses = [] if path in _NO_INPUT else [400]
            if "{" in path:
                statuses.append(404)
            if path == "/ready":
                statuses.append(503)
            answers.update(_errors(*statuses))
    for unused in ("HTTPValidationError", "ValidationError"):
        schemas.pop(unused, None)


def build_openapi(app: FastAPI) -> JsonObject:
    """FastAPI's schema of its routes, plus the hot routes and the models they use."""
    spec = get_openapi(
        title=app.title,
        version=app.version,
        description=app.description,
        routes=app.routes,
    )
    schemas: JsonObject = spec.setdefault("components", {}).setdefault("schemas", {})
    for model in _MODELS:
        schema = model.model_json_schema(ref_template=SCHEMA_REF, by_alias=True)
        schemas.update(schema.pop("$defs", {}))
        schemas[model.__name__] = schema
    paths: JsonObject = spec.setdefault("paths", {})
    _document_errors(paths, schemas)
    for path, item in {**HOT_PATHS, **openapi_messages.PATHS}.items():
        paths.setdefault(path, {}).update(item)
    return spec


def install_openapi(app: FastAPI) -> None:
    """Serve ``build_openapi`` (built once, on the first request for it)."""

    def openapi() -> JsonObject:
        if app.openapi_schema is None:
            app.openapi_schema = build_openapi(app)
        return app.openapi_schema

    app.openapi = openapi  # type: ignore[method-assign]
