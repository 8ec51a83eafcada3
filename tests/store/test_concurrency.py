"""Concurrent writers (SQLite and PostgreSQL): appends to one conversation all land, each
request's items contiguous, in a defined order, with none lost, also across several stores
(engines) on one database, as several gateway processes would be."""

from __future__ import annotations

import asyncio
from collections import Counter

import pytest
from sqlalchemy import select

from app.core.ports import NewResponse
from app.core.store_errors import ConversationNotFoundError, ItemAlreadyInConversationError
from app.core.tenancy import DEFAULT_TENANT
from app.store.sql import SqlResponseStore
from app.store.tables import conversation_items
from tests.store.builders import ids, message, output_ids, turn
from tests.store.conftest import Backend


async def positions(backend: Backend, conversation_id: str) -> list[tuple[int, str]]:
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


def assert_blocks_contiguous(rows: list[tuple[int, str]], blocks: list[list[str]]) -> None:
    """Positions are consecutive, and every block (one request's ids) sits in one piece, in
    order."""
    first = rows[0][0] if rows else 0
    assert [position for position, _ in rows] == list(range(first, first + len(rows)))
    listed = [item_id for _, item_id in rows]
    assert Counter(listed) == Counter(item_id for block in blocks for item_id in block)
    for block in blocks:
        start = listed.index(block[0])
        assert listed[start : start + len(block)] == block


def conversation_turn(conversation_id: str, n: int) -> NewResponse:
    return turn(
        f"q{n}",
        conversation_id=conversation_id,
        inputs=[message(f"q{n}a"), message(f"q{n}b")],
        outputs=[message(f"a{n}", "assistant")],
    )


def block_of(new: NewResponse) -> list[str]:
    return [*new.input_item_ids, *output_ids(new)]


async def test_concurrent_saves_to_one_conversation(
    backend: Backend, store: SqlResponseStore
) -> None:
    conversation = await store.create_conversation({}, [message("seed")], tenant=DEFAULT_TENANT)
    turns = [conversation_turn(conversation.id, n) for n in range(20)]

    await asyncio.gather(*(store.save_response(new, tenant=DEFAULT_TENANT) for new in turns))

    rows = await positions(backend, conversation.id)
    assert len(rows) == 1 + 20 * 3
    assert_blocks_contiguous(rows[1:], [block_of(new) for new in turns])
    for new in turns:
        assert await store.get_response(new.response["id"], tenant=DEFAULT_TENANT) is not None


async def test_concurrent_writers_across_stores(backend: Backend) -> None:
    stores = [backend.new_store() for _ in range(3)]
    conversation = await stores[0].create_conversation({}, [], tenant=DEFAULT_TENANT)
    turns = [conversation_turn(conversation.id, n) for n in range(30)]
    appended = [[message(f"direct {n}"), message(f"direct {n}'")] for n in range(9)]

    await asyncio.gather(
        *(stores[n % 3].save_response(new, tenant=DEFAULT_TENANT) for n, new in enumerate(turns)),
        *(
            stores[n % 3].append_conversation_items(conversation.id, pair, tenant=DEFAULT_TENANT)
            for n, pair in enumerate(appended)
        ),
    )

    rows = await positions(backend, conversation.id)
    assert len(rows) == 30 * 3 + 9 * 2
    assert_blocks_contiguous(rows, [*(block_of(new) for new in turns), *map(ids, appended)])
    listed = await stores[1].conversation_items(conversation.id, tenant=DEFAULT_TENANT)
    assert listed is not None and ids(listed) == [item_id for _, item_id in rows]


async def test_concurrent_saves_to_many_conversations(
    backend: Backend, store: SqlResponseStore
) -> None:
    conversations = [
        (await store.create_conversation({}, [], tenant=DEFAULT_TENANT)).id for _ in range(5)
    ]
    turns = [conversation_turn(conversations[n % 5], n) for n in range(40)]

    await asyncio.gather(*(store.save_response(new, tenant=DEFAULT_TENANT) for new in turns))

    for conversation_id in conversations:
        mine = [new for new in turns if new.conversation_id == conversation_id]
        rows = await positions(backend, conversation_id)
        assert_blocks_contiguous(rows, [block_of(new) for new in mine])


async def test_concurrent_appends_of_one_item_only_one_wins(backend: Backend) -> None:
    first, second = backend.new_store(), backend.new_store()
    conversation = await first.create_conversation({}, [], tenant=DEFAULT_TENANT)
    item = message("contested")

    results = await asyncio.gather(
        *(
            store.append_conversation_items(conversation.id, [item], tenant=DEFAULT_TENANT)
            for store in (first, second, first, second)
        ),
        return_exceptions=True,
    )

    assert sum(result == [item] for result in results) == 1
    errors = [result for result in results if isinstance(result, BaseException)]
    assert len(errors) == 3
    assert all(isinstance(error, ItemAlreadyInConversationError) for error in errors)
    assert await positions(backend, conversation.id) == [(0, item["id"])]


async def test_a_failing_save_does_not_fail_its_neighbours(store: SqlResponseStore) -> None:
    """Concurrent saves share transactions (group commit); a bad one is retried alone and
    fails alone."""
    conversation = await store.create_conversation({}, [], tenant=DEFAULT_TENANT)
    existing = turn("already saved")
    await store.save_response(existing, tenant=DEFAULT_TENANT)
    good = [conversation_turn(conversation.id, n) for n in range(10)]
    missing_conversation = turn("x", conversation_id="conv_missing")
    duplicate_id = turn("y", response_id=existing.response["id"])

    results = await asyncio.gather(
        *(store.save_response(new, tenant=DEFAULT_TENANT) for new in good[:5]),
        store.save_response(missing_conversation, tenant=DEFAULT_TENANT),
        store.save_response(duplicate_id, tenant=DEFAULT_TENANT),
        *(store.save_response(new, tenant=DEFAULT_TENANT) for new in good[5:]),
        return_exceptions=True,
    )

    assert results[:5] == [None] * 5 and results[7:] == [None] * 5
    assert isinstance(results[5], ConversationNotFoundError)
    assert results[5].object_id == "conv_missing"
    assert isinstance(results[6], Exception)
    assert not isinstance(results[6], ConversationNotFoundError)
    for new in good:
        assert await store.get_response(new.response["id"], tenant=DEFAULT_TENANT) is not None
    assert (
        await store.get_response(missing_conversation.response["id"], tenant=DEFAULT_TENANT) is None
    )
    assert (
        await store.existing_item_ids(ids(missing_conversation.new_items), tenant=DEFAULT_TENANT)
        == set()
    )
    assert (
        await store.existing_item_ids(ids(duplicate_id.new_items), tenant=DEFAULT_TENANT) == set()
    )
    listed = await store.conversation_items(conversation.id, tenant=DEFAULT_TENANT)
    assert listed is not None and len(listed) == 30


async def test_concurrent_saves_sharing_new_items(store: SqlResponseStore) -> None:
    """The same new item in concurrent requests (a client re-sending an item with its id):
    stored once, referenced by both."""
    shared = message("shared")
    turns = [turn(inputs=[shared, message(f"own {n}")]) for n in range(8)]
    await asyncio.gather(*(store.save_response(new, tenant=DEFAULT_TENANT) for new in turns))
    for new in turns:
        stored = await store.get_response(new.response["id"], tenant=DEFAULT_TENANT)
        assert stored is not None
        assert (await store.load_items(stored.checkpoint_ids, tenant=DEFAULT_TENANT))[0] == shared


@pytest.mark.parametrize("rounds", [3])
async def test_reads_during_writes(store: SqlResponseStore, rounds: int) -> None:
    conversation = await store.create_conversation({}, [], tenant=DEFAULT_TENANT)
    for round_ in range(rounds):
        turns = [conversation_turn(conversation.id, round_ * 10 + n) for n in range(10)]
        reads = [
            store.conversation_items(conversation.id, tenant=DEFAULT_TENANT) for _ in range(10)
        ]
        results = await asyncio.gather(
            *(store.save_response(t, tenant=DEFAULT_TENANT) for t in turns), *reads
        )
        for listed in results[10:]:
            assert listed is not None and len(listed) % 3 == 0  # whole requests only
