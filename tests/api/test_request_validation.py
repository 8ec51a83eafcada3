"""Request validation where OpenAI validates: each a 400 (a 404 for a missing vector store) in
OpenAI's envelope naming ``param``, before anything reaches the upstream; the ``openai`` SDK is
the client, the gateway runs in process in front of a recording fake upstream."""

from __future__ import annotations

import inspect
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import openai
import pytest
from starlette.testclient import TestClient

from app.main import create_app
from app.protocol.json_types import JsonObject
from app.settings import Settings
from tests.fakes import FakeEmbedder, FakeUpstream

ANSWER: JsonObject = {
    "status": "completed",
    "output": [
        {
            "type": "message",
            "role": "assistant",
            "content": [{"type": "output_text", "text": "hi", "annotations": []}],
        }
    ],
    "usage": {"input_tokens": 1, "output_tokens": 1, "total_tokens": 2},
}
OMIT = object()  # a parameter the request leaves out
WEATHER: JsonObject = {
    "type": "function",
    "name": "get_weather",
    "parameters": {"type": "object", "properties": {}},
}


@pytest.fixture(scope="module")
def gateway(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[openai.OpenAI, Any]]:
    upstream = FakeUpstream(
        body=ANSWER, events=[{"type": "response.completed", "response": ANSWER}]
    )
    settings = Settings(data_dir=Path(tmp_path_factory.mktemp("validation")))
    app = create_app(settings, upstream=upstream, embedder=FakeEmbedder())
    with TestClient(app, base_url="http://gateway") as http:
        client = openai.OpenAI(
            base_url="http://gateway/v1", api_key="sk-test", max_retries=0, http_client=http
        )
        yield client, upstream


def _error(gateway: tuple[openai.OpenAI, Any], body: JsonObject, status: int = 400) -> JsonObject:
    """The error the SDK raised for ``body``; nothing reached the upstream."""
    client, upstream = gateway
    upstream.requests.clear()
    known = set(inspect.signature(client.responses.create).parameters)
    extra = {k: v for k, v in body.items() if k not in known}  # respgate's own, e.g. simulate
    fields = {k: v for k, v in body.items() if k in known}
    with pytest.raises(openai.APIStatusError) as caught:
        client.responses.create(**fields, extra_body=extra or None)
    assert caught.value.status_code == status
    envelope = caught.value.body
    assert isinstance(envelope, dict) and set(envelope) == {
        "message",
        "type",
        "param",
        "code",
    }, envelope
    assert envelope["type"] == "invalid_request_error"
    assert upstream.requests == []
    return envelope


BAD_REQUESTS: list[tuple[str, JsonObject, str, str | None, str]] = [
    (
        "missing model",
        {"model": OMIT},
        "model",
        "missing_required_parameter",
        "Missing required parameter: 'model'.",
    ),
    (
        "tool_choice names a function not in tools",
        {"tools": [WEATHER], "tool_choice": {"type": "function", "name": "get_time"}},
        "tool_choice",
        "invalid_value",
        "Tool choice 'function' with name 'get_time' not found in 'tools' parameter.",
    ),
    (
        "allowed_tools names a function not in tools",
        {
            "tools": [WEATHER],
            "tool_choice": {
                "type": "allowed_tools",
                "mode": "auto",
                "tools": [{"type": "function", "name": "get_time"}],
            },
        },
        "tool_choice.tools[0]",
        "invalid_value",
        "Tool choice 'function' with name 'get_time' not found in 'tools' parameter.",
    ),
    (
        "tool_choice required without tools",
        {"tool_choice": "required"},
        "tool_choice",
        "invalid_value",
        "Invalid value for 'tool_choice': 'required' is only allowed when 'tools' are specified.",
    ),
    (
        "json_schema without a name",
        {"text": {"format": {"type": "json_schema", "schema": {"type": "object"}}}},
        "text.format.name",
        "missing_required_parameter",
        "Missing required parameter: 'text.format.name'.",
    ),
    (
        "background without store",
        {"background": True, "store": False},
        "background",
        "invalid_value",
        "Background mode requires 'store' to be true: set 'store' to true or 'background' "
        "to false.",
    ),
    (
        "an include value nobody knows",
        {"include": ["reasoning.encrypted_content", "file_search_call.everything"]},
        "include[1]",
        "invalid_value",
        "Invalid value: 'file_search_call.everything'. Supported values are: ",
    ),
    (
        "reasoning effort of the wrong type",
        {"reasoning": {"effort": 3}},
        "reasoning.effort",
        "invalid_value",
        "Invalid value for 'reasoning.effort': Input should be a valid string.",
    ),
    (
        "simulate that is not a boolean",
        {"simulate": "yes"},
        "simulate",
        "invalid_value",
        "Invalid value for 'simulate': Input should be a valid boolean.",
    ),
    (
        "reasoning that is not an object",
        {"reasoning": "high"},
        "reasoning",
        "invalid_value",
        "Invalid value for 'reasoning': Input should be a valid dictionary.",
    ),
    (
        "an unknown text format",
        {"text": {"format": {"type": "yaml"}}},
        "text.format.type",
        "invalid_value",
        "Invalid value for 'text.format.type': Input should be 'text', 'json_object' or "
        "'json_schema'.",
    ),
    (
        "a verbosity OpenAI does not have",
        {"text": {"verbosity": "loud"}},
        "text.verbosity",
        "invalid_value",
        "Invalid value for 'text.verbosity': Input should be 'low', 'medium' or 'high'.",
    ),
    (
        "a function tool_choice without a name",
        {"tools": [WEATHER], "tool_choice": {"type": "function"}},
        "tool_choice.name",
        "missing_required_parameter",
        "Missing required parameter: 'tool_choice.name'.",
    ),
    (
        "a tool_choice string OpenAI does not have",
        {"tools": [WEATHER], "tool_choice": "any"},
        "tool_choice",
        "invalid_value",
        "Invalid value for 'tool_choice': Input should be 'none', 'auto' or 'required'.",
    ),
    (
        "stream_options of the wrong type",
        {"stream_options": {"include_obfuscation": "no"}},
        "stream_options.include_obfuscation",
        "invalid_value",
        "Invalid value for 'stream_options.include_obfuscation': Input should be a valid boolean.",
    ),
    (
        "a prompt without an id",
        {"prompt": {"version": "2"}},
        "prompt.id",
        "missing_required_parameter",
        "Missing required parameter: 'prompt.id'.",
    ),
    (
        "a truncation OpenAI does not have",
        {"truncation": "middle"},
        "truncation",
        "invalid_value",
        "Invalid value for 'truncation': Input should be 'auto' or 'disabled'.",
    ),
]


@pytest.mark.parametrize(
    ("fields", "param", "code", "message"),
    [case[1:] for case in BAD_REQUESTS],
    ids=[case[0] for case in BAD_REQUESTS],
)
def test_a_malformed_request_is_a_400_naming_the_parameter(
    gateway: tuple[openai.OpenAI, Any],
    fields: JsonObject,
    param: str,
    code: str | None,
    message: str,
) -> None:
    body = {k: v for k, v in {"model": "m", "input": "hi", **fields}.items() if v is not OMIT}
    error = _error(gateway, body)
    assert error["param"] == param
    assert error["code"] == code
    assert error["message"].startswith(message), error["message"]


def test_a_file_search_tool_naming_no_vector_store_is_a_404(
    gateway: tuple[openai.OpenAI, Any],
) -> None:
    tool = {"type": "file_search", "vector_store_ids": ["vs_nope"]}
    error = _error(gateway, {"model": "m", "input": "hi", "tools": [tool]}, status=404)
    assert error == {
        "message": "No vector store found with id 'vs_nope'.",
        "type": "invalid_request_error",
        "param": "tools[0].vector_store_ids[0]",
        "code": None,
    }


def test_a_file_search_tool_naming_an_existing_store_reaches_the_upstream(
    gateway: tuple[openai.OpenAI, Any],
) -> None:
    client, upstream = gateway
    store = client.vector_stores.create(name="empty")
    tool: Any = {"type": "file_search", "vector_store_ids": [store.id]}
    response = client.responses.create(model="m", input="hi", tools=[tool])
    assert response.status == "completed"
    assert upstream.requests[-1]["tools"][0]["name"] == "file_search"


@pytest.mark.parametrize("stream", [False, True])
def test_valid_choices_and_unknown_keys_reach_the_upstream(
    gateway: tuple[openai.OpenAI, Any], stream: bool
) -> None:
    """A choice of an offered tool passes; keys the gateway does not know (Codex sends some)
    and unknown keys inside known objects are carried upstream unchanged."""
    client, upstream = gateway
    upstream.requests.clear()
    fields: JsonObject = {
        "tools": [WEATHER],
        "tool_choice": {"type": "function", "name": "get_weather"},
        "reasoning": {"effort": "xhigh", "summary": "auto", "vendor_knob": 1},
        "text": {"format": {"type": "json_schema", "name": "out", "schema": {}, "x": 1}},
        "include": ["reasoning.encrypted_content", "web_search_call.action.sources"],
    }
    extra = {"client_metadata": {"originator": "codex"}, "prompt_cache_key": "k"}
    if stream:
        with client.responses.stream(model="m", input="hi", extra_body=extra, **fields) as events:
            response = events.get_final_response()
    else:
        response = client.responses.create(model="m", input="hi", extra_body=extra, **fields)
    assert response.status == "completed"
    sent = upstream.requests[-1]
    assert sent["client_metadata"] == {"originator": "codex"}
    assert sent["reasoning"]["vendor_knob"] == 1
    assert sent["text"]["format"]["x"] == 1
    assert sent["tool_choice"] == {"type": "function", "name": "get_weather"}


def test_a_continuation_must_offer_the_tools_its_choice_names(
    gateway: tuple[openai.OpenAI, Any],
) -> None:
    """A continuation inherits no tools (as with OpenAI): its choice is checked against its
    own ``tools``."""
    client, _ = gateway
    first = client.responses.create(model="m", input="hi", tools=[WEATHER])
    body = {"model": "m", "input": "again", "previous_response_id": first.id}
    error = _error(gateway, {**body, "tool_choice": "required"})
    assert error["param"] == "tool_choice"
    again = client.responses.create(**body, tools=[WEATHER], tool_choice="required")  # type: ignore[arg-type]
    assert again.previous_response_id == first.id
