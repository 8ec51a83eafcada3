"""Background jobs shared through the store, on SQLite and on a real PostgreSQL: a job another
process runs is cancelled from this one, a job whose lease lapses while this gateway runs is
taken over by its sweep, a finished job's events go after the retention period, and deleting a
background response deletes its job."""

from __future__ import annotations

import time

import openai
import pytest

from app.core.jobs import BackgroundJob, LoggedEvent
from app.core.tenancy import DEFAULT_TENANT
from app.main import create_app
from app.protocol.json_types import JsonObject
from app.store.engine import create_engine_for
from app.store.sql import SqlResponseStore
from tests.background.test_background_api import (
    GatedUpstream,
    database_url,
    events_of,
    settings_for,
    wait_for_status,
)
from tests.fakes import ScriptedUpstream, message
from tests.helpers import in_process, openai_client
from tests.postgres import run_in_thread
from tests.tenants import client_as, tenants_gateway

__all__ = ["database_url"]  # the fixture, parametrized on SQLite and PostgreSQL


def write_job(
    url: str, response_id: str, *, owner: str, lease_until: float, tenant: str = DEFAULT_TENANT
) -> None:
    """The job record of another gateway process (queued: nothing has run yet), ``tenant``'s."""
    response: JsonObject = {
        "id": response_id,
        "object": "response",
        "created_at": int(time.time()),
        "status": "queued",
        "background": True,
        "model": "m",
        "output": [],
    }

    async def write() -> None:
        store = SqlResponseStore(create_engine_for(url))
        try:
            job = BackgroundJob(
                response_id=response_id,
                status="queued",
                request={"model": "m", "input": "hi", "background": True},
                response=response,
                resumable=True,
                owner=owner,
                lease_until=lease_until,
                attempts=1,
                created_at=int(time.time()),
                tenant=tenant,
            )
            await store.add_job(
                job, {"type": "response.created", "sequence_number": 0, "response": response}
            )
        finally:
            await store.aclose()

    run_in_thread(write)


def read_job(
    url: str, response_id: str, tenant: str = DEFAULT_TENANT
) -> tuple[BackgroundJob | None, list[LoggedEvent]]:
    async def read() -> tuple[BackgroundJob | None, list[LoggedEvent]]:
        store = SqlResponseStore(create_engine_for(url))
        try:
            job = await store.get_job(response_id, tenant=tenant)
            return job, await store.read_events(response_id, -1, 99, tenant=tenant)
        finally:
            await store.aclose()

    return run_in_thread(read)


def test_a_job_another_process_runs_is_cancelled_here(database_url: str) -> None:
    write_job(database_url, "resp_elsewhere", owner="other:1:alive", lease_until=time.time() + 600)
    upstream = ScriptedUpstream([])
    with in_process(create_app(settings_for(database_url), upstream=upstream)) as http:
        client = openai_client(http)
        assert client.responses.retrieve("resp_elsewhere").status == "queued"
        cancelled = client.responses.cancel("resp_elsewhere")
        assert cancelled.status == "cancelled"
        events = events_of(client.responses.retrieve("resp_elsewhere", stream=True))
        assert [e["type"] for e in events] == ["response.created", "response.failed"]
        assert events[-1]["response"]["status"] == "cancelled"
    job, _ = read_job(database_url, "resp_elsewhere")
    assert job is not None and job.status == "cancelled"
    assert upstream.requests == []  # this process ran nothing
    # the owner's lease renewal is refused from now on: it stops its run (tests/store contract)


def test_a_job_taken_over_runs_and_stores_as_its_tenant(database_url: str) -> None:
    settings = settings_for(database_url, background_lease_seconds=0.2)
    upstream = ScriptedUpstream([[message("acme's answer")]])
    with tenants_gateway(settings, upstream, "acme", DEFAULT_TENANT) as http:
        acme, other = client_as(http, "acme"), client_as(http, DEFAULT_TENANT)
        write_job(
            database_url,
            "resp_of_acme",
            owner="other:3:dead",
            lease_until=time.time() + 0.3,
            tenant="acme",
        )
        final = wait_for_status(acme, "resp_of_acme", {"completed", "failed"})
        assert final.status == "completed", final.error
        assert final.output_text == "acme's answer"
        # what the run stored is acme's: another tenant does not see it, nor its event log
        with pytest.raises(openai.NotFoundError):
            other.responses.retrieve("resp_of_acme")
        with pytest.raises(openai.NotFoundError):
            other.responses.retrieve("resp_of_acme", stream=True)
    job, logged = read_job(database_url, "resp_of_acme", "acme")
    assert job is not None and job.tenant == "acme" and job.attempts == 2
    assert logged and read_job(database_url, "resp_of_acme") == (None, [])


def test_a_job_whose_lease_lapses_is_taken_over_by_the_sweep(database_url: str) -> None:
    settings = settings_for(database_url, background_lease_seconds=0.2)
    upstream = ScriptedUpstream([[message("taken over")]])
    with in_process(create_app(settings, upstream=upstream)) as http:
        client = openai_client(http)
        # another process claims a job, then dies: its lease lapses while this gateway runs
        write_job(database_url, "resp_orphan", owner="other:2:dead", lease_until=time.time() + 0.3)
        final = wait_for_status(client, "resp_orphan", {"completed", "failed"})
        assert final.status == "completed", final.error
        assert final.output_text == "taken over"
        assert final.background is True
        # the job record follows the stored response (its run writes it right after)
        deadline = time.monotonic() + 20
        while (job := read_job(database_url, "resp_orphan")[0]) is not None and job.active:
            if time.monotonic() > deadline:
                break
            time.sleep(0.02)
    job, logged = read_job(database_url, "resp_orphan")
    assert job is not None and job.status == "completed" and job.attempts == 2
    assert [e.event["type"] for e in logged][:2] == ["response.created", "response.in_progress"]


def test_events_of_a_finished_job_go_after_the_retention_period(database_url: str) -> None:
    settings = settings_for(
        database_url, background_lease_seconds=0.2, background_event_retention_minutes=0.001
    )
    upstream = GatedUpstream([[message("soon forgotten")]])
    upstream.gate.set()
    with in_process(create_app(settings, upstream=upstream)) as http:
        client = openai_client(http)
        queued = client.responses.create(model="m", input="hi", background=True)
        final = wait_for_status(client, queued.id, {"completed"})
        deadline = time.monotonic() + 20
        while read_job(database_url, queued.id)[1] and time.monotonic() < deadline:
            time.sleep(0.05)
        with pytest.raises(openai.BadRequestError) as purged:
            client.responses.retrieve(queued.id, stream=True, starting_after=0)
        assert "can no longer be streamed" in purged.value.body["message"]  # type: ignore[index]
        assert client.responses.retrieve(queued.id).model_dump() == final.model_dump()


def test_deleting_a_background_response_deletes_its_job(database_url: str) -> None:
    upstream = GatedUpstream([[message("never")]])
    with in_process(create_app(settings_for(database_url), upstream=upstream)) as http:
        client = openai_client(http)
        queued = client.responses.create(model="m", input="hi", background=True)
        assert upstream.started.wait(20)
        client.responses.delete(queued.id)
        with pytest.raises(openai.NotFoundError):
            client.responses.retrieve(queued.id)
        with pytest.raises(openai.NotFoundError):
            client.responses.delete(queued.id)
    assert read_job(database_url, queued.id) == (None, [])
