"""``/openapi.json`` describes every route, the hot plain-Starlette ones included, and is a
valid OpenAPI document; ``/docs`` serves Swagger UI on it."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from fastapi.routing import APIRoute
from openapi_spec_validator import validate
from starlette.routing import Route
from starlette.testclient import TestClient

from app.main import create_app
from app.settings import Settings

# FastAPI's own pages, not part of the API.
_NOT_API = frozenset({"/openapi.json", "/docs", "/docs/oauth2-redirect", "/redoc"})


@pytest.fixture(scope="module")
def app_and_spec() -> Iterator[tuple[Any, dict[str, Any]]]:
    app = create_app(Settings())
    with TestClient(app) as client:
        reply = client.get("/openapi.json")
        assert reply.status_code == 200
        yield app, reply.json()


def registered(app: Any) -> set[tuple[str, str]]:
    """Every (path, method) the application routes, FastAPI routes and plain ones alike."""
    out: set[tuple[str, str]] = set()
    for route in app.routes:
        if not isinstance(route, APIRoute | Route) or route.path in _NOT_API:
            continue
        for method in route.methods or ():
            if method != "HEAD":
                out.add((route.path, method.lower()))
    return out


def test_every_route_is_described(app_and_spec: tuple[Any, dict[str, Any]]) -> None:
    app, spec = app_and_spec
    routes = registered(app)
    described = {(path, method) for path, item in spec["paths"].items() for method in item}
    assert ("/v1/responses", "post") in routes
    assert ("/v1/chat/completions", "post") in routes
    assert routes - described == set()


def test_the_document_is_valid_openapi(app_and_spec: tuple[Any, dict[str, Any]]) -> None:
    _, spec = app_and_spec
    validate(spec)
    assert spec["openapi"].startswith("3.")


@pytest.mark.parametrize(
    ("path", "request_model", "answer_model"),
    [
        ("/v1/responses", "CreateResponseRequest", "ResponseObject"),
        ("/v1/chat/completions", "ChatCompletionRequest", "ChatCompletion"),
    ],
)
def test_the_hot_routes_have_request_and_response_schemas(
    app_and_spec: tuple[Any, dict[str, Any]], path: str, request_model: str, answer_model: str
) -> None:
    _, spec = app_and_spec
    operation = spec["paths"][path]["post"]
    request = operation["requestBody"]["content"]["application/json"]["schema"]
    assert request == {"$ref": f"#/components/schemas/{request_model}"}
    answers = operation["responses"]["200"]["content"]
    assert answers["application/json"]["schema"] == {"$ref": f"#/components/schemas/{answer_model}"}
    assert "text/event-stream" in answers
    assert operation["responses"]["400"]["content"]["application/json"]["schema"] == {
        "$ref": "#/components/schemas/ErrorEnvelope"
    }
    schemas = spec["components"]["schemas"]
    assert "model" in schemas[request_model]["required"]


def test_the_responses_request_schema_names_openai_parameters(
    app_and_spec: tuple[Any, dict[str, Any]],
) -> None:
    _, spec = app_and_spec
    properties = spec["components"]["schemas"]["CreateResponseRequest"]["properties"]
    for name in ("input", "tools", "tool_choice", "text", "reasoning", "include", "stream"):
        assert name in properties
    assert spec["components"]["schemas"]["TextFormatJsonSchema"]["required"] == [
        "type",
        "name",
        "schema",
    ]


def test_docs_serve_swagger_ui_on_the_document() -> None:
    with TestClient(create_app(Settings())) as client:
        page = client.get("/docs")
    assert page.status_code == 200
    assert page.headers["content-type"].startswith("text/html")
    assert "SwaggerUIBundle" in page.text
    assert "/openapi.json" in page.text
