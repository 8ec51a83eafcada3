"""The ``JobStore`` contract (``app.core.jobs``): background job records, their leases and their
event logs. Every test runs on every implementation (conftest's ``any_backend``: the tests'
in-memory store, SQLite with and without inline reads, PostgreSQL), through the response store
the gateway already has (``SqlResponseStore`` is also the job store)."""

from __future__ import annotations

import asyncio
from typing import Protocol

import pytest

from app.core.ids import new_id
from app.core.jobs import BackgroundJob, JobStore, LoggedEvent
from app.core.ports import ResponseStore
from app.core.tenancy import DEFAULT_TENANT
from app.protocol.json_types import JsonObject
from tests.store.conftest import Backend, MemoryBackend

NOW = 1_750_000_000.0


class Store(ResponseStore, JobStore, Protocol):
    """A response store that keeps background jobs too."""


@pytest.fixture
def store(any_backend: Backend | MemoryBackend) -> Store:
    return any_backend.new_store()


def queued(response_id: str) -> JsonObject:
    return {"id": response_id, "object": "response", "status": "queued", "output": []}


def new_job(owner: str = "a", *, lease_until: float = NOW + 30, **extra: object) -> BackgroundJob:
    response_id = new_id("resp")
    fields: dict[str, object] = {
        "response_id": response_id,
        "status": "queued",
        "request": {"model": "m", "input": "hi ✓", "background": True},
        "response": queued(response_id),
        "resumable": True,
        "owner": owner,
        "lease_until": lease_until,
        "attempts": 1,
        "created_at": int(NOW),
        "tenant": DEFAULT_TENANT,
        **extra,
    }
    return BackgroundJob(**fields)  # type: ignore[arg-type]


def created(job: BackgroundJob) -> JsonObject:
    return {"type": "response.created", "sequence_number": 0, "response": job.response}


def events(*numbers: int) -> list[LoggedEvent]:
    return [
        LoggedEvent(
            n, {"type": "response.output_text.delta", "sequence_number": n, "delta": f"d{n} é"}
        )
        for n in numbers
    ]


async def test_add_then_get(store: Store) -> None:
    job = new_job()
    await store.add_job(job, created(job))

    assert await store.get_job(job.response_id, tenant=DEFAULT_TENANT) == job
    assert await store.get_job("resp_unknown", tenant=DEFAULT_TENANT) is None
    assert await store.read_events(job.response_id, -1, 10, tenant=DEFAULT_TENANT) == [
        LoggedEvent(0, created(job))
    ]
    assert await store.last_sequence_number(job.response_id, tenant=DEFAULT_TENANT) == 0
    assert await store.last_sequence_number("resp_unknown", tenant=DEFAULT_TENANT) is None


async def test_only_the_owner_updates_an_active_job(store: Store) -> None:
    job = new_job("a")
    await store.add_job(job, created(job))
    running = {**job.response, "status": "in_progress"}

    assert not await store.update_job(job.response_id, "b", running, 1, tenant=DEFAULT_TENANT)
    assert await store.update_job(job.response_id, "a", running, 1, tenant=DEFAULT_TENANT)
    got = await store.get_job(job.response_id, tenant=DEFAULT_TENANT)
    assert got is not None and got.status == "in_progress" and got.response == running
    assert got.finished_at is None and got.active

    done = {**job.response, "status": "completed"}
    assert await store.update_job(
        job.response_id, "a", done, 7, events(1, 2), tenant=DEFAULT_TENANT
    )
    got = await store.get_job(job.response_id, tenant=DEFAULT_TENANT)
    assert got is not None and got.status == "completed" and got.finished_at == 7
    # the events of an update are logged with it, and only when it is accepted
    assert await store.read_events(job.response_id, 0, 10, tenant=DEFAULT_TENANT) == events(1, 2)
    # final: nobody writes it again, nor renews it, nor cancels it
    assert not await store.update_job(
        job.response_id, "a", {**done, "status": "failed"}, 8, events(3), tenant=DEFAULT_TENANT
    )
    assert not await store.renew_lease(job.response_id, "a", NOW + 60, tenant=DEFAULT_TENANT)
    assert not await store.cancel_job(job.response_id, done, 9, tenant=DEFAULT_TENANT)
    assert (await store.get_job(job.response_id, tenant=DEFAULT_TENANT)) == got
    assert await store.last_sequence_number(job.response_id, tenant=DEFAULT_TENANT) == 2


async def test_renew_lease(store: Store) -> None:
    job = new_job("a")
    await store.add_job(job, created(job))

    assert await store.renew_lease(job.response_id, "a", NOW + 90.5, tenant=DEFAULT_TENANT)
    assert not await store.renew_lease(job.response_id, "b", NOW + 99, tenant=DEFAULT_TENANT)
    assert not await store.renew_lease("resp_unknown", "a", NOW + 99, tenant=DEFAULT_TENANT)
    got = await store.get_job(job.response_id, tenant=DEFAULT_TENANT)
    assert got is not None and got.lease_until == NOW + 90.5


async def test_cancel_an_active_job_whoever_owns_it(store: Store) -> None:
    job = new_job("elsewhere")
    await store.add_job(job, created(job))
    cancelled = {**job.response, "status": "cancelled"}

    assert await store.cancel_job(job.response_id, cancelled, 5, tenant=DEFAULT_TENANT)
    got = await store.get_job(job.response_id, tenant=DEFAULT_TENANT)
    assert got is not None and got.status == "cancelled" and got.response == cancelled
    assert got.finished_at == 5
    # the owner's later writes are refused: a cancelled job is not revived
    assert not await store.renew_lease(
        job.response_id, "elsewhere", NOW + 60, tenant=DEFAULT_TENANT
    )
    assert not await store.update_job(
        job.response_id, "elsewhere", {"status": "completed"}, 6, tenant=DEFAULT_TENANT
    )
    assert not await store.cancel_job(job.response_id, cancelled, 7, tenant=DEFAULT_TENANT)
    assert not await store.cancel_job("resp_unknown", cancelled, 7, tenant=DEFAULT_TENANT)


async def test_only_the_owner_logs_events_of_an_active_job(store: Store) -> None:
    job = new_job("a")
    await store.add_job(job, created(job))

    assert not await store.log_events(job.response_id, "b", events(1), tenant=DEFAULT_TENANT)
    assert await store.log_events(job.response_id, "a", events(1, 2), tenant=DEFAULT_TENANT)
    assert not await store.log_events("resp_unknown", "a", events(1), tenant=DEFAULT_TENANT)
    cancelled = {**job.response, "status": "cancelled"}
    assert await store.cancel_job(job.response_id, cancelled, 5, tenant=DEFAULT_TENANT)
    # once cancelled, the owner's late batch is refused; the canceller's closing event is not
    assert not await store.log_events(job.response_id, "a", events(3), tenant=DEFAULT_TENANT)
    await store.append_events(job.response_id, events(3), tenant=DEFAULT_TENANT)
    assert [
        e.sequence_number
        for e in await store.read_events(job.response_id, -1, 10, tenant=DEFAULT_TENANT)
    ] == [
        0,
        1,
        2,
        3,
    ]


async def test_a_cancel_racing_the_owners_log_writes_never_reuses_a_number(store: Store) -> None:
    """The owner logs batch after batch while another process cancels and logs the closing
    event after the last logged one: every write either lands before the cancel or is
    refused, so the closing event's number is always free."""
    for _ in range(10):
        job = new_job("a")
        await store.add_job(job, created(job))

        async def owner(job: BackgroundJob = job) -> None:
            number = 1
            while await store.log_events(
                job.response_id, "a", events(number, number + 1), tenant=DEFAULT_TENANT
            ):
                number += 2
                await asyncio.sleep(0)

        async def canceller(job: BackgroundJob = job) -> None:
            await asyncio.sleep(0.002)
            assert await store.cancel_job(
                job.response_id, {**job.response, "status": "x"}, 5, tenant=DEFAULT_TENANT
            )
            last = await store.last_sequence_number(job.response_id, tenant=DEFAULT_TENANT)
            assert last is not None
            await store.append_events(job.response_id, events(last + 1), tenant=DEFAULT_TENANT)

        await asyncio.gather(owner(), canceller())
        logged = [
            e.sequence_number
            for e in await store.read_events(job.response_id, -1, 10**4, tenant=DEFAULT_TENANT)
        ]
        assert logged == list(range(len(logged)))


async def test_claim_lapsed_takes_only_active_jobs_whose_lease_ended(store: Store) -> None:
    lapsed = new_job("dead", lease_until=NOW - 1)
    alive = new_job("alive", lease_until=NOW + 30)
    finished = new_job("dead", lease_until=NOW - 1)
    for job in (lapsed, alive, finished):
        await store.add_job(job, created(job))
    await store.update_job(
        finished.response_id, "dead", {"status": "completed"}, 1, tenant=DEFAULT_TENANT
    )

    [claimed] = await store.claim_lapsed("me", NOW, NOW + 30, 10)

    assert claimed.response_id == lapsed.response_id
    assert claimed.owner == "me" and claimed.attempts == 2 and claimed.lease_until == NOW + 30
    assert await store.get_job(lapsed.response_id, tenant=DEFAULT_TENANT) == claimed
    assert await store.claim_lapsed("other", NOW, NOW + 30, 10) == []  # now it is mine
    # fenced off
    assert not await store.renew_lease(lapsed.response_id, "dead", NOW + 60, tenant=DEFAULT_TENANT)
    assert await store.renew_lease(lapsed.response_id, "me", NOW + 60, tenant=DEFAULT_TENANT)


async def test_a_lapsed_job_is_claimed_by_one_process_only(
    any_backend: Backend | MemoryBackend,
) -> None:
    stores: list[Store] = [any_backend.new_store() for _ in range(3)]
    jobs = [new_job("dead", lease_until=NOW - 1) for _ in range(6)]
    for job in jobs:
        await stores[0].add_job(job, created(job))

    claims = await asyncio.gather(
        *(s.claim_lapsed(f"p{n}", NOW, NOW + 30, 10) for n, s in enumerate(stores))
    )

    claimed = [job.response_id for batch in claims for job in batch]
    assert sorted(claimed) == sorted(job.response_id for job in jobs)


def checkpoint(round_number: int) -> JsonObject:
    return {
        "version": 1,
        "output": [{"type": "mcp_call", "id": "mcp_1", "output": "4 ✓"}],
        "model_items": [{"type": "function_call_output", "call_id": "c1", "output": "4"}],
        "round": round_number,
        "sequence_number": 10 * round_number,
    }


async def test_only_the_owner_saves_a_checkpoint_of_an_active_job(store: Store) -> None:
    job = new_job("a")
    await store.add_job(job, created(job))
    assert await store.get_checkpoint(job.response_id, tenant=DEFAULT_TENANT) is None

    assert await store.save_checkpoint(job.response_id, "a", checkpoint(1), tenant=DEFAULT_TENANT)
    assert not await store.save_checkpoint(
        job.response_id, "b", checkpoint(9), tenant=DEFAULT_TENANT
    )
    assert await store.get_checkpoint(job.response_id, tenant=DEFAULT_TENANT) == checkpoint(1)
    # replaced
    assert await store.save_checkpoint(job.response_id, "a", checkpoint(2), tenant=DEFAULT_TENANT)
    assert await store.get_checkpoint(job.response_id, tenant=DEFAULT_TENANT) == checkpoint(2)
    # the record itself is unchanged
    assert await store.get_job(job.response_id, tenant=DEFAULT_TENANT) == job
    assert await store.get_checkpoint("resp_unknown", tenant=DEFAULT_TENANT) is None
    assert not await store.save_checkpoint(
        "resp_unknown", "a", checkpoint(1), tenant=DEFAULT_TENANT
    )


async def test_a_checkpoint_survives_a_takeover_and_goes_when_the_job_ends(store: Store) -> None:
    job = new_job("dead", lease_until=NOW - 1)
    await store.add_job(job, created(job))
    await store.save_checkpoint(job.response_id, "dead", checkpoint(1), tenant=DEFAULT_TENANT)

    [claimed] = await store.claim_lapsed("me", NOW, NOW + 30, 10)
    assert await store.get_checkpoint(claimed.response_id, tenant=DEFAULT_TENANT) == checkpoint(1)
    assert not await store.save_checkpoint(
        job.response_id, "dead", checkpoint(2), tenant=DEFAULT_TENANT
    )
    assert await store.save_checkpoint(job.response_id, "me", checkpoint(2), tenant=DEFAULT_TENANT)

    done = {**job.response, "status": "completed"}
    assert await store.update_job(job.response_id, "me", done, 9, tenant=DEFAULT_TENANT)
    assert await store.get_checkpoint(job.response_id, tenant=DEFAULT_TENANT) is None
    # final
    assert not await store.save_checkpoint(
        job.response_id, "me", checkpoint(3), tenant=DEFAULT_TENANT
    )

    other = new_job("a")
    await store.add_job(other, created(other))
    await store.save_checkpoint(other.response_id, "a", checkpoint(1), tenant=DEFAULT_TENANT)
    assert await store.cancel_job(
        other.response_id, {**other.response, "status": "cancelled"}, 9, tenant=DEFAULT_TENANT
    )
    assert await store.get_checkpoint(other.response_id, tenant=DEFAULT_TENANT) is None


async def test_event_log_reads_in_order_after_a_number(store: Store) -> None:
    job = new_job()
    await store.add_job(job, created(job))
    await store.append_events(job.response_id, events(1, 2, 3), tenant=DEFAULT_TENANT)
    await store.append_events(job.response_id, events(4), tenant=DEFAULT_TENANT)
    await store.append_events(job.response_id, [], tenant=DEFAULT_TENANT)

    assert [
        e.sequence_number
        for e in await store.read_events(job.response_id, 1, 10, tenant=DEFAULT_TENANT)
    ] == [
        2,
        3,
        4,
    ]
    assert await store.read_events(job.response_id, 0, 2, tenant=DEFAULT_TENANT) == events(1, 2)
    assert await store.read_events(job.response_id, 4, 10, tenant=DEFAULT_TENANT) == []
    assert await store.last_sequence_number(job.response_id, tenant=DEFAULT_TENANT) == 4


async def test_purge_drops_the_logs_of_jobs_finished_before_the_cutoff(store: Store) -> None:
    old, recent, running = new_job(), new_job(), new_job()
    for job in (old, recent, running):
        await store.add_job(job, created(job))
        await store.append_events(job.response_id, events(1), tenant=DEFAULT_TENANT)
    await store.update_job(
        old.response_id, "a", {"status": "completed"}, 100, tenant=DEFAULT_TENANT
    )
    await store.update_job(
        recent.response_id, "a", {"status": "completed"}, 300, tenant=DEFAULT_TENANT
    )

    assert await store.purge_finished(200) == 2

    assert await store.read_events(old.response_id, -1, 10, tenant=DEFAULT_TENANT) == []
    assert await store.last_sequence_number(old.response_id, tenant=DEFAULT_TENANT) is None
    # the record stays
    assert await store.get_job(old.response_id, tenant=DEFAULT_TENANT) is not None
    assert len(await store.read_events(recent.response_id, -1, 10, tenant=DEFAULT_TENANT)) == 2
    assert len(await store.read_events(running.response_id, -1, 10, tenant=DEFAULT_TENANT)) == 2
    assert await store.purge_finished(200) == 0


async def test_delete_job(store: Store) -> None:
    job, other = new_job(), new_job()
    for each in (job, other):
        await store.add_job(each, created(each))
        await store.append_events(each.response_id, events(1), tenant=DEFAULT_TENANT)

    assert await store.delete_job(job.response_id, tenant=DEFAULT_TENANT) is True

    assert await store.get_job(job.response_id, tenant=DEFAULT_TENANT) is None
    assert await store.read_events(job.response_id, -1, 10, tenant=DEFAULT_TENANT) == []
    assert await store.delete_job(job.response_id, tenant=DEFAULT_TENANT) is False
    assert await store.get_job(other.response_id, tenant=DEFAULT_TENANT) is not None
    assert len(await store.read_events(other.response_id, -1, 10, tenant=DEFAULT_TENANT)) == 2


# --- tenancy: a job, its event log and its checkpoint are its tenant's ------------------------


async def test_another_tenants_job_is_unknown(store: Store) -> None:
    job = new_job("a", tenant="tenant-a")
    await store.add_job(job, created(job))
    running = {**job.response, "status": "in_progress"}
    assert await store.save_checkpoint(job.response_id, "a", {"round": 1}, tenant="tenant-a")
    rid, other = job.response_id, "tenant-b"

    # to another tenant it answers as an unknown id, even to the lease's owner
    assert await store.get_job(rid, tenant=other) is None
    assert await store.get_checkpoint(rid, tenant=other) is None
    assert await store.read_events(rid, -1, 10, tenant=other) == []
    assert await store.last_sequence_number(rid, tenant=other) is None
    assert not await store.renew_lease(rid, "a", NOW + 60, tenant=other)
    assert not await store.update_job(rid, "a", running, 1, events(1), tenant=other)
    assert not await store.log_events(rid, "a", events(1), tenant=other)
    assert not await store.save_checkpoint(rid, "a", {"round": 9}, tenant=other)
    assert not await store.cancel_job(rid, {**job.response, "status": "cancelled"}, 2, tenant=other)
    assert not await store.delete_job(rid, tenant=other)
    # the tenant's own job is untouched
    assert await store.get_job(rid, tenant="tenant-a") == job
    assert await store.get_checkpoint(rid, tenant="tenant-a") == {"round": 1}
    assert await store.read_events(rid, -1, 10, tenant="tenant-a") == [LoggedEvent(0, created(job))]
    assert await store.delete_job(rid, tenant="tenant-a")


async def test_a_job_taken_over_keeps_its_tenant(store: Store) -> None:
    # claim_lapsed and purge_finished span tenants: a sweep takes every tenant's lapsed jobs,
    # and each claimed job says whose it is, so its new run writes under that tenant.
    jobs = [new_job("dead", lease_until=NOW - 1, tenant=t) for t in ("tenant-a", "tenant-b")]
    for job in jobs:
        await store.add_job(job, created(job))

    claimed = await store.claim_lapsed("alive", NOW, NOW + 30, 10)

    assert sorted(j.tenant for j in claimed) == ["tenant-a", "tenant-b"]
    for job in claimed:
        done = {**job.response, "status": "completed"}
        assert await store.update_job(job.response_id, "alive", done, 5, tenant=job.tenant)
    assert await store.purge_finished(6) == 2
    for job in claimed:
        assert await store.read_events(job.response_id, -1, 10, tenant=job.tenant) == []
