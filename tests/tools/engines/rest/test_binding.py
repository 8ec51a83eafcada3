"""``RestBinding`` validation and ``build_request``: where each argument goes."""

from __future__ import annotations

from typing import Any

import orjson
import pytest
from pydantic import ValidationError

from app.core.request_id import REQUEST_ID
from app.tools.engines.rest.binding import (
    ArgumentError,
    MissingSecretError,
    RestBinding,
    build_request,
)


def binding(**fields: Any) -> RestBinding:
    return RestBinding.model_validate({"url": "https://api.example.com/v1/items/{id}", **fields})


def test_a_call_made_for_a_request_sends_its_request_id() -> None:
    assert "X-Request-Id" not in build_request(binding(), {"id": 1}, {}).headers
    token = REQUEST_ID.set("req_from_client")
    try:
        request = build_request(binding(), {"id": 1}, {})
        configured = build_request(binding(headers={"X-Request-Id": "mine"}), {"id": 1}, {})
    finally:
        REQUEST_ID.reset(token)
    assert request.headers["X-Request-Id"] == "req_from_client"
    assert configured.headers["X-Request-Id"] == "mine"


def test_get_puts_the_rest_in_the_query() -> None:
    request = build_request(
        binding(method="get"),
        {"id": 42, "flag": True, "tags": ["a", "b"], "filter": {"x": 1}, "skip": None},
        {},
    )
    assert (request.method, request.url) == ("GET", "https://api.example.com/v1/items/42")
    assert request.params == [
        ("flag", "true"),
        ("tags", "a"),
        ("tags", "b"),
        ("filter", '{"x":1}'),
    ]
    assert request.json_body is None and "Content-Type" not in request.headers


@pytest.mark.parametrize("method", ["POST", "PUT", "PATCH"])
def test_other_methods_put_the_rest_in_a_json_body(method: str) -> None:
    request = build_request(binding(method=method), {"id": "a b/c", "n": 1}, {})
    assert request.url.endswith("/items/a%20b%2Fc")
    assert request.params == [] and orjson.loads(request.json_body or b"") == {"n": 1}
    assert request.headers["Content-Type"] == "application/json"
    empty = build_request(binding(method=method, url="https://h/x"), {}, {})
    assert empty.json_body == b"{}"


def test_explicit_query_body_and_body_argument() -> None:
    request = build_request(binding(method="DELETE", body=["why"]), {"id": 1, "why": "old"}, {})
    assert request.params == [] and request.json_body == b'{"why":"old"}'
    whole = binding(method="POST", body_argument="payload", query=[])
    request = build_request(whole, {"id": 1, "payload": [1], "dry": False}, {})
    assert request.json_body == b"[1]" and request.params == [("dry", "false")]


@pytest.mark.parametrize("value", ["", ".", "..", None, {"a": 1}, [1]])
def test_refused_path_values(value: Any) -> None:
    with pytest.raises(ArgumentError, match="path parameter 'id'"):
        build_request(binding(), {"id": value}, {})
    with pytest.raises(ArgumentError, match="'id' is missing"):
        build_request(binding(), {}, {})


def test_secrets_are_listed_for_hiding() -> None:
    auth = {"type": "basic", "username": "me", "password_env": "PW"}
    request = build_request(
        binding(auth=auth, headers_from_env={"X-Tenant": "TENANT"}, headers={"X-A": "b"}),
        {"id": 1},
        {"PW": "hunter2", "TENANT": "t-9"},
    )
    assert request.headers["X-Tenant"] == "t-9" and request.headers["X-A"] == "b"
    assert request.headers["Authorization"] == "Basic bWU6aHVudGVyMg=="
    assert set(request.secrets) == {"hunter2", "t-9", "Basic bWU6aHVudGVyMg=="}
    with pytest.raises(MissingSecretError, match="PW is not set"):
        build_request(binding(auth=auth), {"id": 1}, {})


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"url": "api.example.com/x"}, "is not an absolute http"),
        ({"url": "https://{host}/x"}, "host cannot hold a path parameter"),
        ({"url": "http://127.0.0.1:99999/x"}, "Port out of range"),
        ({"method": "TRACE"}, "method"),
        ({"headers": {"bad header": "x"}}, "is not an HTTP header name"),
        ({"headers_from_env": {"X-K": "not-a-name"}}, "is not an environment variable name"),
        ({"tls": {"client_key": "k.pem"}}, "client_key needs client_cert"),
        ({"timeout": 0}, "greater than 0"),
        ({"retries": 2}, "Extra inputs are not permitted"),
    ],
)
def test_invalid_bindings(fields: dict[str, Any], message: str) -> None:
    with pytest.raises(ValidationError, match=message):
        binding(**fields)


def test_problems_with_the_parameters() -> None:
    parameters = {"type": "object", "properties": {"id": {}}}
    assert binding(query=["id"]).problems_with(parameters) == []
    assert binding(body=["x"], body_argument="y").problems_with({}) == [
        "url: 'id' is not among the tool's parameters",
        "body: 'x' is not among the tool's parameters",
        "body_argument: 'y' is not among the tool's parameters",
    ]
