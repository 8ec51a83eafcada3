"""What only the SQL store does, checked in its tables (SQLite and PostgreSQL): the columns of a
response row, one ``items`` row per id, an id clash rolling a save back, and the positions of a
conversation's items (contiguous, in order, never consumed by a failed append). The behaviour
every ``ResponseStore`` shares is in test_store_contract_*.py."""

from __future__ import annotations

import pytest
from sqlalchemy import func, select
from sqlalchemy.exc import IntegrityError

from app.core.store_errors import ConversationNotFoundError, ItemAlreadyInConversationError
from app.core.tenancy import DEFAULT_TENANT
from app.store.sql import SqlResponseStore
from app.store.tables import conversation_items, conversations, items, responses
from tests.store.builders import ids, message, turn
from tests.store.conftest import Backend


async def count(backend: Backend, table: object, *where: object) -> int:
    engine = backend.make_engine()
    try:
        async with engine.connect() as conn:
            query = select(func.count()).select_from(table)  # type: ignore[arg-type]
            for clause in where:
                query = query.where(clause)  # type: ignore[arg-type]
            return int((await conn.execute(query)).scalar_one())
    finally:
        await engine.dispose()


async def rows_of(backend: Backend, conversation_id: str) -> list[tuple[int, str]]:
    """(position, item_id) rows of a conversation, by position."""
    engine = backend.make_engine()
    try:
        async with engine.connect() as conn:
            result = await conn.execute(
                select(conversation_items.c.position, conversation_items.c.item_id)
                .where(conversation_items.c.conversation_id == conversation_id)
                .order_by(conversation_items.c.position)
            )
            return [(int(row[0]), str(row[1])) for row in result]
    finally:
        await engine.dispose()


async def test_response_row_columns(backend: Backend, store: SqlResponseStore) -> None:
    new = turn("x", previous_response_id="resp_parent", root_id="resp_root")
    new.response["status"] = "incomplete"
    root = turn("root")
    await store.save_response(new, tenant=DEFAULT_TENANT)
    await store.save_response(root, tenant=DEFAULT_TENANT)
    engine = backend.make_engine()
    try:
        async with engine.connect() as conn:
            row, root_row = [
                (await conn.execute(select(responses).where(responses.c.id == saved))).one()
                for saved in (new.response["id"], root.response["id"])
            ]
    finally:
        await engine.dispose()
    assert row.status == "incomplete"
    assert row.model == "gpt-test"
    assert row.previous_response_id == "resp_parent"
    assert row.conversation_id is None
    assert row.root_id == "resp_root"
    assert root_row.root_id == root.response["id"]  # a root records itself


async def test_an_item_saved_twice_is_one_row(backend: Backend, store: SqlResponseStore) -> None:
    shared = message("original")
    await store.save_response(turn(inputs=[shared]), tenant=DEFAULT_TENANT)
    await store.save_response(turn(inputs=[{**shared, "content": []}]), tenant=DEFAULT_TENANT)
    assert await count(backend, items, items.c.id == shared["id"]) == 1


async def test_save_is_atomic_when_the_response_id_exists(
    backend: Backend, store: SqlResponseStore
) -> None:
    first = turn("one")
    await store.save_response(first, tenant=DEFAULT_TENANT)
    clash = turn("two", response_id=first.response["id"])

    with pytest.raises(IntegrityError):
        await store.save_response(clash, tenant=DEFAULT_TENANT)

    assert await store.existing_item_ids(ids(clash.new_items), tenant=DEFAULT_TENANT) == set()
    stored = await store.get_response(first.response["id"], tenant=DEFAULT_TENANT)
    assert stored is not None and stored.response == first.response
    assert await count(backend, responses) == 1


async def test_delete_conversation_removes_its_rows_only(
    backend: Backend, store: SqlResponseStore
) -> None:
    keep = await store.create_conversation({}, [message("keep")], tenant=DEFAULT_TENANT)
    gone = await store.create_conversation({}, [message("a"), message("b")], tenant=DEFAULT_TENANT)
    assert await store.delete_conversation(gone.id, tenant=DEFAULT_TENANT) is True
    assert await rows_of(backend, gone.id) == []
    assert len(await rows_of(backend, keep.id)) == 1
    assert await count(backend, conversations) == 1


async def test_the_same_id_twice_takes_two_positions(
    backend: Backend, store: SqlResponseStore
) -> None:
    stored = message("msg3")
    target = await store.create_conversation({}, [], tenant=DEFAULT_TENANT)
    await store.append_conversation_items(
        target.id, [stored, {**stored, "content": "again"}], tenant=DEFAULT_TENANT
    )
    assert await rows_of(backend, target.id) == [(0, stored["id"]), (1, stored["id"])]


async def test_a_failed_append_consumes_no_position(
    backend: Backend, store: SqlResponseStore
) -> None:
    present = message("msg3")
    conversation = await store.create_conversation(
        {}, [message("msg1"), present], tenant=DEFAULT_TENANT
    )
    with pytest.raises(ItemAlreadyInConversationError):
        await store.append_conversation_items(
            conversation.id, [message("new"), present], tenant=DEFAULT_TENANT
        )
    assert len(await rows_of(backend, conversation.id)) == 2
    await store.append_conversation_items(
        conversation.id, [message("later")], tenant=DEFAULT_TENANT
    )
    assert [row[0] for row in await rows_of(backend, conversation.id)] == [0, 1, 2]


async def test_delete_item_removes_every_occurrence_row(
    backend: Backend, store: SqlResponseStore
) -> None:
    twice = message("twice")
    other = message("other")
    conversation = await store.create_conversation({}, [twice, other, twice], tenant=DEFAULT_TENANT)
    assert (
        await store.delete_conversation_item(conversation.id, twice["id"], tenant=DEFAULT_TENANT)
        is True
    )
    assert await rows_of(backend, conversation.id) == [(1, other["id"])]


async def test_a_save_appends_at_the_next_positions(
    backend: Backend, store: SqlResponseStore
) -> None:
    conversation = await store.create_conversation({}, [message("before")], tenant=DEFAULT_TENANT)
    new = turn(
        "question",
        conversation_id=conversation.id,
        inputs=[message("q1"), message("q2")],
        outputs=[message("a1", "assistant"), message("a2", "assistant")],
    )
    await store.save_response(new, tenant=DEFAULT_TENANT)
    assert [row[0] for row in await rows_of(backend, conversation.id)] == [0, 1, 2, 3, 4]


async def test_a_save_to_a_missing_conversation_writes_no_row(
    backend: Backend, store: SqlResponseStore
) -> None:
    conversation = await store.create_conversation({}, [], tenant=DEFAULT_TENANT)
    await store.delete_conversation(conversation.id, tenant=DEFAULT_TENANT)
    with pytest.raises(ConversationNotFoundError):
        await store.save_response(turn("x", conversation_id=conversation.id), tenant=DEFAULT_TENANT)
    assert await rows_of(backend, conversation.id) == []
    assert await count(backend, responses) == 0
