"""The ``ResponseStore`` contract, responses: items and checkpoints, ``list_input_items``
paging, ``aclose``. Every test runs on every implementation (conftest's ``any_backend``: the
tests' in-memory store, SQLite with and without inline reads, PostgreSQL); what only the SQL
store does is in test_sql_rows.py."""

from __future__ import annotations

import pytest

from app.core.ids import new_id
from app.core.ports import ResponseStore
from app.core.store_errors import UnknownCursorError
from tests.store.builders import function_call, ids, message, output_ids, turn
from tests.store.conftest import Backend, MemoryBackend


@pytest.fixture
def store(response_store: ResponseStore) -> ResponseStore:
    """Here ``store`` is every implementation (conftest's ``response_store``)."""
    return response_store


async def test_save_then_get_response(store: ResponseStore) -> None:
    first = turn("hello")
    await store.save_response(first)
    stored = await store.get_response(first.response["id"])

    assert stored is not None
    assert stored.id == first.response["id"]
    assert stored.response == first.response
    assert stored.input_item_ids == first.input_item_ids
    assert stored.checkpoint_ids == [*first.input_item_ids, *output_ids(first)]
    assert stored.conversation_id is None
    assert stored.created_at == first.response["created_at"]


async def test_checkpoint_is_history_then_input_then_output(store: ResponseStore) -> None:
    first = turn("one", outputs=[function_call()])
    await store.save_response(first)
    parent = await store.get_response(first.response["id"])
    assert parent is not None
    second = turn(
        "two",
        history_ids=parent.checkpoint_ids,
        previous_response_id=parent.id,
        outputs=[message("a", "assistant"), message("b", "assistant")],
    )
    await store.save_response(second)

    child = await store.get_response(second.response["id"])
    assert child is not None
    assert child.checkpoint_ids == [
        *parent.checkpoint_ids,
        *second.input_item_ids,
        *output_ids(second),
    ]
    assert child.input_item_ids == second.input_item_ids
    history = await store.load_items(child.checkpoint_ids)
    assert history == [*first.new_items, *second.new_items]


async def test_get_unknown_response_is_none(store: ResponseStore) -> None:
    assert await store.get_response("resp_unknown") is None


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
    await store.save_response(new)

    stored = await store.get_response(new.response["id"])
    assert stored is not None
    assert list(stored.response) == list(new.response)
    assert list(stored.response["zz_last_key"]) == ["b", "a"]
    [loaded] = await store.load_items([item["id"]])
    assert loaded == item
    assert list(loaded) == list(item)
    assert list(loaded["alpha"]) == ["y", "b", "a"]


async def test_load_items_order_duplicates_and_missing(store: ResponseStore) -> None:
    new = turn(inputs=[message("a"), message("b"), message("c")])
    await store.save_response(new)
    a, b, c = new.input_item_ids

    loaded = await store.load_items([c, "msg_missing", a, c, b, a])

    assert ids(loaded) == [c, a, c, b, a]
    assert loaded[0] == loaded[2]
    assert loaded[0] is not loaded[2]  # a repeated item is its own object
    assert await store.load_items([]) == []
    assert await store.load_items(["msg_missing"]) == []


async def test_existing_item_ids(store: ResponseStore) -> None:
    new = turn()
    await store.save_response(new)
    known = new.input_item_ids[0]
    assert await store.existing_item_ids([known, "msg_nope", known]) == {known}
    assert await store.existing_item_ids([]) == set()


async def test_items_are_stored_once_and_referenced(store: ResponseStore) -> None:
    shared = message("original")
    first = turn(inputs=[shared])
    await store.save_response(first)
    # The same id again, with another payload: referenced, never copied or overwritten.
    impostor = {**shared, "content": [{"type": "input_text", "text": "changed"}]}
    second = turn(inputs=[impostor])
    await store.save_response(second)

    [loaded] = await store.load_items([shared["id"]])
    assert loaded == shared
    stored = await store.get_response(second.response["id"])
    assert stored is not None
    assert stored.input_item_ids == [shared["id"]]


async def test_referenced_input_items_are_not_in_new_items(store: ResponseStore) -> None:
    first = turn("one")
    await store.save_response(first)
    reused = first.new_items[0]
    second = turn("two", stored_inputs=[reused])
    await store.save_response(second)
    stored = await store.get_response(second.response["id"])
    assert stored is not None
    assert stored.input_item_ids[0] == reused["id"]
    assert await store.load_items(stored.input_item_ids) == [reused, second.new_items[0]]


async def test_delete_response_keeps_items(store: ResponseStore) -> None:
    first = turn("one")
    await store.save_response(first)
    parent = await store.get_response(first.response["id"])
    assert parent is not None
    second = turn("two", history_ids=parent.checkpoint_ids, previous_response_id=parent.id)
    await store.save_response(second)

    assert await store.delete_response(parent.id) is True
    assert await store.get_response(parent.id) is None
    assert await store.delete_response(parent.id) is False
    assert await store.delete_response("resp_unknown") is False
    # The child stays continuable: its checkpoint is flat and the items stay.
    child = await store.get_response(second.response["id"])
    assert child is not None
    assert await store.load_items(child.checkpoint_ids) == [*first.new_items, *second.new_items]


async def test_rehydrates_a_1000_item_checkpoint_in_order(store: ResponseStore) -> None:
    history = [message(f"turn {i}", "user" if i % 2 == 0 else "assistant") for i in range(998)]
    seed = turn(inputs=history[:-1], outputs=history[-1:])
    await store.save_response(seed)
    parent = await store.get_response(seed.response["id"])
    assert parent is not None
    new = turn("last", history_ids=parent.checkpoint_ids, previous_response_id=parent.id)
    await store.save_response(new)

    stored = await store.get_response(new.response["id"])
    assert stored is not None
    assert len(stored.checkpoint_ids) == 1_000
    loaded = await store.load_items(stored.checkpoint_ids)
    assert loaded == [*history, *new.new_items]


async def test_load_items_beyond_bound_parameter_limits(store: ResponseStore) -> None:
    many = [message(str(i)) for i in range(40_000)]
    new = turn(inputs=many[:-1], outputs=many[-1:])
    await store.save_response(new)
    wanted = [item["id"] for item in reversed(many)]
    loaded = await store.load_items(wanted)
    assert ids(loaded) == wanted
    assert len(await store.existing_item_ids(wanted)) == 40_000


class TestInputItems:
    async def _saved(self, store: ResponseStore, count: int = 5) -> list[str]:
        new = turn(inputs=[message(f"m{i}") for i in range(count)])
        await store.save_response(new)
        self.response_id = new.response["id"]
        return new.input_item_ids

    async def test_orders_and_limits(self, store: ResponseStore) -> None:
        input_ids = await self._saved(store)
        page = await store.list_input_items(self.response_id, after=None, limit=20, order="asc")
        assert page is not None
        assert ids(page.items) == input_ids and page.has_more is False
        page = await store.list_input_items(self.response_id, after=None, limit=2, order="desc")
        assert page is not None
        assert ids(page.items) == input_ids[::-1][:2] and page.has_more is True

    async def test_after_walks_every_page(self, store: ResponseStore) -> None:
        input_ids = await self._saved(store)
        for order, expected in (("asc", input_ids), ("desc", input_ids[::-1])):
            seen: list[str] = []
            after = None
            while True:
                page = await store.list_input_items(
                    self.response_id, after=after, limit=2, order=order
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
            self.response_id, after=input_ids[1], limit=2, order="asc"
        )
        assert page is not None
        assert ids(page.items) == input_ids[2:] and page.has_more is False
        page = await store.list_input_items(
            self.response_id, after=input_ids[-1], limit=2, order="asc"
        )
        assert page is not None
        assert page.items == [] and page.has_more is False

    async def test_unknown_after_and_unknown_response(self, store: ResponseStore) -> None:
        await self._saved(store)
        with pytest.raises(UnknownCursorError):
            await store.list_input_items(self.response_id, after="msg_x", limit=2, order="asc")
        assert (
            await store.list_input_items("resp_unknown", after=None, limit=2, order="asc")
        ) is None

    async def test_no_input(self, store: ResponseStore) -> None:
        new = turn(inputs=[])
        await store.save_response(new)
        page = await store.list_input_items(new.response["id"], after=None, limit=20, order="desc")
        assert page is not None
        assert page.items == [] and page.has_more is False


async def test_aclose_keeps_what_was_saved(any_backend: Backend | MemoryBackend) -> None:
    store = any_backend.new_store()
    new = turn("kept")
    await store.save_response(new)
    await store.aclose()
    if isinstance(any_backend, Backend):
        any_backend.stores.remove(store)  # closed here, not again at teardown
    reopened = any_backend.new_store()
    stored = await reopened.get_response(new.response["id"])
    assert stored is not None and stored.response == new.response
    assert await reopened.load_items(stored.checkpoint_ids) == new.new_items


async def test_the_root_of_a_chain_of_three_survives(store: ResponseStore) -> None:
    first = turn("one")
    await store.save_response(first)  # no root given: its own
    root = await store.get_response(first.response["id"])
    assert root is not None and root.root_id == root.id
    parent = root
    for text in ("two", "three"):
        new = turn(
            text,
            history_ids=parent.checkpoint_ids,
            previous_response_id=parent.id,
            root_id=parent.root_id,
        )
        await store.save_response(new)
        child = await store.get_response(new.response["id"])
        assert child is not None
        assert child.root_id == root.id
        parent = child

    assert await store.delete_response(root.id) is True
    last = await store.get_response(parent.id)  # the chain keeps its root's id
    assert last is not None and last.root_id == root.id
