"""Background mode through the ``openai`` SDK, on SQLite and on a real PostgreSQL: a queued
response polled to completion, a background stream resumed after a disconnect with
``starting_after``, cancel (queued, in progress, finished, not background, unknown), a tool loop
on the real MCP counter server, and the takeover of a job whose process died."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import openai
import pytest

from app.core.jobs import BackgroundJob, LoggedEvent
from app.core.tenancy import DEFAULT_TENANT
from app.main import create_app
from app.protocol.json_types import JsonObject
from app.settings import Settings
from app.store.engine import create_engine_for
from app.store.migrate import upgrade_to_head
from app.store.sql import SqlResponseStore
from tests.fakes import ListEventStream, ScriptedUpstream, function_call, message
from tests.helpers import in_process, local_egress, openai_client
from tests.postgres import run_in_thread, throwaway_database

POLL_DEADLINE = 20.0


class GatedUpstream(ScriptedUpstream):
    """A scripted upstream whose answers wait for ``gate`` (a thread event: the test's thread
    opens it while the app runs in the client's event loop thread)."""

    def __init__(self, rounds: list[list[JsonObject]]) -> None:
        super().__init__(rounds)
        self.gate = threading.Event()
        self.started = threading.Event()
        self.closed: list[ListEventStream] = []

    async def stream_response(
        self, body: JsonObject, headers: Mapping[str, str]
    ) -> ListEventStream:
        self.started.set()
        while not self.gate.is_set():  # noqa: ASYNC110 (a thread event: set by the test)
            await asyncio.sleep(0.005)
        return await super().stream_response(body, headers)


@pytest.fixture(params=["sqlite", "postgres"])
def database_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    if request.param == "sqlite":
        url = f"sqlite+aiosqlite:///{tmp_path / 'data' / 'respgate.db'}"
        run_in_thread(lambda: upgrade_to_head(url))
        yield url
        return
    with throwaway_database("respgate_bg") as url:
        run_in_thread(lambda: upgrade_to_head(url))
        yield url


def settings_for(url: str, **extra: Any) -> Settings:
    """The gateway on the database at ``url``; its egress policy reaches the local MCP servers."""
    return Settings(database_url=url, egress=local_egress(), **extra)


def events_of(stream: Any) -> list[dict[str, Any]]:
    """The events of an SDK stream as JSON objects (each checked by the SDK on the way)."""
    return [event.model_dump() for event in stream]


def wait_for_status(client: openai.OpenAI, response_id: str, statuses: set[str]) -> Any:
    deadline = time.monotonic() + POLL_DEADLINE
    while True:
        response = client.responses.retrieve(response_id)
        if response.status in statuses or time.monotonic() > deadline:
            return response
        time.sleep(0.01)


def test_background_json_is_queued_then_polled_to_completion(database_url: str) -> None:
    upstream = GatedUpstream([[message("done in the background")]])
    with in_process(create_app(settings_for(database_url), upstream=upstream)) as http:
        client = openai_client(http)
        queued = client.responses.create(model="m", input="hi", background=True)
        assert queued.status == "queued" and queued.background is True
        assert queued.output == []
        polled = client.responses.retrieve(queued.id)  # a whole Response while it waits
        assert polled.status in ("queued", "in_progress") and polled.id == queued.id
        upstream.gate.set()
        final = wait_for_status(client, queued.id, {"completed"})
        assert final.status == "completed"
        assert final.output_text == "done in the background"
        assert final.background is True
        # the upstream was asked to stream, without ``background`` (the gateway runs it)
        [sent] = upstream.requests
        assert sent["stream"] is True and "background" not in sent
        # a continuation from it works as from any stored response
        upstream.rounds.append([message("next")])
        follow = client.responses.create(model="m", input="more", previous_response_id=final.id)
        assert follow.output_text == "next"


def test_background_stream_survives_a_disconnect_and_resumes(database_url: str) -> None:
    upstream = GatedUpstream([[message("a long answer streamed in background")]])
    with in_process(create_app(settings_for(database_url), upstream=upstream)) as http:
        client = openai_client(http)
        stream = client.responses.create(model="m", input="hi", background=True, stream=True)
        first = next(iter(stream)).model_dump()
        assert first["type"] == "response.created" and first["sequence_number"] == 0
        assert first["response"]["status"] == "queued"
        stream.close()  # the client goes away: the work does not
        response_id = first["response"]["id"]
        upstream.gate.set()
        final = wait_for_status(client, response_id, {"completed"})
        assert final.output_text == "a long answer streamed in background"
        with client.responses.retrieve(response_id, stream=True, starting_after=0) as again:
            events = events_of(again)
        numbers = [event["sequence_number"] for event in events]
        assert numbers == list(range(1, len(events) + 1))
        assert events[0]["type"] == "response.in_progress"
        assert events[-1]["type"] == "response.completed"
        assert events[-1]["response"] == final.model_dump()
        deltas = [e["delta"] for e in events if e["type"] == "response.output_text.delta"]
        assert "".join(deltas) == final.output_text
        later = events_of(client.responses.retrieve(final.id, stream=True, starting_after=3))
        assert [e["sequence_number"] for e in later] == numbers[3:]


def test_a_resumed_stream_follows_live_events(database_url: str) -> None:
    upstream = GatedUpstream([[message("live")]])
    with in_process(create_app(settings_for(database_url), upstream=upstream)) as http:
        client = openai_client(http)
        queued = client.responses.create(model="m", input="hi", background=True)
        threading.Timer(0.2, upstream.gate.set).start()
        events = events_of(client.responses.retrieve(queued.id, stream=True, starting_after=0))
        assert events[-1]["type"] == "response.completed"
        assert events[-1]["response"]["output"][0]["content"][0]["text"] == "live"


def test_foreground_responses_cannot_be_streamed_again_nor_cancelled(database_url: str) -> None:
    upstream = ScriptedUpstream([[message("fg")]])
    with in_process(create_app(settings_for(database_url), upstream=upstream)) as http:
        client = openai_client(http)
        done = client.responses.create(model="m", input="hi")
        with pytest.raises(openai.BadRequestError) as streamed:
            client.responses.retrieve(done.id, stream=True, starting_after=0)
        assert streamed.value.body["message"] == (  # type: ignore[index]
            "This response cannot be streamed because it was not created with background=true."
        )
        with pytest.raises(openai.BadRequestError) as cancelled:
            client.responses.cancel(done.id)
        assert "background=true" in cancelled.value.body["message"]  # type: ignore[index]
        with pytest.raises(openai.NotFoundError):
            client.responses.cancel("resp_unknown")
        with pytest.raises(openai.NotFoundError):
            client.responses.retrieve("resp_unknown", stream=True)


def test_cancel_queued_in_progress_and_finished(database_url: str) -> None:
    upstream = GatedUpstream([[message("finished")]])  # the cancelled run never asks
    with in_process(create_app(settings_for(database_url), upstream=upstream)) as http:
        client = openai_client(http)
        running = client.responses.create(model="m", input="slow", background=True)
        assert upstream.started.wait(POLL_DEADLINE)  # its upstream request is open
        cancelled = client.responses.cancel(running.id)
        assert cancelled.status == "cancelled" and cancelled.id == running.id
        assert client.responses.retrieve(running.id).status == "cancelled"
        assert client.responses.cancel(running.id).status == "cancelled"  # unchanged
        events = events_of(client.responses.retrieve(running.id, stream=True, starting_after=-1))
        assert events[0]["type"] == "response.created"
        assert events[-1]["response"]["status"] == "cancelled"
        upstream.gate.set()
        finished = client.responses.create(model="m", input="quick", background=True)
        done = wait_for_status(client, finished.id, {"completed"})
        assert done.output_text == "finished"
        again = client.responses.cancel(finished.id)
        assert again.status == "completed" and again.model_dump() == done.model_dump()
        # the cancelled run stored nothing, and nothing continues from it
        with pytest.raises(openai.BadRequestError):
            client.responses.create(model="m", input="x", previous_response_id=running.id)


def test_background_tool_loop_on_a_real_mcp_server(database_url: str, counter_url: str) -> None:
    upstream = ScriptedUpstream(
        [[function_call("mcp__counter__sum", '{"a": 2, "b": 3}')], [message("5")]]
    )
    tool: Any = {
        "type": "mcp",
        "server_label": "counter",
        "server_url": counter_url,
        "require_approval": "never",
    }
    with in_process(create_app(settings_for(database_url), upstream=upstream)) as http:
        client = openai_client(http)
        queued = client.responses.create(model="m", input="2+3?", tools=[tool], background=True)
        final = wait_for_status(client, queued.id, {"completed", "failed"})
        assert final.status == "completed", final.error
        types = [item.type for item in final.output]
        assert types == ["mcp_list_tools", "mcp_call", "message"]
        assert final.output[1].output == "5"
        events = events_of(client.responses.retrieve(final.id, stream=True))
        assert "response.mcp_call.completed" in [e["type"] for e in events]


def _dead_job(url: str, response_id: str, body: JsonObject, created: JsonObject) -> None:
    """Write the job record of a process that died while running it (its lease long gone)."""

    async def write() -> None:
        store = SqlResponseStore(create_engine_for(url))
        try:
            job = BackgroundJob(
                response_id=response_id,
                status="in_progress",
                request=body,
                response=created["response"],
                resumable=True,
                owner="dead-host:1:gone",
                lease_until=time.time() - 60,
                attempts=1,
                created_at=int(time.time()),
                tenant=DEFAULT_TENANT,
            )
            await store.add_job(job, created)
        finally:
            await store.aclose()

    run_in_thread(write)


def test_a_job_whose_process_died_is_taken_over_at_start(database_url: str) -> None:
    # A first gateway queues a job whose upstream never answers; it "dies" (its lease lapses):
    # a second gateway on the same database takes the job over and completes it.
    first = GatedUpstream([[message("never")]])
    settings = settings_for(database_url, background_lease_seconds=0.3)
    with in_process(create_app(settings, upstream=first)) as http:
        queued = openai_client(http).responses.create(model="m", input="hi", background=True)
        assert first.started.wait(POLL_DEADLINE)
        created = http.get(f"/v1/responses/{queued.id}").json()
    # (the first gateway's shutdown handed the job back; a crash leaves the lease to lapse)
    second = ScriptedUpstream([[message("finished by the second gateway")]])
    with in_process(create_app(settings, upstream=second)) as http:
        client = openai_client(http)
        final = wait_for_status(client, queued.id, {"completed", "failed"})
        assert final.status == "completed", final.error
        assert final.output_text == "finished by the second gateway"
        events = events_of(client.responses.retrieve(queued.id, stream=True, starting_after=-1))
        assert events[0]["type"] == "response.created"
        assert events[-1]["type"] == "response.completed"
        numbers = [e["sequence_number"] for e in events]
        assert numbers == sorted(set(numbers))
    assert created["status"] in ("queued", "in_progress")

    # a job that had already run a tool call is failed, not run twice
    response_id = "resp_dead_after_tools"
    created_event = {
        "type": "response.created",
        "sequence_number": 0,
        "response": {**created, "id": response_id, "status": "in_progress"},
    }
    _dead_job(database_url, response_id, {"model": "m", "input": "hi"}, created_event)

    async def log_tool_call() -> None:
        store = SqlResponseStore(create_engine_for(database_url))
        try:
            event = {"type": "response.mcp_call.completed", "sequence_number": 1}
            await store.append_events(response_id, [LoggedEvent(1, event)], tenant=DEFAULT_TENANT)
        finally:
            await store.aclose()

    run_in_thread(log_tool_call)
    with in_process(create_app(settings, upstream=ScriptedUpstream([]))) as http:
        client = openai_client(http)
        failed = wait_for_status(client, response_id, {"failed", "completed"})
        assert failed.status == "failed"
        assert failed.error is not None and "tool calls" in failed.error.message
        events = events_of(client.responses.retrieve(response_id, stream=True, starting_after=1))
        assert [e["type"] for e in events] == ["error", "response.failed"]
