"""Hosted tools the gateway cannot run, end to end in process: the ``openai`` SDK as the client,
and the request bodies Codex CLI really sent (``tests/fixtures/codex``), no Node.js needed."""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import openai
import pytest
from starlette.testclient import TestClient

from app.main import create_app
from app.protocol.json_types import JsonObject
from app.settings import Settings
from tests.fakes import ScriptedUpstream, function_call, message
from tests.lifecycle import assert_lifecycle

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "codex"
EXEC = {"type": "function", "name": "exec_command", "parameters": {"type": "object"}}
WEB_SEARCH = {"type": "web_search", "external_web_access": True}


@contextlib.contextmanager
def gateway(
    tmp_path: Path, rounds: list[list[JsonObject]], **settings: Any
) -> Iterator[tuple[TestClient, openai.OpenAI, ScriptedUpstream]]:
    upstream = ScriptedUpstream(rounds)
    app = create_app(Settings(data_dir=tmp_path / "data", **settings), upstream=upstream)
    with TestClient(app, base_url="http://gateway") as http:
        sdk = openai.OpenAI(
            base_url="http://gateway/v1", api_key="sk-test", max_retries=0, http_client=http
        )
        yield http, sdk, upstream


@pytest.mark.parametrize("stream", [False, True], ids=["json", "sse"])
def test_drop_answers_without_the_tool(tmp_path: Path, stream: bool) -> None:
    with gateway(tmp_path, [[message("hello")]]) as (_, sdk, upstream):
        kwargs: Any = {
            "model": "m",
            "input": "hi",
            "tools": [EXEC, WEB_SEARCH],
            "include": ["web_search_call.action.sources"],
        }
        if stream:
            with sdk.responses.stream(**kwargs) as events:
                response = events.get_final_response()
        else:
            response = sdk.responses.create(**kwargs)
    assert response.status == "completed"
    assert response.output_text == "hello"
    assert [t.type for t in response.tools] == ["function", "web_search"]
    [sent] = upstream.requests
    assert [t["name"] for t in sent["tools"]] == ["exec_command"]
    assert "include" not in sent


def test_reject_is_a_400_in_openais_envelope(tmp_path: Path) -> None:
    with (
        gateway(tmp_path, [], hosted_tools="reject") as (_, sdk, upstream),
        pytest.raises(openai.BadRequestError) as raised,
    ):
        sdk.responses.create(model="m", input="hi", tools=[EXEC, WEB_SEARCH])  # type: ignore[list-item]
    error = raised.value.body
    assert isinstance(error, dict)
    assert error["param"] == "tools[1]"
    assert error["type"] == "invalid_request_error"
    assert "web_search_provider" in error["message"] and "hosted_tools" in error["message"]
    assert upstream.requests == []


def test_forward_sends_the_tool_upstream(tmp_path: Path) -> None:
    with gateway(tmp_path, [[message("hello")]], hosted_tools="forward") as (_, sdk, upstream):
        response = sdk.responses.create(
            model="m",
            input="hi",
            tools=[EXEC, WEB_SEARCH],  # type: ignore[list-item]
            tool_choice={"type": "web_search_preview"},
            include=["web_search_call.action.sources"],
        )
    assert response.output_text == "hello"
    [sent] = upstream.requests
    assert sent["tools"] == [EXEC, WEB_SEARCH]
    assert sent["tool_choice"] == {"type": "web_search_preview"}
    assert sent["include"] == ["web_search_call.action.sources"]


def test_a_tool_choice_naming_a_dropped_tool_is_a_400(tmp_path: Path) -> None:
    with (
        gateway(tmp_path, []) as (_, sdk, upstream),
        pytest.raises(openai.BadRequestError) as raised,
    ):
        sdk.responses.create(
            model="m",
            input="hi",
            tools=[EXEC, WEB_SEARCH],  # type: ignore[list-item]
            tool_choice={"type": "web_search_preview"},
        )
    assert isinstance(raised.value.body, dict) and raised.value.body["param"] == "tool_choice"
    assert upstream.requests == []


# ----------------------------------------------------------------------------- Codex's requests


def sse_events(text: str) -> list[JsonObject]:
    return [
        json.loads(line[len("data: ") :])
        for line in text.splitlines()
        if line.startswith("data: ") and line != "data: [DONE]"
    ]


@pytest.mark.parametrize(
    "fixture", sorted(p.name for p in FIXTURES.glob("*.json")), ids=lambda name: name[:-5]
)
def test_codexs_first_turn_is_accepted(tmp_path: Path, fixture: str) -> None:
    body = json.loads((FIXTURES / fixture).read_text())
    call = function_call("exec_command", json.dumps({"cmd": "echo respgate-ok"}))
    with gateway(tmp_path, [[call]]) as (http, _, upstream):
        reply = http.post(
            "/v1/responses",
            json=body,
            headers={"authorization": "Bearer sk-dummy", "originator": "codex_exec"},
        )
    assert reply.status_code == 200, reply.text
    final = assert_lifecycle(sse_events(reply.text))
    assert final["status"] == "completed"
    assert [(i["type"], i["name"]) for i in final["output"]] == [("function_call", "exec_command")]

    [sent] = upstream.requests
    assert sent["tools"] == [t for t in body["tools"] if t["type"] != "web_search"]
    assert {t["type"] for t in sent["tools"]} >= {"function"}
    assert [i["type"] for i in sent["input"]] == [i["type"] for i in body["input"]]
    for key in ("tool_choice", "parallel_tool_calls", "reasoning", "include", "prompt_cache_key"):
        assert sent.get(key) == body.get(key), key
