"""WebSocket mode on ``/v1/responses``: one socket, many responses, the connection's memory.

Unit level through Starlette's ``TestClient.websocket_connect`` (the app in this process, a
scripted upstream and the in-memory store); the disconnect test runs the gateway under uvicorn
on a real port with the ``websockets`` client, where a closed socket is a real one.
"""

from __future__ import annotations

import asyncio
import copy
import json
import logging
import threading
from collections.abc import AsyncIterator, Iterator, Mapping
from typing import Any

import pytest
from starlette.testclient import TestClient, WebSocketTestSession
from websockets.sync.client import connect

from app.errors import UpstreamProtocolError
from app.main import create_app
from app.protocol.json_types import JsonObject
from app.settings import Settings
from tests.fakes import (
    ListEventStream,
    MemoryResponseStore,
    ScriptedUpstream,
    message,
    round_events,
)
from tests.helpers import in_process, serve_in_thread
from tests.lifecycle import assert_lifecycle

MODEL = "test-model"


class FailingUpstream(ScriptedUpstream):
    """A scripted upstream whose rounds may be ``None``: that round fails mid-stream."""

    def __init__(self, rounds: list[list[JsonObject] | None]) -> None:
        super().__init__([r for r in rounds if r is not None])
        self.plan = rounds

    async def stream_response(
        self, body: JsonObject, headers: Mapping[str, str]
    ) -> ListEventStream:
        if self.plan and self.plan[0] is None:
            self.plan.pop(0)
            self.requests.append(copy.deepcopy(body))
            failure = UpstreamProtocolError("the upstream sent garbage")
            stream = ListEventStream(round_events([])[:1], fail_after=failure)
            self.streams.append(stream)
            return stream
        if self.plan:
            self.plan.pop(0)
        return await super().stream_response(body, headers)


def user(text: str) -> JsonObject:
    return {"type": "message", "role": "user", "content": text}


def turn(ws: WebSocketTestSession, **body: Any) -> list[JsonObject]:
    """Send one ``response.create``; the events up to its terminal one (or its ``error``)."""
    ws.send_text(json.dumps({"type": "response.create", "model": MODEL, **body}))
    events: list[JsonObject] = []
    while True:
        event: JsonObject = json.loads(ws.receive_text())
        events.append(event)
        if event["type"] in ("response.completed", "response.incomplete", "response.failed"):
            return events
        if event["type"] == "error" and "status" in event:
            return events  # a refusal: no response started


def completed(ws: WebSocketTestSession, **body: Any) -> JsonObject:
    events = turn(ws, **body)
    response = assert_lifecycle(events)
    assert response["status"] == "completed", events[-1]
    return response


def texts(items: list[JsonObject]) -> list[str]:
    """The text of each message item, in order (user strings and output parts alike)."""
    out: list[str] = []
    for item in items:
        content = item.get("content")
        if isinstance(content, str):
            out.append(content)
        elif isinstance(content, list):
            out.extend(str(part.get("text")) for part in content)
    return out


@pytest.fixture
def store() -> MemoryResponseStore:
    return MemoryResponseStore()


def gateway(upstream: ScriptedUpstream, store: MemoryResponseStore) -> Any:
    return in_process(create_app(Settings(), upstream=upstream, store=store))


def test_several_responses_in_sequence_on_one_socket(store: MemoryResponseStore) -> None:
    upstream = ScriptedUpstream(
        [[message("one")], [message("two")], [message("three")], [message("sse")]]
    )
    with gateway(upstream, store) as http, http.websocket_connect("/v1/responses") as ws:
        answers = [completed(ws, input=f"q{n}", stream=True) for n in range(3)]
        sse = http.post(
            "/v1/responses", json={"model": MODEL, "input": "q", "stream": True}
        )  # the same script over SSE: the same event types
    assert [texts(a["output"]) for a in answers] == [["one"], ["two"], ["three"]]
    assert len({a["id"] for a in answers}) == 3
    assert all(store.responses.get(a["id"]) for a in answers)  # store defaults to true
    assert [r["input"] for r in upstream.requests] == ["q0", "q1", "q2", "q"]
    assert sse.status_code == 200


def test_frames_are_the_sse_data(store: MemoryResponseStore) -> None:
    script = [[message("same")], [message("same")]]
    upstream = ScriptedUpstream(copy.deepcopy(script))
    with gateway(upstream, store) as http:
        with http.websocket_connect("/v1/responses") as ws:
            ws_events = turn(ws, input="hi")
        with http.stream(
            "POST", "/v1/responses", json={"model": MODEL, "input": "hi", "stream": True}
        ) as reply:
            data = [
                json.loads(line[6:]) for line in reply.iter_lines() if line.startswith("data: {")
            ]
    assert [e["type"] for e in ws_events] == [e["type"] for e in data]
    assert [e["sequence_number"] for e in ws_events] == list(range(len(ws_events)))
    assert set(ws_events[-1]["response"]) == set(data[-1]["response"])


def test_store_false_continues_from_the_connection(store: MemoryResponseStore) -> None:
    upstream = ScriptedUpstream([[message("a1")], [message("a2")], [message("a3")]])
    with gateway(upstream, store) as http:
        with http.websocket_connect("/v1/responses") as ws:
            first = completed(ws, input="q1", store=False)
            second = completed(
                ws, input=[user("q2")], previous_response_id=first["id"], store=False
            )
            third = completed(
                ws, input=[user("q3")], previous_response_id=second["id"], store=False
            )
        assert http.get(f"/v1/responses/{third['id']}").status_code == 404
        # A reconnect recovers only what was stored: nothing here.
        with http.websocket_connect("/v1/responses") as ws:
            refused = turn(ws, input="q4", previous_response_id=third["id"], store=False)
    assert texts(upstream.requests[2]["input"]) == ["q1", "a1", "q2", "a2", "q3"]
    assert third["previous_response_id"] == second["id"]
    assert store.responses == {}
    assert refused == [
        {
            "type": "error",
            "status": 400,
            "error": {
                "type": "invalid_request_error",
                "code": "previous_response_not_found",
                "message": f"Previous response with id '{third['id']}' not found.",
                "param": "previous_response_id",
            },
        }
    ]


def test_a_stored_turn_after_unstored_ones_stores_its_whole_history(
    store: MemoryResponseStore,
) -> None:
    upstream = ScriptedUpstream([[message("a1")], [message("a2")], [message("a3")]])
    with gateway(upstream, store) as http:
        with http.websocket_connect("/v1/responses") as ws:
            first = completed(ws, input="q1", store=False)
            second = completed(ws, input="q2", previous_response_id=first["id"], store=True)
        with http.websocket_connect("/v1/responses") as ws:
            completed(ws, input="q3", previous_response_id=second["id"])
        items = http.get(f"/v1/responses/{second['id']}/input_items").json()
    assert texts(upstream.requests[2]["input"]) == ["q1", "a1", "q2", "a2", "q3"]
    assert texts(items["data"]) == ["q2"]


def test_a_chain_through_the_connection_keeps_its_root(store: MemoryResponseStore) -> None:
    # The connection's unstored turns carry the chain's first response (its tool session).
    upstream = ScriptedUpstream([[message("a1")], [message("a2")], [message("a3")]])
    with gateway(upstream, store) as http, http.websocket_connect("/v1/responses") as ws:
        first = completed(ws, input="q1", store=False)
        second = completed(ws, input="q2", previous_response_id=first["id"], store=False)
        third = completed(ws, input="q3", previous_response_id=second["id"], store=True)
    stored = store.responses[third["id"]]
    assert stored.root_id == first["id"]
    assert list(store.responses) == [third["id"]]


def test_unknown_previous_response_is_an_error_event(store: MemoryResponseStore) -> None:
    upstream = ScriptedUpstream([[message("fine")]])
    with gateway(upstream, store) as http, http.websocket_connect("/v1/responses") as ws:
        refused = turn(ws, input="x", previous_response_id="resp_nope")
        after = completed(ws, input="again")
    assert refused[0]["error"]["code"] == "previous_response_not_found"
    assert refused[0]["status"] == 400
    assert texts(after["output"]) == ["fine"]
    assert len(upstream.requests) == 1


def test_a_failed_turn_evicts_the_connection_cache(store: MemoryResponseStore) -> None:
    upstream = FailingUpstream([[message("a1")], None, [message("a3")]])
    with gateway(upstream, store) as http, http.websocket_connect("/v1/responses") as ws:
        first = completed(ws, input="q1", store=False)
        failed = turn(ws, input="q2", previous_response_id=first["id"], store=False)
        refused = turn(ws, input="q3", previous_response_id=first["id"], store=False)
        fresh = completed(ws, input="q3 again", store=False)
    assert [e["type"] for e in failed][-2:] == ["error", "response.failed"]
    assert failed[-2]["code"] == "upstream_protocol_error"
    assert refused[0]["error"]["code"] == "previous_response_not_found"
    assert texts(fresh["output"]) == ["a3"]


def test_a_refused_request_keeps_the_socket_open(
    store: MemoryResponseStore, caplog: pytest.LogCaptureFixture
) -> None:
    upstream = ScriptedUpstream([[message("still here")]])
    with (
        caplog.at_level(logging.INFO, logger="app.api.routes.responses_ws"),
        gateway(upstream, store) as http,
        http.websocket_connect("/v1/responses") as ws,
    ):
        bad_value = turn(ws, input="x", temperature="hot")
        ws.send_text("{not json")
        not_json = json.loads(ws.receive_text())
        ws.send_text(json.dumps({"type": "response.cancel"}))
        wrong_type = json.loads(ws.receive_text())
        background = turn(ws, input="x", background=True)
        answer = completed(ws, input="x")
    assert bad_value[0]["status"] == 400
    assert bad_value[0]["error"]["param"] == "temperature"
    assert set(bad_value[0]["error"]) == {"message", "type", "param", "code"}
    assert not_json["error"]["code"] == "invalid_json"
    assert wrong_type["error"]["param"] == "type"
    assert background[0]["error"]["param"] == "background"
    assert texts(answer["output"]) == ["still here"]
    assert len(upstream.requests) == 1
    lines = [r.getMessage() for r in caplog.records if r.name == "app.api.routes.responses_ws"]
    assert len(lines) == 4, lines  # one line per refusal
    assert lines[0].startswith("WS /v1/responses -> 400 invalid_request_error")
    assert "param=temperature" in lines[0]


def test_frames_sent_during_a_response_wait_their_turn(store: MemoryResponseStore) -> None:
    upstream = ScriptedUpstream([[message("first")], [message("second")]])
    with gateway(upstream, store) as http, http.websocket_connect("/v1/responses") as ws:
        for text in ("one", "two"):
            ws.send_text(json.dumps({"type": "response.create", "model": MODEL, "input": text}))
        events: list[JsonObject] = []
        while sum(e["type"] == "response.completed" for e in events) < 2:
            events.append(json.loads(ws.receive_text()))
    terminal = [e for e in events if e["type"] == "response.completed"]
    assert [texts(e["response"]["output"]) for e in terminal] == [["first"], ["second"]]
    first_done = events.index(terminal[0])
    assert assert_lifecycle(events[: first_done + 1])["status"] == "completed"
    assert assert_lifecycle(events[first_done + 1 :])["status"] == "completed"


def test_generate_false_warms_up_without_the_model(store: MemoryResponseStore) -> None:
    upstream = ScriptedUpstream([[message("answer")]])
    with gateway(upstream, store) as http, http.websocket_connect("/v1/responses") as ws:
        warm = turn(ws, instructions="be brief", input="context", store=False, generate=False)
        warmed = assert_lifecycle(warm)
        assert upstream.requests == []
        answer = completed(
            ws,
            instructions="be brief",
            input="question",
            previous_response_id=warmed["id"],
            store=False,
        )
    assert [e["type"] for e in warm] == [
        "response.created",
        "response.in_progress",
        "response.completed",
    ]
    assert warmed["output"] == []
    assert warmed["usage"]["total_tokens"] == 0
    assert texts(upstream.requests[0]["input"]) == ["context", "question"]
    assert "generate" not in upstream.requests[0]
    assert texts(answer["output"]) == ["answer"]


def test_conversations_work_over_the_socket(store: MemoryResponseStore) -> None:
    upstream = ScriptedUpstream([[message("noted")]])
    with gateway(upstream, store) as http:
        conversation = http.post("/v1/conversations", json={}).json()
        with http.websocket_connect("/v1/responses") as ws:
            completed(ws, input="remember me", conversation=conversation["id"])
        items = http.get(f"/v1/conversations/{conversation['id']}/items?order=asc").json()
    assert texts(items["data"]) == ["remember me", "noted"]


# ------------------------------------------------------------------ disconnect mid-stream


class SlowStream:
    """Opening events, then nothing for a long time; records when the gateway closes it."""

    def __init__(self) -> None:
        self.closed = threading.Event()

    def __aiter__(self) -> AsyncIterator[JsonObject]:
        return self._events()

    async def _events(self) -> AsyncIterator[JsonObject]:
        for event in round_events([message("never finished")])[:3]:
            yield event
        await asyncio.sleep(60)

    async def aclose(self) -> None:
        self.closed.set()


class SlowUpstream(ScriptedUpstream):
    def __init__(self) -> None:
        super().__init__([])
        self.slow: list[SlowStream] = []

    async def stream_response(self, body: JsonObject, headers: Mapping[str, str]) -> Any:
        self.slow.append(SlowStream())
        return self.slow[-1]


@pytest.fixture
def slow_gateway(store: MemoryResponseStore) -> Iterator[tuple[str, SlowUpstream]]:
    upstream = SlowUpstream()
    app = create_app(Settings(), upstream=upstream, store=store)
    with serve_in_thread(app) as url:
        yield url.replace("http://", "ws://"), upstream


def test_disconnect_mid_stream_closes_the_upstream_stream(
    slow_gateway: tuple[str, SlowUpstream],
) -> None:
    url, upstream = slow_gateway
    with connect(f"{url}/v1/responses") as ws:
        ws.send(json.dumps({"type": "response.create", "model": MODEL, "input": "go"}))
        first = json.loads(ws.recv(timeout=10))
        assert first["type"] == "response.created"
    assert upstream.slow[0].closed.wait(timeout=10)


def test_plain_get_is_not_a_websocket(store: MemoryResponseStore) -> None:
    with gateway(ScriptedUpstream([]), store) as http:
        assert isinstance(http, TestClient)
        reply = http.get("/v1/responses")
    assert reply.status_code == 405
    assert set(reply.json()) == {"error"}
