"""The ``ResponseStore`` contract, tenancy (``app.core.tenancy``): what one tenant stores, another
cannot get, list, continue from, reference, change or delete; to it the id is unknown (None /
False, exactly as for an id nobody stored). Client-chosen item ids are per tenant. Every test
runs on every implementation (conftest's ``any_backend``: the tests' in-memory store, SQLite with
and without inline reads, PostgreSQL)."""

from __future__ import annotations

import asyncio

import pytest

from app.core.engines import ToolSessionStore
from app.core.ports import ResponseStore
from app.core.store_errors import ConversationNotFoundError
from tests.store.builders import ids, message, output_ids, turn

A = "tenant-a"
B = "tenant-b"


@pytest.fixture
def store(response_store: ResponseStore) -> ResponseStore:
    """Here ``store`` is every implementation (conftest's ``response_store``)."""
    return response_store


async def test_two_tenants_each_store_their_own_item_under_one_client_id(
    store: ResponseStore,
) -> None:
    mine, theirs = message("A's words", item_id="msg_1"), message("B's words", item_id="msg_1")
    a = await store.create_conversation({}, [mine], tenant=A)
    b = await store.create_conversation({}, [theirs], tenant=B)

    assert await store.conversation_items(a.id, tenant=A) == [mine]
    assert await store.conversation_items(b.id, tenant=B) == [theirs]
    assert await store.load_items(["msg_1"], tenant=A) == [mine]
    assert await store.load_items(["msg_1"], tenant=B) == [theirs]
    assert await store.get_conversation_item(b.id, "msg_1", tenant=B) == theirs
    page = await store.list_conversation_items(b.id, tenant=B, after=None, limit=10, order="asc")
    assert page is not None and page.items == [theirs]
    # a third tenant has no msg_1 at all
    assert await store.load_items(["msg_1"], tenant="tenant-c") == []
    assert await store.existing_item_ids(["msg_1"], tenant="tenant-c") == set()


async def test_a_checkpoint_resolves_within_its_tenant(store: ResponseStore) -> None:
    # Both tenants' turns carry an input item with the same id, and continue from it.
    first_a = turn(inputs=[message("from A", item_id="msg_same")])
    first_b = turn(inputs=[message("from B", item_id="msg_same")])
    await store.save_response(first_a, tenant=A)
    await store.save_response(first_b, tenant=B)

    for tenant, first in ((A, first_a), (B, first_b)):
        parent = await store.get_response(first.response["id"], tenant=tenant)
        assert parent is not None
        child = turn("next", history_ids=parent.checkpoint_ids)
        await store.save_response(child, tenant=tenant)
        stored = await store.get_response(child.response["id"], tenant=tenant)
        assert stored is not None
        history = await store.load_items(stored.checkpoint_ids, tenant=tenant)
        assert history == [*first.new_items, *child.new_items]


async def test_another_tenants_response_is_unknown(store: ResponseStore) -> None:
    new = turn("A's secret")
    await store.save_response(new, tenant=A)
    response_id = new.response["id"]
    checkpoint = [*new.input_item_ids, *output_ids(new)]

    assert await store.get_response(response_id, tenant=B) is None
    assert (
        await store.list_input_items(response_id, tenant=B, after=None, limit=10, order="asc")
        is None
    )
    assert await store.load_items(checkpoint, tenant=B) == []
    assert await store.existing_item_ids(checkpoint, tenant=B) == set()
    assert await store.delete_response(response_id, tenant=B) is False
    # A's is untouched
    stored = await store.get_response(response_id, tenant=A)
    assert stored is not None and stored.response == new.response
    assert await store.load_items(checkpoint, tenant=A) == new.new_items
    assert await store.delete_response(response_id, tenant=A) is True


async def test_another_tenants_conversation_is_unknown(store: ResponseStore) -> None:
    item = message("A's note")
    conversation = await store.create_conversation({"owner": "a"}, [item], tenant=A)
    assert isinstance(store, ToolSessionStore)  # every store is both
    await store.save_tool_session(conversation.id, {"history": []}, tenant=A)
    cid = conversation.id

    assert await store.get_conversation(cid, tenant=B) is None
    assert await store.update_conversation(cid, {"owner": "b"}, tenant=B) is None
    assert await store.conversation_items(cid, tenant=B) is None
    assert await store.append_conversation_items(cid, [message("B's")], tenant=B) is None
    assert (
        await store.list_conversation_items(cid, tenant=B, after=None, limit=10, order="asc")
        is None
    )
    assert await store.get_conversation_item(cid, item["id"], tenant=B) is None
    assert await store.delete_conversation_item(cid, item["id"], tenant=B) is False
    assert await store.delete_conversation(cid, tenant=B) is False
    # A's is untouched: its metadata, its items, its tool session
    assert await store.get_conversation(cid, tenant=A) == conversation
    assert await store.conversation_items(cid, tenant=A) == [item]
    assert await store.load_tool_session(cid, tenant=A) == {"history": []}
    assert await store.delete_conversation(cid, tenant=A) is True


async def test_a_response_cannot_join_another_tenants_conversation(store: ResponseStore) -> None:
    conversation = await store.create_conversation({}, [], tenant=A)
    intruder = turn("B's", conversation_id=conversation.id)

    with pytest.raises(ConversationNotFoundError):
        await store.save_response(intruder, tenant=B)

    assert await store.get_response(intruder.response["id"], tenant=B) is None
    assert await store.conversation_items(conversation.id, tenant=A) == []
    assert await store.load_items(ids(intruder.new_items), tenant=B) == []


async def test_concurrent_saves_of_two_tenants_each_land_in_their_own(
    store: ResponseStore,
) -> None:
    # Saves of several tenants share transactions (group commit): each keeps its tenant, and
    # the one aimed at another tenant's conversation fails alone.
    a = await store.create_conversation({}, [], tenant=A)
    b = await store.create_conversation({}, [], tenant=B)
    a_turns = [turn(f"a{n}", conversation_id=a.id) for n in range(4)]
    b_turns = [turn(f"b{n}", conversation_id=b.id) for n in range(4)]
    stray = turn("stray", conversation_id=a.id)

    results = await asyncio.gather(
        *(store.save_response(new, tenant=A) for new in a_turns),
        *(store.save_response(new, tenant=B) for new in b_turns),
        store.save_response(stray, tenant=B),
        return_exceptions=True,
    )

    assert results[:-1] == [None] * 8
    assert isinstance(results[-1], ConversationNotFoundError)
    for tenant, conversation, turns in ((A, a, a_turns), (B, b, b_turns)):
        items = await store.conversation_items(conversation.id, tenant=tenant)
        assert items is not None
        assert sorted(ids(items)) == sorted(i for new in turns for i in ids(new.new_items))
        for new in turns:
            assert await store.get_response(new.response["id"], tenant=tenant) is not None
            other = B if tenant == A else A
            assert await store.get_response(new.response["id"], tenant=other) is None
