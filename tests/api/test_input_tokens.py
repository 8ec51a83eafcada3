"""``POST /v1/responses/input_tokens`` through the ``openai`` SDK
(``client.responses.input_tokens.count``): the upstream's ``/tokenize`` counts exactly (the
instructions, the history of ``previous_response_id``, the tools), an upstream without it gets
an estimate that says so, and a request without ``model`` is OpenAI's 400."""

from __future__ import annotations

import httpx
import openai
import pytest

from tests.api.tokenizing_upstreams import MODEL, scripted_count, served
from tests.helpers import in_process, openai_client

WEATHER_TOOL = {
    "type": "function",
    "name": "get_weather",
    "description": "The weather in a city.",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
}


@pytest.mark.parametrize("kind", ["responses", "chat"])
def test_the_upstream_tokenizer_counts_instructions_input_and_tools(kind: str) -> None:
    with served(kind, max_model_len=4096) as up, in_process(up.gateway) as http:
        client = openai_client(http)
        counted = client.responses.input_tokens.count(
            model=MODEL,
            instructions="Answer in one word.",
            input="What is the weather in Paris?",
            tools=[WEATHER_TOOL],  # type: ignore[list-item]
        )
        raw = http.post("/v1/responses/input_tokens", json={"model": MODEL, "input": "Hello there"})

    assert counted.object == "response.input_tokens"
    first, second = up.log.tokenized
    assert counted.input_tokens == scripted_count(first)
    assert first["model"] == MODEL
    assert first["add_generation_prompt"] is True
    assert first["messages"] == [
        {"role": "system", "content": "Answer in one word."},
        {"role": "user", "content": "What is the weather in Paris?"},
    ]
    assert [tool["function"]["name"] for tool in first["tools"]] == ["get_weather"]
    assert raw.headers["respgate-token-count"] == "exact"
    assert raw.json() == {"object": "response.input_tokens", "input_tokens": scripted_count(second)}
    assert up.inference_bodies() == []  # counting runs no inference


def test_previous_response_history_is_counted() -> None:
    with served("responses") as up, in_process(up.gateway) as http:
        client = openai_client(http)
        first = client.responses.create(model=MODEL, input="Remember the word zebra.")
        counted = client.responses.input_tokens.count(
            model=MODEL, previous_response_id=first.id, input="Which word?"
        )

    (tokenized,) = up.log.tokenized
    assert counted.input_tokens == scripted_count(tokenized)
    assert [message["role"] for message in tokenized["messages"]] == ["user", "assistant", "user"]
    assert tokenized["messages"][0]["content"] == "Remember the word zebra."
    assert tokenized["messages"][2]["content"] == "Which word?"


def test_conversation_items_are_counted() -> None:
    with served("chat") as up, in_process(up.gateway) as http:
        client = openai_client(http)
        conversation = client.conversations.create(
            items=[{"type": "message", "role": "user", "content": "My name is Ada."}]
        )
        client.responses.input_tokens.count(
            model=MODEL, conversation=conversation.id, input="What is my name?"
        )

    (tokenized,) = up.log.tokenized
    contents = [message["content"] for message in tokenized["messages"]]
    assert contents == ["My name is Ada.", "What is my name?"]


@pytest.mark.parametrize("kind", ["responses", "chat"])
def test_without_tokenize_the_count_is_an_estimate_that_says_so(kind: str) -> None:
    with served(kind, tokenize=False) as up, in_process(up.gateway) as http:
        client = openai_client(http)
        raw = client.responses.input_tokens.with_raw_response.count(
            model=MODEL, input="A short question about the weather?"
        )
        again = http.post("/v1/responses/input_tokens", json={"model": MODEL, "input": "Hi"})

    counted = raw.parse()
    assert counted.object == "response.input_tokens"
    assert 5 <= counted.input_tokens <= 20
    assert raw.headers["respgate-token-count"] == "estimate"
    assert httpx.Response(200, content=raw.content).json()["estimated"] is True
    assert again.json()["estimated"] is True
    assert up.log.tokenized == []


def test_an_openai_like_upstream_counts_with_its_own_input_tokens() -> None:
    """No ``/tokenize`` (OpenAI has none), but ``/v1/responses/input_tokens``: forwarded, exact,
    with the rehydrated input and without the state fields."""
    with (
        served("responses", tokenize=False, native_count=True) as up,
        in_process(up.gateway) as http,
    ):
        client = openai_client(http)
        first = client.responses.create(model=MODEL, input="Remember zebra.")
        raw = client.responses.input_tokens.with_raw_response.count(
            model=MODEL,
            previous_response_id=first.id,
            input="Which word?",
            instructions="Be brief.",
            tools=[WEATHER_TOOL],  # type: ignore[list-item]
        )

    (forwarded,) = up.log.natively_counted
    assert raw.headers["respgate-token-count"] == "exact"
    assert raw.parse().input_tokens == scripted_count(
        {"messages": forwarded["input"], "tools": forwarded["tools"]}
    )
    assert set(forwarded) == {"model", "input", "instructions", "tools"}
    texts = [item["content"][0]["text"] for item in forwarded["input"]]
    assert texts == ["Remember zebra.", "No shell tool was offered.", "Which word?"]
    assert up.log.tokenized == []


def test_a_missing_model_is_openais_400() -> None:
    with served("responses") as up, in_process(up.gateway) as http:
        client = openai_client(http)
        with pytest.raises(openai.BadRequestError) as refused:
            client.responses.input_tokens.count(input="Hello")

    assert refused.value.status_code == 400
    error = refused.value.body
    assert isinstance(error, dict)
    assert error["type"] == "invalid_request_error"
    assert error["param"] == "model"
    assert up.log.tokenized == []
