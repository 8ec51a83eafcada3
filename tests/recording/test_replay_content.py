"""Content matching: the quick-start cassette answers a prompt as often as asked, in the form
asked (converting when only one form was recorded), and names what it knows otherwise."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import openai
import pytest
from openai.types.responses import Response
from starlette.testclient import TestClient

from app.recording.cassette import QUICKSTART_CASSETTE, Cassette, load_cassette
from app.recording.convert import final_response
from app.recording.replay import create_replay_app

PROMPT = "Reply with exactly one word: HELLO"
MODEL = "openai/gpt-oss-20b"


def quickstart(forms: tuple[str, ...] = ("json", "sse")) -> Cassette:
    """The quick-start cassette, keeping only its JSON (t1) and/or its streamed (t2) turn."""
    cassette = load_cassette(QUICKSTART_CASSETTE)
    cassette.turns = [
        t for t in cassette.turns if ("sse" if t.response.is_sse else "json") in forms
    ]
    return cassette


@contextmanager
def sdk(cassette: Cassette) -> Iterator[tuple[openai.OpenAI, TestClient]]:
    """The openai SDK talking to the replay app in process."""
    with TestClient(create_replay_app(cassette, match="content")) as http:
        client = openai.OpenAI(
            base_url="http://testserver/v1", api_key="none", http_client=http, max_retries=0
        )
        yield client, http


def ask_json(client: openai.OpenAI, **extra: Any) -> Response:
    return client.responses.create(model=MODEL, input=PROMPT, **extra)


def ask_stream(client: openai.OpenAI) -> tuple[list[Any], Response]:
    """The typed events of a stream, and the Response of its terminal event.

    (Not the SDK's ``responses.stream`` helper: vLLM's recorded stream lacks events that helper
    needs, such as ``content_part.added`` before its text deltas; the gateway adds them.)
    """
    with client.responses.create(model=MODEL, input=PROMPT, stream=True) as stream:
        events = list(stream)
    return events, events[-1].response


@pytest.mark.parametrize("forms", [("json", "sse"), ("json",), ("sse",)])
def test_each_form_is_answered_twice_in_a_row(forms: tuple[str, ...]) -> None:
    with sdk(quickstart(forms)) as (client, http):
        for _ in range(2):
            assert ask_json(client).output_text == "HELLO"
        for _ in range(2):
            events, final = ask_stream(client)
            assert final.output_text == "HELLO"
            assert [item.type for item in final.output] == ["reasoning", "message"]
            assert [e.sequence_number for e in events] == list(range(len(events)))
            assert events[0].type == "response.created"
            assert events[-1].type == "response.completed"
        for _ in range(2):
            assert ask_json(client).output_text == "HELLO"
        answered = [entry["turn"] for entry in http.get("/__replay/requests").json()]
    assert len(answered) == 6 and None not in answered


def test_recorded_forms_are_served_as_recorded() -> None:
    cassette = quickstart()
    json_turn, sse_turn = cassette.turns
    with sdk(cassette) as (_client, http):
        answer = http.post("/v1/responses", json={"model": MODEL, "input": PROMPT})
        assert answer.headers["x-replay-turn"] == json_turn.filename
        assert answer.json() == json_turn.response.body
        with http.stream(
            "POST", "/v1/responses", json={"model": MODEL, "input": PROMPT, "stream": True}
        ) as streamed:
            data = b"".join(streamed.iter_raw())
        assert streamed.headers["x-replay-turn"] == sse_turn.filename
        assert data == "".join(sse_turn.response.sse or []).encode()


def test_a_stream_converted_to_json_is_its_terminal_response() -> None:
    cassette = quickstart(("sse",))
    (turn,) = cassette.turns
    with sdk(cassette) as (_, http):
        answer = http.post("/v1/responses", json={"model": MODEL, "input": PROMPT})
    assert answer.status_code == 200
    assert answer.headers["content-type"] == "application/json"
    assert answer.json() == final_response(turn.response)
    assert answer.json()["status"] == "completed"


def test_json_converted_to_a_stream_ends_with_the_recorded_response() -> None:
    cassette = quickstart(("json",))
    (turn,) = cassette.turns
    with sdk(cassette) as (client, _):
        events, _ = ask_stream(client)
        with client.responses.stream(model=MODEL, input=PROMPT) as helper:
            final = helper.get_final_response()  # the SDK's accumulator follows the sequence
    types = [event.type for event in events]
    assert types[:2] == ["response.created", "response.in_progress"]
    assert events[0].response.usage is None and events[0].response.output == []
    assert types.count("response.output_item.added") == types.count("response.output_item.done")
    assert "response.reasoning_text.delta" in types
    assert "response.output_text.delta" in types
    assert events[-1].type == "response.completed"
    assert events[-1].response.to_dict(exclude_unset=True) == turn.response.body
    assert final.output_text == "HELLO"
    assert [item.type for item in final.output] == ["reasoning", "message"]


@pytest.mark.parametrize(
    "prompt",
    [
        [{"role": "user", "content": PROMPT}],
        [
            {
                "type": "message",
                "id": "msg_0123",
                "role": "user",
                "content": [{"type": "input_text", "text": PROMPT}],
            }
        ],
    ],
)
def test_the_same_prompt_in_another_shape_matches(prompt: list[dict[str, Any]]) -> None:
    with sdk(quickstart()) as (_, http):
        answer = http.post("/v1/responses", json={"model": MODEL, "input": prompt})
    assert answer.status_code == 200
    assert answer.json()["output"][-1]["content"][0]["text"] == "HELLO"


@pytest.mark.parametrize(
    ("body", "asked"),
    [
        ({"model": MODEL, "input": "What is 2+2?"}, "input 'What is 2+2?'"),
        ({"model": "gpt-4o", "input": PROMPT}, "model 'gpt-4o'"),
    ],
)
def test_an_unknown_prompt_is_a_400_naming_what_was_asked_and_what_is_known(
    body: dict[str, Any], asked: str
) -> None:
    with sdk(quickstart()) as (client, http):
        with pytest.raises(openai.BadRequestError) as raised:
            client.responses.create(**body)
        logged = http.get("/__replay/requests").json()
    error = raised.value.body
    assert isinstance(error, dict)
    assert error["code"] == "cassette_no_match"
    assert error["param"] == "input"
    assert asked in error["message"]
    assert f"It only knows: model '{MODEL}', input '{PROMPT}'." in error["message"]
    assert [entry["turn"] for entry in logged] == [None]


def test_a_path_the_cassette_never_saw_is_a_404() -> None:
    with sdk(quickstart()) as (_, http):
        answer = http.post("/v1/chat/completions", json={"model": MODEL, "messages": []})
    assert answer.status_code == 404
    assert answer.json()["error"]["code"] == "cassette_no_match"
    assert "it has POST /v1/responses" in answer.json()["error"]["message"]


def test_strict_content_mode_ignores_the_stream_flag_but_not_other_keys() -> None:
    app = create_replay_app(quickstart(("json",)), match="content", strict=True)
    recorded = {"model": MODEL, "input": PROMPT, "store": True}
    with TestClient(app) as http:
        with http.stream("POST", "/v1/responses", json={**recorded, "stream": True}) as streamed:
            assert streamed.status_code == 200
        different = http.post("/v1/responses", json={**recorded, "temperature": 0.5})
    assert different.status_code == 409
    assert "'temperature' was not recorded" in different.json()["error"]["message"]


def test_models_are_listed_and_not_consumed_in_content_mode() -> None:
    with sdk(quickstart()) as (client, http):
        assert [m.id for m in client.models.list()] == [MODEL]
        assert http.get("/__replay/requests").json() == []
