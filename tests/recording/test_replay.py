from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest

from app.recording.cassette import (
    Cassette,
    RecordedRequest,
    RecordedResponse,
    Turn,
    load_cassette,
    sse_data_events,
)
from app.recording.replay import create_replay_app, first_difference
from tests.helpers import serve_in_thread
from tests.recordings import fixture

STREAMING = "text_only/responses/resp-single-gpt-4o-streaming.yaml"
TWO_TURN = "text_only/responses/resp-two-turn-gpt-4o-nonstreaming.yaml"
CONVERSATION = "text_only/conversation/conv-two-turn-gpt-4o-nonstreaming.yaml"


def _sse_bytes(turn: Turn) -> bytes:
    assert turn.response.sse is not None
    return "".join(turn.response.sse).encode("utf-8")


def _stream(client: httpx.Client, body: Any) -> tuple[httpx.Response, bytes]:
    with client.stream("POST", "/v1/responses", json=body) as response:
        data = b"".join(response.iter_raw())
    return response, data


def test_streaming_cassette_replays_exact_sse_bytes() -> None:
    cassette = load_cassette(fixture(STREAMING))
    (turn,) = cassette.turns
    with serve_in_thread(create_replay_app(cassette)) as base, httpx.Client(base_url=base) as c:
        response, data = _stream(c, turn.request.body)
        assert response.status_code == 200
        assert response.headers["content-type"] == "text/event-stream; charset=utf-8"
        assert "content-length" not in response.headers, "streamed, not buffered"
        assert response.headers["x-replay-turn"] == "t1"
        assert data == _sse_bytes(turn)

        received = c.get("/__replay/requests").json()
        assert len(received) == 1
        assert received[0]["method"] == "POST"
        assert received[0]["path"] == "/v1/responses"
        assert received[0]["body"] == turn.request.body
        assert received[0]["turn"] == "t1"
        assert received[0]["headers"]["content-type"] == "application/json"


def test_openai_sdk_consumes_replayed_stream() -> None:
    cassette = load_cassette(fixture(STREAMING))
    body = cassette.turns[0].request.body
    assert isinstance(body, dict)
    with serve_in_thread(create_replay_app(cassette)) as base:
        client = openai.OpenAI(base_url=f"{base}/v1", api_key="sk-test", max_retries=0)
        with client.responses.stream(model=body["model"], input=body["input"]) as stream:
            final = stream.get_final_response()
        assert final.output_text == "GLOBE"
        received = httpx.get(f"{base}/__replay/requests").json()
        assert received[0]["headers"]["authorization"] == "Bearer sk-test"


def test_multi_turn_cassette_answers_turns_in_order() -> None:
    cassette = load_cassette(fixture(TWO_TURN))
    first, second = cassette.turns
    with serve_in_thread(create_replay_app(cassette)) as base, httpx.Client(base_url=base) as c:
        r1 = c.post("/v1/responses", json=first.request.body)
        r2 = c.post("/v1/responses", json=second.request.body)
        assert (r1.status_code, r2.status_code) == (200, 200)
        assert r1.json() == first.response.body
        assert r2.json() == second.response.body
        assert r1.headers["content-type"] == "application/json"

        status = c.get("/__replay/status").json()
        assert status == {
            "cursor": 2,
            "total": 2,
            "answered": 2,
            "remaining": 0,
            "remaining_turns": [],
            "received": 2,
        }

        r3 = c.post("/v1/responses", json=second.request.body)
        assert r3.status_code == 404
        error = r3.json()["error"]
        assert error["code"] == "cassette_exhausted"
        assert error["type"] == "invalid_request_error"
        assert error["param"] is None
        assert "cassette exhausted: no unanswered turn for POST /v1/responses" in error["message"]

        reset = c.post("/__replay/reset").json()
        assert reset["answered"] == 0 and reset["remaining"] == 2
        assert c.get("/__replay/requests").json() == []
        assert c.post("/v1/responses", json=first.request.body).json() == first.response.body


def test_turns_for_other_paths_are_skipped() -> None:
    cassette = load_cassette(fixture(CONVERSATION))
    paths = [(t.request.method, t.request.path) for t in cassette.turns]
    assert paths[0] == ("POST", "/v1/conversations")
    responses = [t for t in cassette.turns if t.request.path == "/v1/responses"]
    with serve_in_thread(create_replay_app(cassette)) as base, httpx.Client(base_url=base) as c:
        got = [c.post("/v1/responses", json=t.request.body).json() for t in responses]
        assert got == [t.response.body for t in responses]
        status = c.get("/__replay/status").json()
        assert status["remaining_turns"] == [
            {"index": 0, "filename": "t1", "method": "POST", "path": "/v1/conversations"}
        ]
        assert status["cursor"] == len(cassette.turns)
        # The skipped turn is still answerable.
        conv = c.post("/v1/conversations", json=cassette.turns[0].request.body)
        assert conv.json() == cassette.turns[0].response.body


def test_recorded_error_status_is_replayed() -> None:
    cassette = load_cassette(fixture("conversations/conversations-edge-cases-gateway.yaml"))
    with serve_in_thread(create_replay_app(cassette)) as base, httpx.Client(base_url=base) as c:
        codes = [
            c.request(
                t.request.method,
                t.request.path,
                params=t.request.query_params,
                json=t.request.body if t.request.method == "POST" else None,
            ).status_code
            for t in cassette.turns
        ]
    assert codes == [t.response.status_code for t in cassette.turns]
    assert {400, 404} <= set(codes)


def test_health_and_synthesized_models() -> None:
    cassette = load_cassette(fixture("sglang/sglang-stateful-Qwen-Qwen3-8B-nonstreaming.yaml"))
    with serve_in_thread(create_replay_app(cassette)) as base, httpx.Client(base_url=base) as c:
        assert c.get("/health").json() == {"status": "ok"}
        models = c.get("/v1/models").json()
        assert models == {
            "object": "list",
            "data": [
                {
                    "id": "Qwen/Qwen3-8B",
                    "object": "model",
                    "created": 0,
                    "owned_by": "respgate-replay",
                }
            ],
        }
        # Neither consumed turns nor were logged as upstream requests.
        assert c.get("/__replay/requests").json() == []
        assert c.get("/__replay/status").json()["answered"] == 0


def test_recorded_models_turn_is_served_repeatedly() -> None:
    listing = {"object": "list", "data": [{"id": "recorded-model", "object": "model"}]}
    cassette = Cassette(
        turns=[
            Turn(
                filename="t1",
                request=RecordedRequest(method="GET", path="/v1/models"),
                response=RecordedResponse(body=listing),
            )
        ]
    )
    with serve_in_thread(create_replay_app(cassette)) as base, httpx.Client(base_url=base) as c:
        assert c.get("/v1/models").json() == listing
        assert c.get("/__replay/status").json()["remaining"] == 0
        # Listing models is idempotent: the recorded answer keeps being served, unlogged.
        assert c.get("/v1/models").json() == listing
        (entry,) = c.get("/__replay/requests").json()
        assert (entry["method"], entry["path"], entry["turn"]) == ("GET", "/v1/models", "t1")


def test_event_fixture_replays_as_valid_sse_stream() -> None:
    cassette = load_cassette(fixture("events/function-call-vllm-gemma4.yaml"))
    (turn,) = cassette.turns
    with serve_in_thread(create_replay_app(cassette)) as base, httpx.Client(base_url=base) as c:
        response, data = _stream(c, turn.request.body)
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/event-stream")
    assert data == _sse_bytes(turn)
    # Parse the stream as an SSE client would: events separated by blank lines.
    blocks = [b for b in data.decode().split("\n\n") if b.strip()]
    events = []
    for block in blocks:
        (line,) = block.split("\n")
        assert line.startswith("data: ")
        events.append(json.loads(line[len("data: ") :]))
    assert events == sse_data_events(turn)
    assert events[0]["type"] == "response.created"
    assert any(e["type"] == "response.function_call_arguments.done" for e in events) or any(
        e.get("item", {}).get("type") == "function_call" for e in events
    )


def test_strict_mode_rejects_a_different_body() -> None:
    cassette = load_cassette(fixture(TWO_TURN))
    first = cassette.turns[0]
    assert isinstance(first.request.body, dict)
    app = create_replay_app(cassette, strict=True)
    with serve_in_thread(app) as base, httpx.Client(base_url=base) as c:
        changed = {**first.request.body, "input": "something else"}
        r = c.post("/v1/responses", json=changed)
        assert r.status_code == 409
        error = r.json()["error"]
        assert error["code"] == "cassette_mismatch"
        assert error["param"] is None
        assert "'input' differs" in error["message"]
        assert "t1" in error["message"]
        # The turn was not consumed: the right body still gets it.
        ok = c.post("/v1/responses", json=first.request.body)
        assert ok.status_code == 200
        assert ok.json() == first.response.body


def test_non_strict_mode_accepts_a_different_body() -> None:
    cassette = load_cassette(fixture(TWO_TURN))
    with serve_in_thread(create_replay_app(cassette)) as base, httpx.Client(base_url=base) as c:
        r = c.post("/v1/responses", json={"model": "other", "input": "x"})
        assert r.status_code == 200
        assert r.json() == cassette.turns[0].response.body


def test_query_params_and_get_bodies_are_logged(tmp_path: Path) -> None:
    cassette = load_cassette(fixture("conversations/conversations-edge-cases-gateway.yaml"))
    turn = next(t for t in cassette.turns if t.request.query_params)
    app = create_replay_app(cassette, strict=True)
    with serve_in_thread(app) as base, httpx.Client(base_url=base) as c:
        r = c.request(turn.request.method, turn.request.path, params=turn.request.query_params)
        assert r.status_code == turn.response.status_code
        (entry,) = c.get("/__replay/requests").json()
        assert entry["query_params"] == turn.request.query_params
        assert entry["body"] is None


@pytest.mark.parametrize(
    ("recorded", "received", "expected"),
    [
        ({"a": 1}, {"a": 1.0}, None),
        ({"a": True}, {"a": 1}, "'a' differs"),
        ({"a": {"b": [1, 2]}}, {"a": {"b": [1, 3]}}, "'a.b[1]' differs"),
        ({"a": [1]}, {"a": [1, 2]}, "'a' has 2 items, recorded 1"),
        ({"a": 1, "b": 2}, {"a": 1}, "'b' is missing"),
        ({"a": 1}, {"a": 1, "z": 0}, "'z' was not recorded"),
    ],
)
def test_first_difference(recorded: Any, received: Any, expected: str | None) -> None:
    diff = first_difference(recorded, received)
    if expected is None:
        assert diff is None
    else:
        assert diff is not None and expected in diff
