"""The ``ResponseStore`` contract, conversations and their items, after OpenAI's recorded
behaviour (``shared/cassettes/upstream/conversations/conversations-*-openai.yaml``). Every test
runs on every implementation (conftest's ``any_backend``: the tests' in-memory store, SQLite
with and without inline reads, PostgreSQL); what only the SQL store does (rows, positions) is in
test_sql_rows.py."""

from __future__ import annotations

import time

import pytest

from app.core.ports import ResponseStore
from app.core.store_errors import (
    ConversationNotFoundError,
    ItemAlreadyInConversationError,
    UnknownCursorError,
)
from app.core.tenancy import DEFAULT_TENANT
from app.protocol.json_types import JsonObject
from tests.store.builders import ids, message, output_ids, turn


@pytest.fixture
def store(response_store: ResponseStore) -> ResponseStore:
    """Here ``store`` is every implementation (conftest's ``response_store``)."""
    return response_store


async def walk(
    store: ResponseStore, conversation_id: str, order: str, limit: int
) -> list[JsonObject]:
    seen: list[JsonObject] = []
    after = None
    while True:
        page = await store.list_conversation_items(
            conversation_id, after=after, limit=limit, order=order, tenant=DEFAULT_TENANT
        )
        assert page is not None
        assert len(page.items) <= limit
        seen += page.items
        if not page.has_more:
            return seen
        after = seen[-1]["id"]


async def test_create_get_update_delete(store: ResponseStore) -> None:
    before = int(time.time())
    created = await store.create_conversation(
        {"topic": "demo", "a": "1"}, [], tenant=DEFAULT_TENANT
    )
    assert created.id.startswith("conv_")
    assert before <= created.created_at <= time.time()
    assert created.to_object() == {
        "id": created.id,
        "object": "conversation",
        "created_at": created.created_at,
        "metadata": {"topic": "demo", "a": "1"},
    }
    assert await store.get_conversation(created.id, tenant=DEFAULT_TENANT) == created
    assert await store.conversation_items(created.id, tenant=DEFAULT_TENANT) == []

    updated = await store.update_conversation(created.id, {"b": "2"}, tenant=DEFAULT_TENANT)
    assert updated is not None
    assert updated.metadata == {"b": "2"} and updated.created_at == created.created_at
    assert await store.get_conversation(created.id, tenant=DEFAULT_TENANT) == updated

    assert await store.delete_conversation(created.id, tenant=DEFAULT_TENANT) is True
    assert await store.get_conversation(created.id, tenant=DEFAULT_TENANT) is None
    assert await store.conversation_items(created.id, tenant=DEFAULT_TENANT) is None
    assert await store.delete_conversation(created.id, tenant=DEFAULT_TENANT) is False


async def test_missing_conversation(store: ResponseStore) -> None:
    missing = "conv_missing"
    assert await store.get_conversation(missing, tenant=DEFAULT_TENANT) is None
    assert await store.update_conversation(missing, {"a": "b"}, tenant=DEFAULT_TENANT) is None
    assert await store.delete_conversation(missing, tenant=DEFAULT_TENANT) is False
    assert await store.conversation_items(missing, tenant=DEFAULT_TENANT) is None
    assert (
        await store.append_conversation_items(missing, [message("x")], tenant=DEFAULT_TENANT)
        is None
    )
    assert (
        await store.list_conversation_items(
            missing, after=None, limit=5, order="asc", tenant=DEFAULT_TENANT
        )
        is None
    )
    assert await store.get_conversation_item(missing, "msg_x", tenant=DEFAULT_TENANT) is None
    assert await store.delete_conversation_item(missing, "msg_x", tenant=DEFAULT_TENANT) is False


async def test_append_to_missing_conversation_writes_nothing(store: ResponseStore) -> None:
    item = message("lost")
    assert (
        await store.append_conversation_items("conv_missing", [item], tenant=DEFAULT_TENANT) is None
    )
    assert await store.existing_item_ids([item["id"]], tenant=DEFAULT_TENANT) == set()


async def test_metadata_key_order_is_kept(store: ResponseStore) -> None:
    created = await store.create_conversation(
        {"z": "1", "a": "2", "m": "3"}, [], tenant=DEFAULT_TENANT
    )
    fetched = await store.get_conversation(created.id, tenant=DEFAULT_TENANT)
    assert fetched is not None and list(fetched.metadata) == ["z", "a", "m"]


async def test_create_with_items_keeps_order(store: ResponseStore) -> None:
    items = [message("one"), message("two", "assistant"), message("three")]
    created = await store.create_conversation({}, items, tenant=DEFAULT_TENANT)
    assert await store.conversation_items(created.id, tenant=DEFAULT_TENANT) == items


async def test_create_with_an_existing_item_references_it(store: ResponseStore) -> None:
    original = message("original")
    await store.create_conversation({}, [original], tenant=DEFAULT_TENANT)
    copy = {**original, "content": [{"type": "input_text", "text": "other"}]}
    second = await store.create_conversation({}, [copy, message("new")], tenant=DEFAULT_TENANT)
    listed = await store.conversation_items(second.id, tenant=DEFAULT_TENANT)
    assert listed is not None and listed[0] == original


async def test_delete_conversation_removes_its_rows_only(store: ResponseStore) -> None:
    keep = await store.create_conversation({}, [message("keep")], tenant=DEFAULT_TENANT)
    gone = await store.create_conversation({}, [message("a"), message("b")], tenant=DEFAULT_TENANT)
    gone_items = await store.conversation_items(gone.id, tenant=DEFAULT_TENANT)
    assert gone_items is not None

    assert await store.delete_conversation(gone.id, tenant=DEFAULT_TENANT) is True

    assert await store.conversation_items(gone.id, tenant=DEFAULT_TENANT) is None
    assert await store.get_conversation(keep.id, tenant=DEFAULT_TENANT) is not None
    assert len(await store.conversation_items(keep.id, tenant=DEFAULT_TENANT) or []) == 1
    # The items stay: responses' checkpoints may name them.
    assert await store.load_items(ids(gone_items), tenant=DEFAULT_TENANT) == gone_items


async def test_append_returns_stored_payloads(store: ResponseStore) -> None:
    # t13 of conversations-edge-cases-openai: appending an id that is already stored (from
    # another conversation) returns and lists the STORED item, not the given payload.
    stored = message("msg3")
    first = await store.create_conversation({}, [stored], tenant=DEFAULT_TENANT)
    second = await store.create_conversation({}, [], tenant=DEFAULT_TENANT)
    probe = {**stored, "content": "Duplicate ID probe: first copy."}
    fresh = message("fresh")

    appended = await store.append_conversation_items(
        second.id, [probe, fresh], tenant=DEFAULT_TENANT
    )

    assert appended == [stored, fresh]
    assert await store.conversation_items(second.id, tenant=DEFAULT_TENANT) == [stored, fresh]
    assert await store.conversation_items(first.id, tenant=DEFAULT_TENANT) == [stored]


async def test_append_the_same_id_twice_in_one_call(store: ResponseStore) -> None:
    # t16: two copies of one id in one request are both appended, both as the stored item.
    stored = message("msg3")
    await store.create_conversation({}, [stored], tenant=DEFAULT_TENANT)
    target = await store.create_conversation({}, [], tenant=DEFAULT_TENANT)
    first = {**stored, "content": "Duplicate ID probe: first copy."}
    second = {**stored, "content": "Duplicate ID probe: second copy."}

    appended = await store.append_conversation_items(
        target.id, [first, second], tenant=DEFAULT_TENANT
    )

    assert appended == [stored, stored]
    assert await store.conversation_items(target.id, tenant=DEFAULT_TENANT) == [stored, stored]
    page = await store.list_conversation_items(
        target.id, after=None, limit=20, order="asc", tenant=DEFAULT_TENANT
    )
    assert page is not None and page.items == [stored, stored]


async def test_append_new_id_twice_in_one_call_stores_the_first(store: ResponseStore) -> None:
    conversation = await store.create_conversation({}, [], tenant=DEFAULT_TENANT)
    item = message("first copy")
    again = {**item, "content": "second copy"}
    appended = await store.append_conversation_items(
        conversation.id, [item, again], tenant=DEFAULT_TENANT
    )
    assert appended == [item, item]


async def test_append_an_item_already_in_the_conversation_fails_atomically(
    store: ResponseStore,
) -> None:
    # t18: item_already_in_conversation, and nothing of that request is written.
    present = message("msg3")
    conversation = await store.create_conversation(
        {}, [message("msg1"), present], tenant=DEFAULT_TENANT
    )
    newcomer = message("never stored")

    with pytest.raises(ItemAlreadyInConversationError):
        await store.append_conversation_items(
            conversation.id, [newcomer, present], tenant=DEFAULT_TENANT
        )

    assert await store.existing_item_ids([newcomer["id"]], tenant=DEFAULT_TENANT) == set()
    assert len(await store.conversation_items(conversation.id, tenant=DEFAULT_TENANT) or []) == 2
    # The next append follows on.
    later = message("later")
    assert await store.append_conversation_items(
        conversation.id, [later], tenant=DEFAULT_TENANT
    ) == [later]
    listed = await store.conversation_items(conversation.id, tenant=DEFAULT_TENANT)
    assert listed is not None and ids(listed)[1:] == [present["id"], later["id"]]


async def test_append_nothing(store: ResponseStore) -> None:
    conversation = await store.create_conversation({}, [message("a")], tenant=DEFAULT_TENANT)
    assert await store.append_conversation_items(conversation.id, [], tenant=DEFAULT_TENANT) == []
    assert len(await store.conversation_items(conversation.id, tenant=DEFAULT_TENANT) or []) == 1


class TestListItems:
    async def _conversation(self, store: ResponseStore, count: int = 5) -> list[JsonObject]:
        items = [message(f"m{i}", "user" if i % 2 == 0 else "assistant") for i in range(count)]
        conversation = await store.create_conversation({}, items[:2], tenant=DEFAULT_TENANT)
        assert (
            await store.append_conversation_items(conversation.id, items[2:], tenant=DEFAULT_TENANT)
            == items[2:]
        )
        self.conversation_id = conversation.id
        return items

    async def test_orders(self, store: ResponseStore) -> None:
        items = await self._conversation(store)
        for order, expected in (("asc", items), ("desc", items[::-1])):
            page = await store.list_conversation_items(
                self.conversation_id, after=None, limit=20, order=order, tenant=DEFAULT_TENANT
            )
            assert page is not None
            assert page.items == expected and page.has_more is False

    async def test_limit_and_has_more(self, store: ResponseStore) -> None:
        # t9 of conversations-edge-cases-openai: limit=2 of 3 (desc) -> msg3, msg2, has_more.
        items = await self._conversation(store, 3)
        page = await store.list_conversation_items(
            self.conversation_id, after=None, limit=2, order="desc", tenant=DEFAULT_TENANT
        )
        assert page is not None
        assert page.items == [items[2], items[1]] and page.has_more is True
        page = await store.list_conversation_items(
            self.conversation_id, after=None, limit=3, order="desc", tenant=DEFAULT_TENANT
        )
        assert page is not None and page.has_more is False

    async def test_after(self, store: ResponseStore) -> None:
        # conversations-pagination-openai t6 / t9
        items = await self._conversation(store, 3)
        page = await store.list_conversation_items(
            self.conversation_id, after=items[1]["id"], limit=2, order="asc", tenant=DEFAULT_TENANT
        )
        assert page is not None
        assert page.items == [items[2]] and page.has_more is False
        page = await store.list_conversation_items(
            self.conversation_id, after=items[1]["id"], limit=2, order="desc", tenant=DEFAULT_TENANT
        )
        assert page is not None
        assert page.items == [items[0]] and page.has_more is False
        page = await store.list_conversation_items(
            self.conversation_id, after=items[2]["id"], limit=2, order="asc", tenant=DEFAULT_TENANT
        )
        assert page is not None
        assert page.items == [] and page.has_more is False

    @pytest.mark.parametrize("limit", [1, 2, 3, 7, 100])
    async def test_walking_pages_lists_everything_once(
        self, store: ResponseStore, limit: int
    ) -> None:
        items = await self._conversation(store, 7)
        assert await walk(store, self.conversation_id, "asc", limit) == items
        assert await walk(store, self.conversation_id, "desc", limit) == items[::-1]

    async def test_unknown_after(self, store: ResponseStore) -> None:
        await self._conversation(store)
        with pytest.raises(UnknownCursorError):
            await store.list_conversation_items(
                self.conversation_id,
                after="msg_unknown",
                limit=2,
                order="asc",
                tenant=DEFAULT_TENANT,
            )

    async def test_after_an_item_of_another_conversation(self, store: ResponseStore) -> None:
        await self._conversation(store)
        other = await store.create_conversation({}, [message("elsewhere")], tenant=DEFAULT_TENANT)
        other_items = await store.conversation_items(other.id, tenant=DEFAULT_TENANT)
        assert other_items is not None
        with pytest.raises(UnknownCursorError):
            await store.list_conversation_items(
                self.conversation_id,
                after=other_items[0]["id"],
                limit=2,
                order="asc",
                tenant=DEFAULT_TENANT,
            )

    async def test_empty(self, store: ResponseStore) -> None:
        conversation = await store.create_conversation({}, [], tenant=DEFAULT_TENANT)
        page = await store.list_conversation_items(
            conversation.id, after=None, limit=20, order="desc", tenant=DEFAULT_TENANT
        )
        assert page is not None and page.items == [] and page.has_more is False

    async def test_repeated_item_pages_terminate(self, store: ResponseStore) -> None:
        stored = message("twice")
        conversation = await store.create_conversation(
            {}, [stored, stored, message("end")], tenant=DEFAULT_TENANT
        )
        # ``after`` names an id, not a position: the cursor is its last occurrence in the
        # order asked for, so paging always moves forward and ends.
        for order in ("asc", "desc"):
            listed = await walk(store, conversation.id, order, 1)
            assert 1 <= len(listed) <= 3


class TestItem:
    async def test_get(self, store: ResponseStore) -> None:
        item = message("hello")
        conversation = await store.create_conversation({}, [item], tenant=DEFAULT_TENANT)
        other = await store.create_conversation({}, [], tenant=DEFAULT_TENANT)
        assert (
            await store.get_conversation_item(conversation.id, item["id"], tenant=DEFAULT_TENANT)
            == item
        )
        assert (
            await store.get_conversation_item(conversation.id, "msg_missing", tenant=DEFAULT_TENANT)
            is None
        )
        # Stored, but not in that conversation.
        assert (
            await store.get_conversation_item(other.id, item["id"], tenant=DEFAULT_TENANT) is None
        )

    async def test_delete(self, store: ResponseStore) -> None:
        # conversations-deletion-openai / edge-cases t10-t11: the item leaves the list, an
        # ``after`` naming it is then unknown; the payload stays stored.
        items = [message("msg1"), message("msg2"), message("msg3")]
        conversation = await store.create_conversation({}, items, tenant=DEFAULT_TENANT)

        assert (
            await store.delete_conversation_item(
                conversation.id, items[1]["id"], tenant=DEFAULT_TENANT
            )
            is True
        )

        assert await store.conversation_items(conversation.id, tenant=DEFAULT_TENANT) == [
            items[0],
            items[2],
        ]
        page = await store.list_conversation_items(
            conversation.id, after=None, limit=20, order="asc", tenant=DEFAULT_TENANT
        )
        assert page is not None and page.items == [items[0], items[2]]
        with pytest.raises(UnknownCursorError):
            await store.list_conversation_items(
                conversation.id, after=items[1]["id"], limit=2, order="desc", tenant=DEFAULT_TENANT
            )
        assert (
            await store.get_conversation_item(
                conversation.id, items[1]["id"], tenant=DEFAULT_TENANT
            )
            is None
        )
        assert (
            await store.delete_conversation_item(
                conversation.id, items[1]["id"], tenant=DEFAULT_TENANT
            )
            is False
        )
        assert await store.load_items([items[1]["id"]], tenant=DEFAULT_TENANT) == [items[1]]

    async def test_delete_removes_every_occurrence(self, store: ResponseStore) -> None:
        twice = message("twice")
        other = message("other")
        conversation = await store.create_conversation(
            {}, [twice, other, twice], tenant=DEFAULT_TENANT
        )
        assert (
            await store.delete_conversation_item(
                conversation.id, twice["id"], tenant=DEFAULT_TENANT
            )
            is True
        )
        assert await store.conversation_items(conversation.id, tenant=DEFAULT_TENANT) == [other]
        # Deleted, the item may be appended again.
        assert await store.append_conversation_items(
            conversation.id, [twice], tenant=DEFAULT_TENANT
        ) == [twice]
        assert await store.conversation_items(conversation.id, tenant=DEFAULT_TENANT) == [
            other,
            twice,
        ]


class TestResponsesInConversations:
    async def test_save_appends_input_then_output(self, store: ResponseStore) -> None:
        seed = [message("before")]
        conversation = await store.create_conversation({}, seed, tenant=DEFAULT_TENANT)
        new = turn(
            "question",
            history_ids=ids(seed),
            conversation_id=conversation.id,
            inputs=[message("q1"), message("q2")],
            outputs=[message("a1", "assistant"), message("a2", "assistant")],
        )

        await store.save_response(new, tenant=DEFAULT_TENANT)

        listed = await store.conversation_items(conversation.id, tenant=DEFAULT_TENANT)
        assert listed == [*seed, *new.new_items]
        stored = await store.get_response(new.response["id"], tenant=DEFAULT_TENANT)
        assert stored is not None
        assert stored.conversation_id == conversation.id
        assert stored.checkpoint_ids == [*ids(seed), *new.input_item_ids, *output_ids(new)]
        assert stored.response["conversation"] == {"id": conversation.id}

    async def test_save_appends_referenced_items_too(self, store: ResponseStore) -> None:
        conversation = await store.create_conversation({}, [], tenant=DEFAULT_TENANT)
        elsewhere = message("stored elsewhere")
        await store.save_response(turn(inputs=[elsewhere]), tenant=DEFAULT_TENANT)
        new = turn("x", conversation_id=conversation.id, stored_inputs=[elsewhere])
        await store.save_response(new, tenant=DEFAULT_TENANT)
        listed = await store.conversation_items(conversation.id, tenant=DEFAULT_TENANT)
        assert listed == [elsewhere, *new.new_items]

    async def test_save_to_a_missing_conversation_writes_nothing(
        self, store: ResponseStore
    ) -> None:
        # Deleted between rehydration and persistence: the whole save rolls back.
        conversation = await store.create_conversation({}, [], tenant=DEFAULT_TENANT)
        await store.delete_conversation(conversation.id, tenant=DEFAULT_TENANT)
        new = turn("x", conversation_id=conversation.id)

        with pytest.raises(ConversationNotFoundError):
            await store.save_response(new, tenant=DEFAULT_TENANT)

        assert await store.get_response(new.response["id"], tenant=DEFAULT_TENANT) is None
        assert await store.existing_item_ids(ids(new.new_items), tenant=DEFAULT_TENANT) == set()
        assert await store.conversation_items(conversation.id, tenant=DEFAULT_TENANT) is None

    async def test_deleting_a_response_keeps_the_conversation(self, store: ResponseStore) -> None:
        conversation = await store.create_conversation({}, [], tenant=DEFAULT_TENANT)
        new = turn("x", conversation_id=conversation.id)
        await store.save_response(new, tenant=DEFAULT_TENANT)
        assert await store.delete_response(new.response["id"], tenant=DEFAULT_TENANT) is True
        assert (
            await store.conversation_items(conversation.id, tenant=DEFAULT_TENANT) == new.new_items
        )
