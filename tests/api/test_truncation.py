"""``truncation`` through the ``openai`` SDK over scripted upstreams with a tokenizer:
``"auto"`` drops the oldest items to fit the window the upstream lists (``max_model_len``) or
the configured one, whole call/output pairs at a time, keeping instructions and developer
messages; ``"disabled"`` answers OpenAI's 400 ``context_length_exceeded`` when a window is
configured; without a known window nothing is counted."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import openai
import pytest

from app.main import create_app
from app.protocol.json_types import JsonObject
from app.settings import Settings
from tests.api.tokenizing_upstreams import MODEL, TokenizerLog, served, tokenizing_app, words
from tests.clients.scripted_upstream import ScriptedUpstream
from tests.helpers import in_process, openai_client, serve_in_thread

# The scripted tokenizer counts words: the call's arguments are long, its output short, so
# dropping only up to the call (keeping its output) would fit, and is not allowed.
LONG_CALL_ARGS = words(150, "arg")


def long_history() -> list[Any]:
    return [
        {"type": "message", "role": "developer", "content": "Be brief."},
        {"type": "message", "role": "user", "content": words(60, "old")},
        {
            "type": "function_call",
            "call_id": "call_1",
            "name": "lookup",
            "arguments": f'{{"q": "{LONG_CALL_ARGS}"}}',
        },
        {"type": "function_call_output", "call_id": "call_1", "output": "found it"},
        {"type": "message", "role": "user", "content": "And now?"},
    ]


def sent_input(kind: str, body: JsonObject) -> list[str]:
    """What the upstream got, one tag per item/message: role or item type."""
    if kind == "responses":
        return [str(item.get("role") or item.get("type")) for item in body["input"]]
    return [str(message["role"]) for message in body["messages"]]


def _create(client: openai.OpenAI, **fields: Any) -> Any:
    return client.responses.create(model=MODEL, **fields)


@pytest.mark.parametrize("kind", ["responses", "chat"])
@pytest.mark.parametrize("stream", [False, True])
def test_auto_drops_the_oldest_items_and_whole_call_pairs(kind: str, stream: bool) -> None:
    with served(kind, max_model_len=120) as up, in_process(up.gateway) as http:
        client = openai_client(http)
        if stream:
            with client.responses.stream(
                model=MODEL,
                input=long_history(),
                instructions="You are terse.",
                truncation="auto",
            ) as events:
                response = events.get_final_response()
        else:
            response = _create(
                client, input=long_history(), instructions="You are terse.", truncation="auto"
            )
        stored = client.responses.input_items.list(response.id)

    assert response.status == "completed"
    assert response.truncation == "auto"
    (sent,) = up.inference_bodies()
    if kind == "responses":
        assert sent_input(kind, sent) == ["developer", "user"]
        assert sent["input"][1]["content"][0]["text"] == "And now?"
        assert sent["instructions"] == "You are terse."
    else:
        assert sent_input(kind, sent) == ["system", "system", "user"]
        assert sent["messages"][0]["content"] == "You are terse."
        assert sent["messages"][2]["content"] == "And now?"
    # The stored response keeps its whole input: truncation shapes what the model saw.
    assert len(stored.data) == 5
    # One model list (the window is cached per model), then whole-input and cut counts.
    assert up.log.model_lists == 1
    assert len(up.log.tokenized) >= 2


def test_auto_truncates_a_previous_response_chain_and_caches_the_window() -> None:
    with served("responses", max_model_len=150) as up, in_process(up.gateway) as http:
        client = openai_client(http)
        first = _create(client, input=words(120, "first"), truncation="auto")
        second = _create(
            client, previous_response_id=first.id, input=words(60, "second"), truncation="auto"
        )

    assert second.status == "completed"
    opening, continued = up.inference_bodies()
    assert opening["input"] == words(120, "first")  # it fit: sent as the client sent it
    # The first turn's 120 words no longer fit: the oldest item goes, its answer stays.
    texts = [item["content"][0]["text"] for item in continued["input"]]
    assert texts == ["No shell tool was offered.", words(60, "second")]
    assert up.log.model_lists == 1


@pytest.mark.parametrize("kind", ["responses", "chat"])
def test_disabled_with_a_configured_window_is_openais_400(kind: str) -> None:
    with served(kind, context_window=100) as up, in_process(up.gateway) as http:
        client = openai_client(http)
        with pytest.raises(openai.BadRequestError) as refused:
            _create(client, input=long_history())
        short = _create(client, input="Hi")

    error = refused.value.body
    assert isinstance(error, dict)
    assert error["code"] == "context_length_exceeded"
    assert error["param"] == "input"
    assert error["message"] == (
        "Your input exceeds the context window of this model. "
        "Please adjust your input and try again."
    )
    assert short.status == "completed"
    assert len(up.inference_bodies()) == 1  # the refused request never went upstream
    assert up.log.model_lists == 0  # a configured window needs no model list


def test_auto_with_nothing_that_fits_is_the_400() -> None:
    with served("responses", max_model_len=50) as up, in_process(up.gateway) as http:
        client = openai_client(http)
        with pytest.raises(openai.BadRequestError) as refused:
            _create(client, input=words(200), truncation="auto")

    assert isinstance(refused.value.body, dict)
    assert refused.value.body["code"] == "context_length_exceeded"
    assert up.inference_bodies() == []


def test_max_output_tokens_comes_off_the_window() -> None:
    with served("responses", max_model_len=150) as up, in_process(up.gateway) as http:
        client = openai_client(http)
        fits = _create(client, input=words(80), truncation="auto")
        with pytest.raises(openai.BadRequestError):
            _create(client, input=words(80), truncation="auto", max_output_tokens=100)

    assert fits.status == "completed"
    assert len(up.inference_bodies()) == 1


def test_without_a_window_nothing_is_counted() -> None:
    """``disabled`` (the default) without a configured window: no model list, no count."""
    with served("responses", max_model_len=50) as up, in_process(up.gateway) as http:
        response = _create(openai_client(http), input=words(200))

    assert response.status == "completed"
    assert up.log.model_lists == 0
    assert up.log.tokenized == []


def test_auto_with_an_unknown_window_forwards_unchecked() -> None:
    with served("chat", max_model_len=None) as up, in_process(up.gateway) as http:
        response = _create(openai_client(http), input=words(200), truncation="auto")

    assert response.status == "completed"
    assert up.log.model_lists == 1
    assert up.log.tokenized == []


def test_a_request_that_fits_by_its_size_is_not_counted() -> None:
    with served("responses", max_model_len=32768) as up, in_process(up.gateway) as http:
        response = _create(openai_client(http), input="Hello", truncation="auto")

    assert response.status == "completed"
    assert up.log.tokenized == []


def test_without_tokenize_auto_truncates_on_the_estimate() -> None:
    with (
        served("chat", max_model_len=120, tokenize=False) as up,
        in_process(up.gateway) as http,
    ):
        response = _create(openai_client(http), input=long_history(), truncation="auto")

    assert response.status == "completed"
    (sent,) = up.inference_bodies()
    assert sent_input("chat", sent) == ["system", "user"]


def test_the_window_configured_in_the_settings_reaches_the_upstream(tmp_path: Path) -> None:
    """``upstream_context_window`` (``[[upstreams]] context_window``) is the window the gateway
    it builds checks against: ``disabled`` refuses a longer input before it goes upstream."""
    server = ScriptedUpstream()
    log = TokenizerLog()
    app = tokenizing_app(server, log, max_model_len=None, tokenize=True)
    with serve_in_thread(app) as url:
        settings = Settings(upstream_url=url, upstream_context_window=100, data_dir=tmp_path)
        with in_process(create_app(settings)) as http:
            client = openai_client(http)
            with pytest.raises(openai.BadRequestError) as refused:
                _create(client, input=long_history())
            short = _create(client, input="Hi")
    assert isinstance(refused.value.body, dict)
    assert refused.value.body["code"] == "context_length_exceeded"
    assert short.status == "completed"
    assert log.model_lists == 0
