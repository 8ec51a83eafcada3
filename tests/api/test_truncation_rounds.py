"""``truncation`` before the later rounds of a tool loop, whose input grows with the tool's
output: over a scripted upstream with a tokenizer (``/tokenize`` counts words) and the real MCP
counter server, whose ``echo`` makes the round-2 input twice as long as the call's argument.
``"auto"`` drops the oldest items of the history but never the current turn's (its user
message, the call and its output); ``"disabled"`` (a configured window), or a turn that does
not fit by itself, ends the response as ``failed`` with ``context_length_exceeded``, as a
``response.failed`` event in a stream."""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import openai
import pytest

from app.main import create_app
from app.protocol.json_types import JsonObject
from app.settings import Settings
from tests.api.tokenizing_upstreams import MODEL, TokenizerLog, scripted_count, tokenizing_app
from tests.api.tokenizing_upstreams import words as many
from tests.clients.scripted_upstream import ScriptedUpstream
from tests.fakes import function_call, message
from tests.helpers import in_process, local_egress, openai_client, serve_in_thread

ECHOED = 120  # words the model asks the tool to echo: the round-2 input grows by about 240


@dataclass
class EchoingUpstream(ScriptedUpstream):
    """Round 1 calls the counter's ``echo``; the round that carries its output answers."""

    echoed: int = ECHOED

    def answer(self, body: JsonObject) -> list[JsonObject]:
        if any(item.get("type") == "function_call_output" for item in body["input"]):
            return [message("echoed")]
        arguments = json.dumps({"message": many(self.echoed, "echo")})
        return [function_call("mcp__counter__echo", arguments, call_id="call_echo")]


def history() -> list[Any]:
    return [
        {"role": "developer", "content": "Be brief."},
        {"role": "user", "content": many(100, "old")},
        {"role": "assistant", "content": many(60, "noted")},
        {"role": "user", "content": "Echo something long."},
    ]


@dataclass
class Gateway:
    client: openai.OpenAI
    server: EchoingUpstream
    log: TokenizerLog


@pytest.fixture
def gateway(request: pytest.FixtureRequest, counter_url: str) -> Iterator[Gateway]:
    """``request.param``: (max_model_len listed, context_window configured, words echoed)."""
    listed, configured, echoed = request.param
    server = EchoingUpstream(echoed=echoed)
    log = TokenizerLog()
    app = tokenizing_app(server, log, max_model_len=listed, tokenize=True)
    with serve_in_thread(app) as url:
        settings = Settings(
            upstream_url=url, upstream_context_window=configured, egress=local_egress()
        )
        with in_process(create_app(settings)) as http:
            yield Gateway(openai_client(http), server, log)


def _tools(counter_url: str) -> Any:
    return [
        {
            "type": "mcp",
            "server_label": "counter",
            "server_url": counter_url,
            "allowed_tools": ["echo"],
            "require_approval": "never",
        }
    ]


def _tags(body: JsonObject) -> list[str]:
    return [str(item.get("role") or item.get("type")) for item in body["input"]]


# Round 1 (history, tools) counts about 240 words, round 2 about 460: without the old user
# message about 360, without its answer too about 300.
@pytest.mark.parametrize("gateway", [(340, None, ECHOED)], indirect=True)
@pytest.mark.parametrize("stream", [False, True])
def test_auto_drops_old_history_before_a_later_round_never_the_turn(
    gateway: Gateway, counter_url: str, stream: bool
) -> None:
    fields: Any = {"input": history(), "tools": _tools(counter_url), "truncation": "auto"}
    if stream:
        with gateway.client.responses.stream(model=MODEL, **fields) as events:
            response = events.get_final_response()
    else:
        response = gateway.client.responses.create(model=MODEL, **fields)

    assert response.status == "completed", response.error
    assert [item.type for item in response.output] == ["mcp_list_tools", "mcp_call", "message"]
    first, second = gateway.server.requests
    assert _tags(first) == ["developer", "user", "assistant", "user"]  # round 1 fit
    # Round 2: the old user message and its answer went; the developer message, the turn's
    # user message, the call and its output stayed.
    assert _tags(second) == ["developer", "user", "function_call", "function_call_output"]
    assert second["input"][1]["content"][0]["text"] == "Echo something long."
    # Counted: round 2 whole (too long), then cuts (binary search), each in its chat form.
    assert any(scripted_count(body) <= 340 for body in gateway.log.tokenized)
    # The stored response keeps everything it was asked with.
    stored = gateway.client.responses.input_items.list(response.id)
    assert len(stored.data) == 4


@pytest.mark.parametrize("gateway", [(None, 400, ECHOED)], indirect=True)
@pytest.mark.parametrize("stream", [False, True])
def test_disabled_fails_the_response_when_a_later_round_outgrows_the_window(
    gateway: Gateway, counter_url: str, stream: bool
) -> None:
    fields: Any = {"input": history(), "tools": _tools(counter_url)}
    if stream:
        events = list(gateway.client.responses.create(model=MODEL, stream=True, **fields))
        kinds = [event.type for event in events]
        assert kinds[-2:] == ["error", "response.failed"]
        assert events[-2].code == "context_length_exceeded"
        response: Any = events[-1].response
    else:
        response = gateway.client.responses.create(model=MODEL, **fields)

    assert response.status == "failed"
    # Response.error.code takes OpenAI's few codes (the stream's error event names it).
    assert response.error.code == "server_error"
    assert "exceeds the context window" in response.error.message
    assert len(gateway.server.requests) == 1  # round 2 never went upstream
    assert [item.type for item in response.output][:2] == ["mcp_list_tools", "mcp_call"]
    assert response.output[1].status == "completed"  # the call ran; its output is kept


@pytest.mark.parametrize("gateway", [(400, None, 200)], indirect=True)
def test_auto_fails_when_the_turn_alone_outgrows_the_window(
    gateway: Gateway, counter_url: str
) -> None:
    response = gateway.client.responses.create(
        model=MODEL, input=history(), tools=_tools(counter_url), truncation="auto"
    )
    assert response.status == "failed"
    assert response.error is not None
    assert "exceeds the context window" in response.error.message
    assert len(gateway.server.requests) == 1


@pytest.mark.parametrize("gateway", [(340, None, ECHOED)], indirect=True)
def test_without_truncation_or_a_configured_window_no_round_is_counted(
    gateway: Gateway, counter_url: str
) -> None:
    """The hot path: ``"disabled"`` (the default) with no configured window checks nothing,
    in any round (the upstream would refuse an input too long for it)."""
    response = gateway.client.responses.create(
        model=MODEL, input=history(), tools=_tools(counter_url)
    )
    assert response.status == "completed"
    assert len(gateway.server.requests) == 2
    assert gateway.log.tokenized == [] and gateway.log.model_lists == 0
