"""The retention purge (``app.store.retention``) on SQLite and PostgreSQL: what expires goes,
the items nothing kept lists go with it, and every kept object stays whole.

Ages are set through ``created_at`` (responses, jobs), ``last_active_at`` (conversations) and
``updated_at`` (tool sessions); the cut-offs are instants between them, so nothing depends on
the clock.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import delete, func, select, update
from sqlalchemy.ext.asyncio import AsyncConnection

from app.core.jobs import BackgroundJob, LoggedEvent
from app.core.ports import NewResponse, StoredResponse
from app.core.retention import PurgeReport, RetentionCutoffs
from app.protocol.json_types import JsonObject
from app.store import retention_sweep
from app.store.retention import SqlRetention
from app.store.retention_sql import PG_PURGE_LOCK, PurgeSql
from app.store.retention_sweep import PASS_KEYS, SWEEP_KEYS, ItemSweep
from app.store.sql import SqlResponseStore
from app.store.tables import (
    background_events,
    background_jobs,
    conversation_items,
    conversations,
    items,
    purge_candidates,
    responses,
    tool_sessions,
)
from tests.store.builders import message, turn
from tests.store.conftest import sql_backend

OLD, CUTOFF, NEW = 1_000_000, 2_000_000, 3_000_000
# The tenant of most tests; the tests of several tenants add ``B`` and ``C``.
A, B, C = "tenant-a", "tenant-b", "tenant-c"
RESPONSES = RetentionCutoffs(responses_before=CUTOFF)
CONVERSATIONS = RetentionCutoffs(conversations_before=CUTOFF)
BOTH = RetentionCutoffs(responses_before=CUTOFF, conversations_before=CUTOFF)
TABLES = (
    responses,
    items,
    purge_candidates,
    conversations,
    conversation_items,
    background_jobs,
    background_events,
    tool_sessions,
)


def aged(new: NewResponse, created_at: int) -> NewResponse:
    new.response["created_at"] = created_at
    return new


async def stored(store: SqlResponseStore, response_id: str, tenant: str = A) -> StoredResponse:
    found = await store.get_response(response_id, tenant=tenant)
    assert found is not None, response_id
    return found


async def save_chain(
    store: SqlResponseStore, ages: list[int], tenant: str = A, **first: Any
) -> list[NewResponse]:
    """A ``previous_response_id`` chain of ``tenant``'s, one response per age, each continuing
    the last."""
    saved: list[NewResponse] = []
    for index, age in enumerate(ages):
        if saved:
            parent = await stored(store, saved[-1].response["id"], tenant)
            new = turn(
                f"turn {index}",
                history_ids=parent.checkpoint_ids,
                previous_response_id=parent.id,
                root_id=parent.root_id,
            )
        else:
            new = turn("turn 0", **first)
        await store.save_response(aged(new, age), tenant=tenant)
        saved.append(new)
    return saved


def own_ids(*news: NewResponse) -> list[str]:
    """The ids of the items these responses brought (their new input and their output)."""
    return [str(item["id"]) for new in news for item in new.new_items]


async def stored_item_ids(store: SqlResponseStore, ids: list[str], tenant: str = A) -> set[str]:
    return {str(item["id"]) for item in await store.load_items(ids, tenant=tenant)}


async def counts(store: SqlResponseStore) -> dict[str, int]:
    async with store.db.read() as conn:
        return {
            table.name: int(await conn.scalar(select(func.count()).select_from(table)) or 0)
            for table in TABLES
        }


async def execute(store: SqlResponseStore, statement: Any) -> None:
    async with store.db.write() as conn:
        await conn.execute(statement)


async def purge(
    store: SqlResponseStore, cutoffs: RetentionCutoffs, *, batch_size: int = 500, **options: Any
) -> PurgeReport:
    report = await SqlRetention(store.db, batch_size=batch_size).purge(cutoffs, **options)
    assert report is not None
    return report


async def make_conversation(
    store: SqlResponseStore, last_active_at: int, tenant: str = A, opener: str | None = None
) -> str:
    first = message("conversation opener", item_id=opener)
    conversation = await store.create_conversation({}, [first], tenant=tenant)
    await execute(
        store,
        update(conversations)
        .where(conversations.c.id == conversation.id)
        .values(last_active_at=last_active_at),
    )
    return conversation.id


async def last_active(store: SqlResponseStore, conversation_id: str) -> int | None:
    async with store.db.read() as conn:
        value = await conn.scalar(
            select(conversations.c.last_active_at).where(conversations.c.id == conversation_id)
        )
    return None if value is None else int(value)


# --------------------------------------------------------------------------- responses


@pytest.mark.parametrize("batch_size", [1, 500])
async def test_expired_responses_go_and_a_kept_continuation_keeps_their_items(
    store: SqlResponseStore, batch_size: int
) -> None:
    old_chain = await save_chain(store, [OLD, OLD])
    mixed = await save_chain(store, [OLD, OLD, NEW])

    report = await purge(store, RESPONSES, batch_size=batch_size)

    assert report.responses == 4
    for new in [*old_chain, *mixed[:2]]:
        assert await store.get_response(new.response["id"], tenant=A) is None
    # Nothing kept lists the first chain's items: they went, and only they did.
    assert await stored_item_ids(store, own_ids(*old_chain)) == set()
    assert report.items == len(own_ids(*old_chain))
    # The kept response is whole: its history (the purged parents' items), its input items.
    kept = await stored(store, mixed[2].response["id"])
    assert len(kept.checkpoint_ids) == 6
    history = await store.load_items(kept.checkpoint_ids, tenant=A)
    assert [item["id"] for item in history] == kept.checkpoint_ids
    page = await store.list_input_items(kept.id, tenant=A, after=None, limit=20, order="asc")
    assert page is not None
    assert [item["id"] for item in page.items] == kept.input_item_ids


async def test_an_item_another_chain_lists_stays_until_that_chain_goes(
    store: SqlResponseStore,
) -> None:
    [owner] = await save_chain(store, [OLD])
    shared = owner.new_items[0]
    # Another chain sends the item back by id (as item_reference does): its root expires, its
    # child does not; a third chain references it and is kept itself.
    borrower = await save_chain(store, [OLD, NEW], stored_inputs=[shared])
    await purge(store, RESPONSES)
    assert await stored_item_ids(store, [shared["id"]]) == {shared["id"]}
    assert await store.get_response(borrower[0].response["id"], tenant=A) is None

    await execute(store, update(responses).values(created_at=OLD))
    report = await purge(store, RESPONSES)

    assert report.responses == 1
    assert await stored_item_ids(store, [shared["id"]]) == set()
    assert (await counts(store))["items"] == 0


async def test_responses_in_a_kept_conversation_leave_its_items(store: SqlResponseStore) -> None:
    conversation_id = await make_conversation(store, NEW)
    new = aged(turn("in the conversation", conversation_id=conversation_id), OLD)
    await store.save_response(new, tenant=A)

    report = await purge(store, BOTH)

    assert report.responses == 1
    assert report.conversations == 0
    assert report.items == 0
    listed = await store.conversation_items(conversation_id, tenant=A)
    assert listed is not None
    assert [item["id"] for item in listed][1:] == own_ids(new)


async def test_expired_conversations_go_with_the_items_only_they_list(
    store: SqlResponseStore,
) -> None:
    expired = await make_conversation(store, OLD)
    active = await make_conversation(store, NEW)
    opener = (await store.conversation_items(expired, tenant=A) or [])[0]
    kept_response = aged(
        turn("said in it", conversation_id=expired, history_ids=[opener["id"]]), NEW
    )
    await store.save_response(kept_response, tenant=A)
    appended = await store.append_conversation_items(expired, [message("later")], tenant=A)
    [only_listed] = appended or []
    await execute(
        store,
        update(conversations).where(conversations.c.id == expired).values(last_active_at=OLD),
    )
    await store.save_tool_session(expired, {"state": "of the expired conversation"}, tenant=A)
    await store.save_tool_session(active, {"state": "of the active one"}, tenant=A)

    report = await purge(store, CONVERSATIONS)

    assert report.conversations == 1
    assert await store.get_conversation(expired, tenant=A) is None
    assert await store.conversation_items(expired, tenant=A) is None
    assert await store.conversation_items(active, tenant=A) is not None
    # The item only the conversation listed went; the kept response's history stays whole.
    assert await stored_item_ids(store, [only_listed["id"]]) == set()
    assert report.items == 1
    continued = await stored(store, kept_response.response["id"])
    history = await store.load_items(continued.checkpoint_ids, tenant=A)
    assert [item["id"] for item in history] == [opener["id"], *own_ids(kept_response)]
    assert await store.load_tool_session(expired, tenant=A) is None
    assert await store.load_tool_session(active, tenant=A) is not None
    assert report.tool_sessions == 1


async def test_every_write_to_a_conversation_is_activity(store: SqlResponseStore) -> None:
    conversation_id = await make_conversation(store, OLD)
    await store.append_conversation_items(conversation_id, [message("appended")], tenant=A)
    assert (await last_active(store, conversation_id) or 0) > CUTOFF

    await execute(store, update(conversations).values(last_active_at=OLD))
    await store.save_response(turn("a response in it", conversation_id=conversation_id), tenant=A)
    assert (await last_active(store, conversation_id) or 0) > CUTOFF

    await execute(store, update(conversations).values(last_active_at=OLD))
    await store.update_conversation(conversation_id, {"topic": "retention"}, tenant=A)
    assert (await last_active(store, conversation_id) or 0) > CUTOFF
    assert (await purge(store, CONVERSATIONS)).conversations == 0


async def test_conversations_from_before_the_activity_column_age_from_creation(
    store: SqlResponseStore,
) -> None:
    conversation_id = await make_conversation(store, OLD)
    await execute(
        store,
        update(conversations).values(last_active_at=None, created_at=OLD),
    )

    report = await purge(store, CONVERSATIONS)

    assert report.conversations == 1
    assert await store.get_conversation(conversation_id, tenant=A) is None


# --------------------------------------------------------------------------- jobs, sessions


def job(
    response_id: str, status: str, request: dict[str, Any] | None = None, tenant: str = A
) -> BackgroundJob:
    return BackgroundJob(
        response_id=response_id,
        status=status,
        request=request or {"model": "gpt-test", "input": "hi"},
        response={"id": response_id, "object": "response", "status": status},
        resumable=True,
        owner="test-process",
        lease_until=time.time() + 600,
        attempts=1,
        created_at=OLD,
        finished_at=None,
        tenant=tenant,
    )


async def add_job(
    store: SqlResponseStore,
    response_id: str,
    *,
    finished_at: int | None,
    tenant: str = A,
    **request: Any,
) -> None:
    status = "queued" if finished_at is None else "completed"
    queued = job(response_id, "queued", request or None, tenant)
    await store.add_job(queued, {"type": "response.queued"})
    event = LoggedEvent(1, {"type": "response.in_progress"})
    await store.append_events(response_id, [event], tenant=tenant)
    if finished_at is not None:
        await execute(
            store,
            update(background_jobs)
            .where(background_jobs.c.response_id == response_id)
            .values(status=status, finished_at=finished_at),
        )


async def test_background_jobs_and_event_logs_go_with_their_responses(
    store: SqlResponseStore,
) -> None:
    [completed] = await save_chain(store, [OLD])
    await add_job(store, completed.response["id"], finished_at=OLD)
    await add_job(store, "resp_failed_without_a_row", finished_at=OLD)
    await add_job(store, "resp_finished_recently", finished_at=NEW)
    # A running job continues an expired response: that response stays while it runs.
    [continued] = await save_chain(store, [OLD])
    await add_job(
        store, "resp_running", finished_at=None, previous_response_id=continued.response["id"]
    )

    report = await purge(store, RESPONSES)

    assert report.responses == 1
    assert report.background_jobs == 2
    assert report.background_events == 4
    left = {
        job_id
        for job_id in (
            completed.response["id"],
            "resp_failed_without_a_row",
            "resp_finished_recently",
            "resp_running",
        )
        if await store.get_job(job_id, tenant=A) is not None
    }
    assert left == {"resp_finished_recently", "resp_running"}
    assert await store.read_events(completed.response["id"], -1, 10, tenant=A) == []
    assert len(await store.read_events("resp_running", -1, 10, tenant=A)) == 2
    kept = await stored(store, continued.response["id"])
    assert len(await store.load_items(kept.checkpoint_ids, tenant=A)) == 2


async def test_a_chains_tool_session_goes_with_its_last_response(store: SqlResponseStore) -> None:
    gone = await save_chain(store, [OLD, OLD])
    living = await save_chain(store, [OLD, NEW])
    for chain in (gone, living):
        await store.save_tool_session(chain[0].response["id"], {"state": "of the chain"}, tenant=A)
    # A session no stored response belongs to (store: false), untouched since OLD.
    await store.save_tool_session("resp_never_stored", {"state": "orphan"}, tenant=A)
    await store.save_tool_session("resp_never_stored_recent", {"state": "orphan, recent"}, tenant=A)
    await execute(
        store,
        update(tool_sessions)
        .where(tool_sessions.c.session_id != "resp_never_stored_recent")
        .values(updated_at=OLD),
    )

    report = await purge(store, RESPONSES)

    assert report.tool_sessions == 2
    assert await store.load_tool_session(gone[0].response["id"], tenant=A) is None
    assert await store.load_tool_session("resp_never_stored", tenant=A) is None
    assert await store.load_tool_session(living[0].response["id"], tenant=A) is not None
    assert await store.load_tool_session("resp_never_stored_recent", tenant=A) is not None


# --------------------------------------------------------------------------- two tenants


def client_item(tenant: str) -> JsonObject:
    """The item every tenant sends under the client-chosen id ``msg_1``, in its own words."""
    return message(f"{tenant}'s own words", item_id="msg_1")


@pytest.mark.parametrize("batch_size", [1, 500])
async def test_an_expired_response_takes_its_own_tenants_item_only(
    store: SqlResponseStore, batch_size: int
) -> None:
    [expired] = await save_chain(store, [OLD], A, inputs=[client_item(A)])
    [kept] = await save_chain(store, [NEW], B, inputs=[client_item(B)])
    # A third tenant's msg_1 is garbage in its own tenant: it goes too.
    await save_chain(store, [OLD], C, inputs=[client_item(C)])

    report = await purge(store, RESPONSES, batch_size=batch_size)

    assert report.responses == 2
    assert report.items == 2 * len(own_ids(expired))
    assert await store.load_items(["msg_1"], tenant=A) == []
    assert await store.load_items(["msg_1"], tenant=C) == []
    assert await store.load_items(["msg_1"], tenant=B) == [client_item(B)]
    # B's continuation works, on its own msg_1.
    parent = await stored(store, kept.response["id"], B)
    child = turn(
        "and then?",
        history_ids=parent.checkpoint_ids,
        previous_response_id=parent.id,
        root_id=parent.root_id,
    )
    await store.save_response(child, tenant=B)
    continued = await stored(store, child.response["id"], B)
    history = await store.load_items(continued.checkpoint_ids, tenant=B)
    assert [item["id"] for item in history] == continued.checkpoint_ids
    assert history[0] == client_item(B)


@pytest.mark.parametrize("kept_by", ["response", "conversation"])
async def test_what_another_tenant_keeps_does_not_keep_an_item(
    store: SqlResponseStore, kept_by: str
) -> None:
    [expired] = await save_chain(store, [OLD], A, inputs=[client_item(A)])
    if kept_by == "response":
        await save_chain(store, [NEW], B, inputs=[client_item(B)])
    else:
        await make_conversation(store, NEW, B, opener="msg_1")
    theirs = await store.load_items(["msg_1"], tenant=B)

    report = await purge(store, BOTH)

    assert report.responses == 1
    assert report.items == len(own_ids(expired))
    assert await stored_item_ids(store, own_ids(expired)) == set()
    assert len(theirs) == 1
    assert await store.load_items(["msg_1"], tenant=B) == theirs


async def test_a_tool_session_is_kept_by_its_own_tenants_chain_or_conversation_only(
    store: SqlResponseStore,
) -> None:
    [living] = await save_chain(store, [NEW], A)
    conversation_id = await make_conversation(store, NEW, A)
    for session_id in (living.response["id"], conversation_id):
        for tenant in (A, B):
            await store.save_tool_session(session_id, {"of": tenant}, tenant=tenant)
    await execute(store, update(tool_sessions).values(updated_at=OLD))

    report = await purge(store, RESPONSES)

    assert report.tool_sessions == 2
    for session_id in (living.response["id"], conversation_id):
        assert await store.load_tool_session(session_id, tenant=A) == {"of": A}
        assert await store.load_tool_session(session_id, tenant=B) is None


async def test_an_active_job_keeps_its_own_tenants_response_only(store: SqlResponseStore) -> None:
    [continued] = await save_chain(store, [OLD], A)
    [named_by_another_tenant] = await save_chain(store, [OLD], A)
    await add_job(
        store, "resp_job_a", finished_at=None, previous_response_id=continued.response["id"]
    )
    # B's job names an id B cannot read (another tenant's): it keeps nothing.
    await add_job(
        store,
        "resp_job_b",
        finished_at=None,
        tenant=B,
        previous_response_id=named_by_another_tenant.response["id"],
    )

    report = await purge(store, RESPONSES)

    assert report.responses == 1
    assert await store.get_response(continued.response["id"], tenant=A) is not None
    assert await store.get_response(named_by_another_tenant.response["id"], tenant=A) is None


# --------------------------------------------------------------------------- the run itself


async def build_mixed(store: SqlResponseStore) -> None:
    """Old and new chains, shared items, conversations, jobs and sessions, and two tenants'
    items of one id."""
    [owner] = await save_chain(store, [OLD])
    await save_chain(store, [OLD, OLD, NEW], stored_inputs=[owner.new_items[0]])
    old_chain = await save_chain(store, [OLD, OLD])
    await store.save_tool_session(old_chain[0].response["id"], {"state": 1}, tenant=A)
    await add_job(store, old_chain[1].response["id"], finished_at=OLD)
    await add_job(store, "resp_failed", finished_at=OLD)
    expired = await make_conversation(store, OLD)
    await store.save_response(aged(turn("in it", conversation_id=expired), OLD), tenant=A)
    await execute(
        store,
        update(conversations).where(conversations.c.id == expired).values(last_active_at=OLD),
    )
    await make_conversation(store, NEW)
    # Two tenants' own msg_1, in responses of different ages.
    await save_chain(store, [OLD, NEW], A, inputs=[client_item(A)])
    await save_chain(store, [OLD], B, inputs=[client_item(B)])
    await make_conversation(store, NEW, B, opener="msg_1")


@pytest.mark.parametrize(
    ("batch_size", "sweep_keys", "pass_keys"), [(1, 1, 1), (3, 2, 3), (500, SWEEP_KEYS, PASS_KEYS)]
)
async def test_a_dry_run_changes_nothing_and_reports_what_the_purge_then_removes(
    store: SqlResponseStore,
    batch_size: int,
    sweep_keys: int,
    pass_keys: int,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Small sweeps and passes: the items are swept between the batches of the steps, not only
    # after them, and a sweep pages through the candidates.
    monkeypatch.setattr(retention_sweep, "SWEEP_KEYS", sweep_keys)
    monkeypatch.setattr(retention_sweep, "PASS_KEYS", pass_keys)
    await build_mixed(store)
    before = await counts(store)

    dry = await purge(store, BOTH, batch_size=batch_size, dry_run=True)

    assert await counts(store) == before
    assert dry.dry_run
    assert dry.total > 0
    real = await purge(store, BOTH, batch_size=batch_size)
    assert real.counts() == dry.counts()
    after = await counts(store)
    assert before["responses"] - after["responses"] == real.responses
    assert before["items"] - after["items"] == real.items
    assert before["conversations"] - after["conversations"] == real.conversations
    assert (await purge(store, BOTH)).total == 0


async def test_an_item_sent_back_while_the_items_are_swept_stays(
    store: SqlResponseStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    [expired] = await save_chain(store, [OLD])
    sent_back = expired.new_items[0]
    again = aged(turn("again", stored_inputs=[sent_back]), int(time.time()))
    pass_over_checkpoints = PurgeSql.snapshot

    @contextlib.asynccontextmanager
    async def then_a_request(sql: PurgeSql) -> AsyncIterator[AsyncConnection]:
        async with pass_over_checkpoints(sql) as conn:
            yield conn
        # After the pass found the item unlisted, before it is deleted: a request sends it
        # back by id (``item_reference``).
        await store.save_response(again, tenant=A)

    monkeypatch.setattr(PurgeSql, "snapshot", then_a_request)

    report = await purge(store, RESPONSES)

    assert report.responses == 1
    assert report.items == len(own_ids(expired)) - 1
    kept = await stored(store, again.response["id"])
    history = await store.load_items(kept.checkpoint_ids, tenant=A)
    assert [item["id"] for item in history] == kept.checkpoint_ids
    assert history[0] == sent_back


async def test_a_purge_stopped_before_its_sweep_leaves_the_items_to_the_next(
    store: SqlResponseStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    [expired] = await save_chain(store, [OLD])

    async def stopped(_sweep: ItemSweep) -> None:
        raise asyncio.CancelledError  # the gateway stopping

    with monkeypatch.context() as patched:
        patched.setattr(ItemSweep, "sweep", stopped)
        with pytest.raises(asyncio.CancelledError):
            await purge(store, RESPONSES)
    assert await store.get_response(expired.response["id"], tenant=A) is None
    assert (await counts(store))["purge_candidates"] == len(own_ids(expired))

    dry = await purge(store, RESPONSES, dry_run=True)
    report = await purge(store, RESPONSES)

    assert dry.counts() == report.counts()
    assert (report.responses, report.items) == (0, len(own_ids(expired)))
    assert await stored_item_ids(store, own_ids(expired)) == set()
    assert (await counts(store))["purge_candidates"] == 0


async def test_a_candidate_another_purge_adds_again_meanwhile_waits_for_the_next_sweep(
    store: SqlResponseStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    root, child = await save_chain(store, [OLD, NEW])
    pass_over_checkpoints = PurgeSql.snapshot

    @contextlib.asynccontextmanager
    async def then_another_purge(sql: PurgeSql) -> AsyncIterator[AsyncConnection]:
        async with pass_over_checkpoints(sql) as conn:
            yield conn
        # The pass found the root's items listed by the child; another process purges the
        # child now and makes them candidates again (a token of its own).
        await execute(store, delete(responses).where(responses.c.id == child.response["id"]))
        await execute(store, update(purge_candidates).values(token="another purge"))

    with monkeypatch.context() as patched:
        patched.setattr(PurgeSql, "snapshot", then_another_purge)
        report = await purge(store, RESPONSES)
    assert (report.responses, report.items) == (1, 0)
    assert (await counts(store))["purge_candidates"] == len(own_ids(root))

    report = await purge(store, RESPONSES)

    assert report.items == len(own_ids(root))
    assert (await counts(store))["purge_candidates"] == 0


async def test_nothing_expires_without_a_cutoff(store: SqlResponseStore) -> None:
    await build_mixed(store)
    before = await counts(store)

    report = await purge(store, RetentionCutoffs())

    assert report.total == 0
    assert await counts(store) == before


async def test_one_process_purges_at_a_time_on_postgresql(
    request: pytest.FixtureRequest, tmp_path: Path
) -> None:
    async with sql_backend("postgres", request, tmp_path) as backend:
        store, other = backend.new_store(), backend.new_store()
        await save_chain(store, [OLD])
        async with other.db.write() as conn:
            # What a purging process holds.
            await conn.execute(select(func.pg_advisory_xact_lock(PG_PURGE_LOCK)))
            assert await SqlRetention(store.db).purge(RESPONSES) is None
        assert (await counts(store))["responses"] == 1
        assert (await purge(store, RESPONSES)).responses == 1
