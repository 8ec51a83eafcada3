"""The ``ResponseStore`` contract, responses: items and checkpoints, ``list_input_items``
paging, ``aclose``. Every test runs on every implementation (conftest's ``any_backend``: the
tests' in-memory store, SQLite with and without inline reads, PostgreSQL); what only the SQL
store does is in test_sql_rows.py."""

from __future__ import annotations

import pytest

from app.core.ids import new_id
from app.core.ports import ResponseStore
from app.core.store_errors import UnknownCursorError
from app.core.tenancy import DEFAULT_TENANT
from tests.store.builders import function_call, ids, message, output_ids, turn
from tests.store.conftest import Backend, MemoryBackend


@pytest.fixture
def store(response_store: ResponseStore) -> ResponseStore:
    """Here ``store`` is every implementation (conftest's ``response_store``)."""
    return response_store


async def test_save_then_get_response(store: ResponseStore) -> None:
    first = turn("hello")
    await store.save_response(first, tenant=DEFAULT_TENANT)
    stored = await store.get_response(first.response["id"], tenant=DEFAULT_TENANT)

    assert stored is not None
    assert stored.id == first.response["id"]
    assert stored.response == first.response
    assert stored.input_item_ids == first.input_item_ids
    assert stored.checkpoint_ids == [*first.input_item_ids, *output_ids(first)]
    assert stored.conversation_id is None
    assert stored.created_at == first.response["created_at"]


async def test_checkpoint_is_history_then_input_then_output(store: ResponseStore) -> None:
    first = turn("one", outputs=[function_call()])
    await store.save_response(first, tenant=DEFAULT_TENANT)
    parent = await store.get_response(first.response["id"], tenant=DEFAULT_TENANT)
    assert parent is not None
    second = turn(
        "two",
        history_ids=parent.checkpoint_ids,
        previous_response_id=parent.id,
        outputs=[message("a", "assistant"), message("b", "assistant")],
    )
    await store.save_response(second, tenant=DEFAULT_TENANT)

    child = await store.get_response(second.response["id"], tenant=DEFAULT_TENANT)
    assert child is not None
    assert child.checkpoint_ids == [
        *parent.checkpoint_ids,
        *second.input_item_ids,
        *output_ids(second),
    ]
    assert child.input_item_ids == second.input_item_ids
    history = await store.load_items(child.checkpoint_ids, tenant=DEFAULT_TENANT)
    assert history == [*first.new_items, *second.new_items]


async def test_get_unknown_response_is_none(store: ResponseStore) -> None:
    assert await store.get_response("resp_unknown", tenant=DEFAULT_TENANT) is None


async def test_json_key_order_and_values_survive(store: ResponseStore) -> None:
    item = {
        "type": "message",
        "id": new_id("msg"),
        "zeta": 1,
        "alpha": {"y": [1, 2.5, None, True], "b": "é ünïcode ✓", "a": {}},
        "role": "user",
        "content": [{"text": "hi", "type": "input_text"}],
    }
    new = turn(inputs=[item])
    new.response["zz_last_key"] = {"b": 1, "a": 2}
    await store.save_response(new, tenant=DEFAULT_TENANT)

    stored = await store.get_response(new.response["id"], tenant=DEFAULT_TENANT)
    assert stored is not None
    assert list(stored.response) == list(new.response)
    assert list(stored.response["zz_last_key"]) == ["b", "a"]
    [loaded] = await store.load_items([item["id"]], tenant=DEFAULT_TENANT)
    assert loaded == item
    assert list(loaded) == list(item)
    assert list(loaded["alpha"]) == ["y", "b", "a"]


async def test_load_items_order_duplicates_and_missing(store: ResponseStore) -> None:
    new = turn(inputs=[message("a"), message("b"), message("c")])
    await store.save_response(new, tenant=DEFAULT_TENANT)
    a, b, c = new.input_item_ids

    loaded = await store.load_items([c, "msg_missing", a, c, b, a], tenant=DEFAULT_TENANT)

    assert ids(loaded) == [c, a, c, b, a]
    assert loaded[0] == loaded[2]
    assert loaded[0] is not loaded[2]  # a repeated item is its own object
    assert await store.load_items([], tenant=DEFAULT_TENANT) == []
    assert await store.load_items(["msg_missing"], tenant=DEFAULT_TENANT) == []


async def test_existing_item_ids(store: ResponseStore) -> None:
    new = turn()
    await store.save_response(new, tenant=DEFAULT_TENANT)
    known = new.input_item_ids[0]
    assert await store.existing_item_ids([known, "msg_nope", known], tenant=DEFAULT_TENANT) == {
        known
    }
    assert await store.existing_item_ids([], tenant=DEFAULT_TENANT) == set()


async def test_items_are_stored_once_and_referenced(store: ResponseStore) -> None:
    shared = message("original")
    first = turn(inputs=[shared])
    await store.save_response(first, tenant=DEFAULT_TENANT)
    # The same id again, with another payload: referenced, never copied or overwritten.
    impostor = {**shared, "content": [{"type": "input_text", "text": "changed"}]}
    second = turn(inputs=[impostor])
    await store.save_response(second, tenant=DEFAULT_TENANT)

    [loaded] = await store.load_items([shared["id"]], tenant=DEFAULT_TENANT)
    assert loaded == shared
    stored = await store.get_response(second.response["id"], tenant=DEFAULT_TENANT)
    assert stored is not None
    assert stored.input_item_ids == [shared["id"]]


async def test_referenced_input_items_are_not_in_new_items(store: ResponseStore) -> None:
    first = turn("one")
    await store.save_response(first, tenant=DEFAULT_TENANT)
    reused = first.new_items[0]
    second = turn("two", stored_inputs=[reused])
    await store.save_response(second, tenant=DEFAULT_TENANT)
    stored = await store.get_response(second.response["id"], tenant=DEFAULT_TENANT)
    assert stored is not None
    assert stored.input_item_ids[0] == reused["id"]
    assert await store.load_items(stored.input_item_ids, tenant=DEFAULT_TENANT) == [
        reused,
        second.new_items[0],
    ]


async def test_delete_response_keeps_items(store: ResponseStore) -> None:
    first = turn("one")
    await store.save_response(first, tenant=DEFAULT_TENANT)
    parent = await store.get_response(first.response["id"], tenant=DEFAULT_TENANT)
    assert parent is not None
    second = turn("two", history_ids=parent.checkpoint_ids, previous_response_id=parent.id)
    await store.save_response(second, tenant=DEFAULT_TENANT)

    assert await store.delete_response(parent.id, tenant=DEFAULT_TENANT) is True
    assert await store.get_response(parent.id, tenant=DEFAULT_TENANT) is None
    assert await store.delete_response(parent.id, tenant=DEFAULT_TENANT) is False
    assert await store.delete_response("resp_unknown", tenant=DEFAULT_TENANT) is False
    # The child stays continuable: its checkpoint is flat and the items stay.
    child = await store.get_response(second.response["id"], tenant=DEFAULT_TENANT)
    assert child is not None
    assert await store.load_items(child.checkpoint_ids, tenant=DEFAULT_TENANT) == [
        *first.new_items,
        *second.new_items,
    ]


async def test_rehydrates_a_1000_item_checkpoint_in_order(store: ResponseStore) -> None:
    history = [message(f"turn {i}", "user" if i % 2 == 0 else "assistant") for i in range(998)]
    seed = turn(inputs=history[:-1], outputs=history[-1:])
    await store.save_response(seed, tenant=DEFAULT_TENANT)
    parent = await store.get_response(seed.response["id"], tenant=DEFAULT_TENANT)
    assert parent is not None
    new = turn("last", history_ids=parent.checkpoint_ids, previous_response_id=parent.id)
    await store.save_response(new, tenant=DEFAULT_TENANT)

    stored = await store.get_response(new.response["id"], tenant=DEFAULT_TENANT)
    assert stored is not None
    assert len(stored.checkpoint_ids) == 1_000
    loaded = await store.load_items(stored.checkpoint_ids, tenant=DEFAULT_TENANT)
    assert loaded == [*history, *new.new_items]


async def test_load_items_beyond_bound_parameter_limits(store: ResponseStore) -> None:
    many = [message(str(i)) for i in range(40_000)]
    new = turn(inputs=many[:-1], outputs=many[-1:])
    await store.save_response(new, tenant=DEFAULT_TENANT)
    wanted = [item["id"] for item in reversed(many)]
    loaded = await store.load_items(wanted, tenant=DEFAULT_TENANT)
    assert ids(loaded) == wanted
    assert len(await store.existing_item_ids(wanted, tenant=DEFAULT_TENANT)) == 40_000


class TestInputItems:
    async def _saved(self, store: ResponseStore, count: int = 5) -> list[str]:
        new = turn(inputs=[message(f"m{i}") for i in range(count)])
        await store.save_response(new, tenant=DEFAULT_TENANT)
        self.response_id = new.response["id"]
        return new.input_item_ids

    async def test_orders_and_limits(self, store: ResponseStore) -> None:
        input_ids = await self._saved(store)
        page = await store.list_input_items(
            self.response_id, after=None, limit=20, order="asc", tenant=DEFAULT_TENANT
        )
        assert page is not None
        assert ids(page.items) == input_ids and page.has_more is False
        page = await store.list_input_items(
            self.response_id, after=None, limit=2, order="desc", tenant=DEFAULT_TENANT
        )
        assert page is not None
        assert ids(page.items) == input_ids[::-1][:2] and page.has_more is True

    async def test_after_walks_every_page(self, store: ResponseStore) -> None:
        input_ids = await self._saved(store)
        for order, expected in (("asc", input_ids), ("desc", input_ids[::-1])):
            seen: list[str] = []
            after = None
            while True:
                page = await store.list_input_items(
                    self.response_id, after=after, limit=2, order=order, tenant=DEFAULT_TENANT
                )
                assert page is not None
                seen += ids(page.items)
                if not page.has_more:
                    break
                after = seen[-1]
            assert seen == expected

    async def test_exact_fit_has_no_more(self, store: ResponseStore) -> None:
        input_ids = await self._saved(store, 4)
        page = await store.list_input_items(
            self.response_id, after=input_ids[1], limit=2, order="asc", tenant=DEFAULT_TENANT
        )
        assert page is not None
        assert ids(page.items) == input_ids[2:] and page.has_more is False
        page = await store.list_input_items(
            self.response_id, after=input_ids[-1], limit=2, order="asc", tenant=DEFAULT_TENANT
        )
        assert page is not None
        assert page.items == [] and page.has_more is False

    async def test_unknown_after_and_unknown_response(self, store: ResponseStore) -> None:
        await self._saved(store)
        with pytest.raises(UnknownCursorError):
            await store.list_input_items(
                self.response_id, after="msg_x", limit=2, order="asc", tenant=DEFAULT_TENANT
            )
        assert (
            await store.list_input_items(
                "resp_unknown", after=None, limit=2, order="asc", tenant=DEFAULT_TENANT
            )
        ) is None

    async def test_no_input(self, store: ResponseStore) -> None:
        new = turn(inputs=[])
        await store.save_response(new, tenant=DEFAULT_TENANT)
        page = await store.list_input_items(
            new.response["id"], after=None, limit=20, order="desc", tenant=DEFAULT_TENANT
        )
        assert page is not None
        assert page.items == [] and page.has_more is False


async def test_aclose_keeps_what_was_saved(any_backend: Backend | MemoryBackend) -> None:
    store = any_backend.new_store()
    new = turn("kept")
    await store.save_response(new, tenant=DEFAULT_TENANT)
    await store.aclose()
    if isinstance(any_backend, Backend):
        any_backend.stores.remove(store)  # closed here, not again at teardown
    reopened = any_backend.new_store()
    stored = await reopened.get_response(new.response["id"], tenant=DEFAULT_TENANT)
    assert stored is not None and stored.response == new.response
    assert await reopened.load_items(stored.checkpoint_ids, tenant=DEFAULT_TENANT) == new.new_items


async def test_the_root_of_a_chain_of_three_survives(store: ResponseStore) -> None:
    first = turn("one")
    await store.save_response(first, tenant=DEFAULT_TENANT)  # no root given: its own
    root = await store.get_response(first.response["id"], tenant=DEFAULT_TENANT)
    assert root is not None and root.root_id == root.id
    parent = root
    for text in ("two", "three"):
        new = turn(
            text,
            history_ids=parent.checkpoint_ids,
            previous_response_id=parent.id,
            root_id=parent.root_id,
        )
        await store.save_response(new, tenant=DEFAULT_TENANT)
        child = await store.get_response(new.response["id"], tenant=DEFAULT_TENANT)
        assert child is not None
        assert child.root_id == root.id
        parent = child

    assert await store.delete_response(root.id, tenant=DEFAULT_TENANT) is True
    # the chain keeps its root's id
    last = await store.get_response(parent.id, tenant=DEFAULT_TENANT)
    assert last is not None and last.root_id == root.id
