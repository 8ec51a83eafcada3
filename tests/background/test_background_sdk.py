"""Background mode through the ``openai`` SDK with every answer checked strictly, on SQLite and
on a real PostgreSQL (issue 16's "tests with real parts"):

- every poll of a background response, from ``queued`` through ``in_progress`` to its end, and
  every answer of create and cancel, validates as the SDK's ``Response`` model
  (``Response.model_validate``: strict, where the SDK's own parsing is lenient), and every
  event of a resumed stream as a ``ResponseStreamEvent``;
- a background stream resumed after a real client disconnect (a TCP connection to a gateway
  on a socket, closed mid-stream): the events after N, then the live ones, one numbering;
- a tool loop with approvals in background: the ``mcp_approval_request`` ends the background
  turn (``completed``, the call not run), and the approval, sent in background too, runs the
  call on the real MCP counter server and finishes the turn.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import AsyncIterator, Mapping
from typing import Any

import httpx
import openai
import pytest
from openai.types.responses import Response, ResponseStreamEvent
from pydantic import TypeAdapter
from starlette.testclient import TestClient

from app.main import create_app
from app.protocol.json_types import JsonObject
from tests.background.test_background_api import (
    POLL_DEADLINE,
    GatedUpstream,
    database_url,
    settings_for,
)
from tests.fakes import ListEventStream, ScriptedUpstream, function_call, message
from tests.helpers import in_process, openai_client, serve_in_thread

__all__ = ["database_url"]  # the fixture, parametrized on SQLite and PostgreSQL

STREAM_EVENT: TypeAdapter[Any] = TypeAdapter(ResponseStreamEvent)


class MidStreamGate:
    """An upstream event stream that stops after its first ``head`` events until ``gate`` (a
    thread event the test opens) is set: the response is seen ``in_progress`` meanwhile."""

    def __init__(self, inner: ListEventStream, gate: threading.Event, head: int = 3) -> None:
        self._inner, self._gate, self._head = inner, gate, head

    def __aiter__(self) -> AsyncIterator[JsonObject]:
        return self._iter()

    async def _iter(self) -> AsyncIterator[JsonObject]:
        count = 0
        async for event in self._inner:
            if count == self._head:
                while not self._gate.is_set():  # noqa: ASYNC110 (a thread event)
                    await asyncio.sleep(0.005)
            count += 1
            yield event

    async def aclose(self) -> None:
        await self._inner.aclose()


class MidStreamGatedUpstream(ScriptedUpstream):
    def __init__(self, rounds: list[list[JsonObject]]) -> None:
        super().__init__(rounds)
        self.gate = threading.Event()

    async def stream_response(  # type: ignore[override]
        self, body: JsonObject, headers: Mapping[str, str]
    ) -> MidStreamGate:
        return MidStreamGate(await super().stream_response(body, headers), self.gate)


def valid(body: Any) -> Response:
    """``body`` (a Response's JSON) as the SDK's model validates it, strictly."""
    return Response.model_validate(body)


def poll_until(http: TestClient, response_id: str, statuses: set[str]) -> list[Response]:
    """Every poll of ``GET /v1/responses/{id}`` until a status of ``statuses``, validated."""
    polls: list[Response] = []
    deadline = time.monotonic() + POLL_DEADLINE
    while True:
        answer = http.get(f"/v1/responses/{response_id}")
        assert answer.status_code == 200, answer.text
        polls.append(valid(answer.json()))
        if polls[-1].status in statuses or time.monotonic() > deadline:
            return polls
        time.sleep(0.005)


def replayed(http: TestClient, response_id: str, starting_after: int) -> list[Any]:
    """``GET ...?stream=true&starting_after=N`` (through the SDK), every event validated."""
    client = openai_client(http)
    with client.responses.retrieve(
        response_id, stream=True, starting_after=starting_after
    ) as stream:
        return [STREAM_EVENT.validate_python(event.model_dump()) for event in stream]


def test_every_poll_from_queued_to_completed_is_a_valid_response(database_url: str) -> None:
    upstream = MidStreamGatedUpstream([[message("done at last")]])
    with in_process(create_app(settings_for(database_url), upstream=upstream)) as http:
        created = http.post("/v1/responses", json={"model": "m", "input": "hi", "background": True})
        queued = valid(created.json())
        assert queued.status == "queued" and queued.background is True
        waiting = poll_until(http, queued.id, {"in_progress"})  # its text has begun
        assert waiting[-1].status == "in_progress"
        upstream.gate.set()
        polls = [*waiting, *poll_until(http, queued.id, {"completed", "failed"})]

        statuses = [str(poll.status) for poll in polls]
        assert statuses[-1] == "completed", polls[-1].error
        assert "in_progress" in statuses
        assert set(statuses) <= {"queued", "in_progress", "completed"}
        order = ["queued", "in_progress", "completed"]
        assert statuses == sorted(statuses, key=order.index)  # never back
        assert all(poll.id == queued.id and poll.background is True for poll in polls)
        assert polls[-1].output_text == "done at last"
        events = replayed(http, queued.id, -1)
        assert events[0].type == "response.created" and events[-1].type == "response.completed"
        assert events[-1].response == polls[-1]


def test_every_answer_of_a_cancelled_background_response_is_valid(database_url: str) -> None:
    upstream = GatedUpstream([[message("never")]])
    with in_process(create_app(settings_for(database_url), upstream=upstream)) as http:
        body = {"model": "m", "input": "slow", "background": True}
        queued = valid(http.post("/v1/responses", json=body).json())
        assert upstream.started.wait(POLL_DEADLINE)
        cancelled = valid(http.post(f"/v1/responses/{queued.id}/cancel").json())
        assert cancelled.status == "cancelled"
        [polled] = poll_until(http, queued.id, {"cancelled"})
        assert polled.status == "cancelled" and polled.output == []
        again = valid(http.post(f"/v1/responses/{queued.id}/cancel").json())
        assert again == polled
        events = replayed(http, queued.id, -1)
        assert events[-1].response.status == "cancelled"
        upstream.gate.set()


def test_a_stream_resumes_after_a_real_client_disconnect(database_url: str) -> None:
    upstream = GatedUpstream([[message("one two three four five six")]])
    app = create_app(settings_for(database_url), upstream=upstream)
    with serve_in_thread(app) as url:
        client = openai.OpenAI(base_url=f"{url}/v1", api_key="sk-test", max_retries=0)
        stream = client.responses.create(model="m", input="hi", background=True, stream=True)
        first = next(iter(stream))
        assert first.type == "response.created" and first.response.status == "queued"
        response_id = first.response.id
        stream.close()  # the TCP connection goes; the work does not
        upstream.gate.set()
        deadline = time.monotonic() + POLL_DEADLINE
        while client.responses.retrieve(response_id).status != "completed":
            assert time.monotonic() < deadline
            time.sleep(0.01)
        final = valid(httpx.get(f"{url}/v1/responses/{response_id}").json())
        with client.responses.retrieve(response_id, stream=True, starting_after=0) as again:
            events = [STREAM_EVENT.validate_python(e.model_dump()) for e in again]
        client.close()
    numbers = [event.sequence_number for event in events]
    assert numbers == list(range(1, len(events) + 1))
    assert events[-1].type == "response.completed" and events[-1].response == final
    deltas = [e.delta for e in events if e.type == "response.output_text.delta"]
    assert "".join(deltas) == final.output_text == "one two three four five six"


def _counter_tool(counter_url: str) -> Any:
    return {"type": "mcp", "server_label": "counter", "server_url": counter_url}


@pytest.mark.parametrize("streamed", [False, True])
def test_an_approval_request_ends_the_background_turn_and_the_approval_runs_it(
    database_url: str, counter_url: str, streamed: bool
) -> None:
    upstream = ScriptedUpstream(
        [[function_call("mcp__counter__sum", '{"a": 20, "b": 22}')], [message("42")]]
    )
    tools = [_counter_tool(counter_url)]  # require_approval: "always" by default
    with in_process(create_app(settings_for(database_url), upstream=upstream)) as http:
        client = openai_client(http)
        if streamed:
            with client.responses.create(
                model="m", input="20+22?", tools=tools, background=True, stream=True
            ) as stream:
                first_id = next(iter(stream)).response.id  # type: ignore[union-attr]
        else:
            first_id = client.responses.create(
                model="m", input="20+22?", tools=tools, background=True
            ).id
        polls = poll_until(http, first_id, {"completed", "failed", "incomplete"})
        first = polls[-1]
        assert first.status == "completed", first.error
        assert [item.type for item in first.output] == ["mcp_list_tools", "mcp_approval_request"]
        request: Any = first.output[1]
        assert request.name == "sum" and request.server_label == "counter"
        assert len(upstream.requests) == 1  # the turn ended at the approval request
        events = replayed(http, first_id, -1)
        kinds = [event.type for event in events]
        assert not [kind for kind in kinds if kind.startswith("response.mcp_call")]
        assert kinds[-1] == "response.completed"

        approval: Any = {
            "type": "mcp_approval_response",
            "approval_request_id": request.id,
            "approve": True,
        }
        second_id = client.responses.create(
            model="m",
            input=[approval],
            tools=tools,
            previous_response_id=first_id,
            background=True,
        ).id
        second = poll_until(http, second_id, {"completed", "failed", "incomplete"})[-1]
        assert second.status == "completed", second.error
        assert [item.type for item in second.output] == ["mcp_call", "message"]
        call: Any = second.output[0]
        assert call.output == "42" and call.approval_request_id == request.id
        assert second.output_text == "42"
        events = replayed(http, second_id, -1)
        assert "response.mcp_call.completed" in [event.type for event in events]
        assert events[-1].response == second


def test_automatic_compaction_in_background(database_url: str) -> None:
    """``context_management`` over its threshold in background: the summary round, then the
    turn; the compaction item opens the stored output, and continuing from it works."""
    upstream = ScriptedUpstream([[message("SUMMARY: Ada, PELICAN.")], [message("Hi Ada.")]])
    managed: Any = [{"type": "compaction", "compact_threshold": 5}]
    history: Any = [
        {"role": "user", "content": "My name is Ada and the codeword is PELICAN."},
        {"role": "assistant", "content": "Noted, Ada: the codeword is PELICAN."},
        {"role": "user", "content": "Say hello."},
    ]
    with in_process(create_app(settings_for(database_url), upstream=upstream)) as http:
        client = openai_client(http)
        queued = client.responses.create(
            model="m", input=history, context_management=managed, background=True
        )
        final = poll_until(http, queued.id, {"completed", "failed"})[-1]
        assert final.status == "completed", final.error
        assert [item.type for item in final.output] == ["compaction", "message"]
        assert final.output_text == "Hi Ada."
        events = replayed(http, queued.id, -1)
        assert "response.compaction.compacting" in [event.type for event in events]
        summary_round, turn = upstream.requests
        assert "You compact a conversation" in str(summary_round["instructions"])
        assert "SUMMARY: Ada, PELICAN." in str(turn["input"])
        assert "Noted, Ada" not in str(turn["input"])  # the old answer went into the summary
        upstream.rounds.append([message("Bye.")])
        after = client.responses.create(model="m", input="Bye?", previous_response_id=final.id)
        assert after.output_text == "Bye." and "Noted, Ada" not in str(upstream.requests[-1])
