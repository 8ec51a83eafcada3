"""The Conversations API over real sockets: every endpoint and error, on every store.

Each test runs three times: against the in-memory fake of the store port, and against the real
SQL store that ``create_app`` builds itself, on embedded SQLite in a temporary data directory
and on a throwaway PostgreSQL database (``RESPGATE_TEST_POSTGRES_URL``, as in
tests/test_migrations.py; skipped when no server answers, unless ``CI`` is set). Shapes, status
codes and error envelopes follow OpenAI's recorded traffic (see
tests/e2e/test_conversations_recorded.py for the recordings replayed step by step).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest

from app.errors import InvalidRequestError
from app.main import create_app
from app.protocol.json_types import JsonObject
from app.protocol.metadata import check_metadata
from app.settings import Settings
from app.store.migrate import upgrade_to_head_sync
from tests.fakes import FakeUpstream, MemoryResponseStore, text_response
from tests.helpers import serve_in_thread
from tests.postgres import throwaway_database

ANSWER = text_response("Hi there")


class Gateway:
    def __init__(self, url: str, upstream: FakeUpstream) -> None:
        self.url = url
        self.upstream = upstream
        self.http = httpx.Client(base_url=url, timeout=10)
        self.sdk = openai.OpenAI(base_url=f"{url}/v1", api_key="sk-test", max_retries=0)

    def close(self) -> None:
        self.http.close()
        self.sdk.close()

    # Shortcuts ---------------------------------------------------------------------------

    def create(self, **body: Any) -> JsonObject:
        reply = self.http.post("/v1/conversations", json=body)
        assert reply.status_code == 200, reply.text
        data: JsonObject = reply.json()
        return data

    def add(self, conversation_id: str, *items: JsonObject) -> httpx.Response:
        return self.http.post(f"/v1/conversations/{conversation_id}/items", json={"items": items})

    def items(self, conversation_id: str, **params: Any) -> JsonObject:
        reply = self.http.get(f"/v1/conversations/{conversation_id}/items", params=params)
        assert reply.status_code == 200, reply.text
        data: JsonObject = reply.json()
        return data

    def texts(self, conversation_id: str) -> list[str]:
        data = self.items(conversation_id, order="asc", limit=100)["data"]
        return [item["content"][0]["text"] for item in data]


@contextlib.contextmanager
def postgres_database() -> Iterator[str]:
    """A throwaway PostgreSQL database migrated to head (skips without a server)."""
    with throwaway_database("respgate_conv") as url:
        upgrade_to_head_sync(url)
        yield url


@contextlib.contextmanager
def running_gateway(store_kind: str, data_dir: Path, **settings: Any) -> Iterator[Gateway]:
    """The gateway on the in-memory fake store, or the SQL store that ``create_app`` builds
    itself: embedded SQLite in ``data_dir``, or a throwaway PostgreSQL database."""
    upstream = FakeUpstream(body=ANSWER)
    with contextlib.ExitStack() as stack:
        store = MemoryResponseStore() if store_kind == "memory" else None
        if store_kind == "postgresql":
            settings["database_url"] = stack.enter_context(postgres_database())
        app = create_app(Settings(data_dir=data_dir, **settings), upstream=upstream, store=store)
        url = stack.enter_context(serve_in_thread(app))
        gateway = Gateway(url, upstream)
        stack.callback(gateway.close)
        yield gateway


@pytest.fixture(scope="module", params=["memory", "sqlite", "postgresql"])
def gw(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Gateway]:
    with running_gateway(request.param, tmp_path_factory.mktemp(request.param)) as gateway:
        yield gateway


def user(text: str, **extra: Any) -> JsonObject:
    return {"type": "message", "role": "user", "content": text, **extra}


def assert_error(
    reply: httpx.Response, status: int, param: str | None, code: str | None, message: str = ""
) -> JsonObject:
    assert reply.status_code == status, reply.text
    error: JsonObject = reply.json()["error"]
    assert set(error) == {"message", "type", "param", "code"}
    assert error["type"] == "invalid_request_error"
    assert (error["param"], error["code"]) == (param, code), error
    assert message in error["message"]
    return error


# ------------------------------------------------------------------------------ conversations


def test_create_empty_conversation(gw: Gateway) -> None:
    conversation = gw.create()
    assert set(conversation) == {"id", "object", "created_at", "metadata"}
    assert conversation["id"].startswith("conv_")
    assert conversation["object"] == "conversation"
    assert isinstance(conversation["created_at"], int)
    assert conversation["metadata"] == {}
    assert gw.items(conversation["id"]) == {
        "object": "list",
        "data": [],
        "first_id": None,
        "last_id": None,
        "has_more": False,
    }


def test_create_without_a_body(gw: Gateway) -> None:
    reply = gw.http.post("/v1/conversations")
    assert reply.status_code == 200, reply.text
    assert reply.json()["object"] == "conversation"


def test_create_with_items_and_metadata(gw: Gateway) -> None:
    conversation = gw.create(
        metadata={"topic": "demo"},
        items=[
            {"role": "system", "content": "Be brief."},
            user("Hello"),
            {"type": "message", "role": "assistant", "content": "Hi!"},
            {
                "type": "message",
                "role": "user",
                "content": [{"type": "input_text", "text": "parts stay parts"}],
            },
        ],
    )
    assert conversation["metadata"] == {"topic": "demo"}
    data = gw.items(conversation["id"], order="asc")["data"]
    assert [item["id"][:4] for item in data] == ["msg_"] * 4
    assert len({item["id"] for item in data}) == 4
    for item in data:
        assert (item["type"], item["status"]) == ("message", "completed")
    assert [item["content"] for item in data] == [
        [{"type": "input_text", "text": "Be brief."}],
        [{"type": "input_text", "text": "Hello"}],
        [{"type": "output_text", "text": "Hi!", "annotations": []}],
        [{"type": "input_text", "text": "parts stay parts"}],
    ]
    assert [item["role"] for item in data] == ["system", "user", "assistant", "user"]


def test_create_keeps_a_client_id_with_the_right_prefix(gw: Gateway) -> None:
    conversation = gw.create(items=[user("mine", id="msg_client_chosen_1")])
    assert gw.items(conversation["id"])["first_id"] == "msg_client_chosen_1"
    reply = gw.http.post("/v1/conversations", json={"items": [user("x", id="fc_wrong")]})
    assert_error(
        reply,
        400,
        "items[0].id",
        "invalid_value",
        "Invalid 'items[0].id': 'fc_wrong'. Expected an ID that begins with 'msg'.",
    )


def test_get_update_delete(gw: Gateway) -> None:
    created = gw.create(metadata={"a": "1"})
    path = f"/v1/conversations/{created['id']}"
    assert gw.http.get(path).json() == created

    updated = gw.http.post(path, json={"metadata": {"b": "2"}})
    assert updated.status_code == 200, updated.text
    assert updated.json() == {**created, "metadata": {"b": "2"}}  # replaced, not merged
    assert gw.http.get(path).json()["metadata"] == {"b": "2"}
    assert gw.http.post(path, json={"metadata": None}).json()["metadata"] == {}

    deleted = gw.http.delete(path)
    assert deleted.status_code == 200
    assert deleted.json() == {
        "id": created["id"],
        "object": "conversation.deleted",
        "deleted": True,
    }
    for reply in (
        gw.http.get(path),
        gw.http.post(path, json={"metadata": {}}),
        gw.http.delete(path),
        gw.http.get(f"{path}/items"),
        gw.http.post(f"{path}/items", json={"items": [user("late")]}),
    ):
        assert_error(
            reply,
            404,
            "conversation_id",
            "not_found",
            f"Conversation with id '{created['id']}' not found.",
        )


def test_update_needs_metadata(gw: Gateway) -> None:
    path = f"/v1/conversations/{gw.create()['id']}"
    assert_error(
        gw.http.post(path, json={}),
        400,
        "metadata",
        "missing_required_parameter",
        "Missing required parameter: 'metadata'.",
    )
    assert_error(
        gw.http.post(path, json={"metadata": {}, "items": []}),
        400,
        "items",
        "unknown_parameter",
        "Unknown parameter: 'items'.",
    )


def test_unknown_conversation_is_404(gw: Gateway) -> None:
    for reply in (
        gw.http.get("/v1/conversations/conv_missing"),
        gw.http.get("/v1/conversations/conv_missing/items/msg_x"),
        gw.http.delete("/v1/conversations/conv_missing/items/msg_x"),
    ):
        assert_error(reply, 404, "conversation_id", "not_found", "'conv_missing'")


# ------------------------------------------------------------------------------ metadata


@pytest.mark.parametrize(
    ("metadata", "param", "code", "message"),
    [
        ({f"k{i}": "v" for i in range(17)}, "metadata", "object_above_max_properties", "17"),
        ({"k" * 65: "v"}, "metadata", "string_above_max_length", "maximum length 64"),
        ({"k": "v" * 513}, "metadata.k", "string_above_max_length", "maximum length 512"),
        ({"k": 1}, "metadata.k", "invalid_type", "expected a string, but got an integer"),
        ({"k": None}, "metadata.k", "invalid_type", "expected a string, but got null"),
        (["k"], "metadata", "invalid_type", "expected an object, but got an array"),
        ("k", "metadata", "invalid_type", "expected an object, but got a string"),
    ],
)
def test_metadata_limits(gw: Gateway, metadata: Any, param: str, code: str, message: str) -> None:
    assert_error(
        gw.http.post("/v1/conversations", json={"metadata": metadata}), 400, param, code, message
    )
    path = f"/v1/conversations/{gw.create()['id']}"
    assert_error(gw.http.post(path, json={"metadata": metadata}), 400, param, code, message)


def test_metadata_at_the_limits_is_accepted(gw: Gateway) -> None:
    metadata = {f"{i:02d}" + "k" * 62: "v" * 512 for i in range(16)}
    assert gw.create(metadata=metadata)["metadata"] == metadata


def test_check_metadata() -> None:
    assert check_metadata(None, "metadata") == {}
    assert check_metadata({"a": "b"}, "metadata") == {"a": "b"}
    with pytest.raises(InvalidRequestError) as caught:
        check_metadata({"a": 1}, "conversation.metadata")
    assert caught.value.param == "conversation.metadata.a"
    assert caught.value.status_code == 400


# ------------------------------------------------------------------------------ items


def test_add_items_returns_the_stored_items(gw: Gateway) -> None:
    conversation_id = gw.create()["id"]
    reply = gw.add(
        conversation_id,
        {"role": "user", "content": "one"},
        user("two"),
        {
            "type": "function_call",
            "call_id": "call_1",
            "name": "lookup",
            "arguments": "{}",
            "id": "fc_client_1",
        },
        {"type": "function_call_output", "call_id": "call_1", "output": "42"},
    )
    assert reply.status_code == 200, reply.text
    page = reply.json()
    data = page["data"]
    assert page["object"] == "list"
    assert page["has_more"] is False
    assert (page["first_id"], page["last_id"]) == (data[0]["id"], data[-1]["id"])
    assert [item["type"] for item in data] == [
        "message",
        "message",
        "function_call",
        "function_call_output",
    ]
    assert data[0]["content"] == [{"type": "input_text", "text": "one"}]
    assert data[2]["id"] == "fc_client_1"
    assert data[2]["status"] == "completed"
    assert data[3]["id"].startswith("fco_")
    assert gw.items(conversation_id, order="asc")["data"] == data


@pytest.mark.parametrize(
    ("item", "prefix"),
    [
        (user("test", id="item_wrongprefix_1"), "msg"),
        (
            {
                "type": "function_call",
                "call_id": "call_probe",
                "name": "test_fn",
                "arguments": "{}",
                "id": "msg_wrongprefix_2",
            },
            "fc",
        ),
    ],
)
def test_add_items_with_a_wrong_id_prefix(gw: Gateway, item: JsonObject, prefix: str) -> None:
    conversation_id = gw.create()["id"]
    assert_error(
        gw.add(conversation_id, user("fine"), item),
        400,
        "items[1].id",
        "invalid_value",
        f"Invalid 'items[1].id': '{item['id']}'. Expected an ID that begins with '{prefix}'.",
    )
    assert gw.items(conversation_id)["data"] == []  # nothing of the request was added


def test_item_already_in_conversation(gw: Gateway) -> None:
    conversation_id = gw.create()["id"]
    first = gw.add(conversation_id, user("once")).json()["first_id"]
    assert_error(
        gw.add(conversation_id, user("again", id=first)),
        400,
        "items",
        "item_already_in_conversation",
        "Item already in conversation",
    )
    assert gw.texts(conversation_id) == ["once"]


def test_an_id_stored_elsewhere_references_that_item(gw: Gateway) -> None:
    source = gw.create()["id"]
    stored = gw.add(source, user("original")).json()["data"][0]

    target = gw.create()["id"]
    reply = gw.add(target, user("replacement content is ignored", id=stored["id"]))
    assert reply.status_code == 200, reply.text
    assert reply.json()["data"] == [stored]
    assert gw.texts(target) == ["original"]

    # Twice in one request: both occurrences are listed (OpenAI's recorded behaviour).
    twice = gw.create()["id"]
    reply = gw.add(twice, user("a", id=stored["id"]), user("b", id=stored["id"]))
    assert reply.json()["data"] == [stored, stored]
    assert gw.texts(twice) == ["original", "original"]

    # item_reference works the same way; an unknown one is a 404.
    reply = gw.add(target, {"type": "item_reference", "id": stored["id"]})
    assert_error(reply, 400, "items", "item_already_in_conversation")
    assert_error(
        gw.add(target, {"type": "item_reference", "id": "msg_unknown"}),
        404,
        "items[0].id",
        "not_found",
        "Item with id 'msg_unknown' not found.",
    )


@pytest.mark.parametrize(
    ("body", "param", "code"),
    [
        ({}, "items", "missing_required_parameter"),
        ({"items": "hello"}, "items", "invalid_value"),
        ({"items": [1]}, "items[0]", "invalid_value"),
        ({"items": [{"content": "no role"}]}, "items[0].type", "missing_required_parameter"),
        ({"items": [{"type": 1}]}, "items[0].type", "invalid_type"),
        (
            {"items": [{"type": "message", "content": "x"}]},
            "items[0].role",
            "missing_required_parameter",
        ),
        ({"items": [{"role": "bot", "content": "x"}]}, "items[0].role", "invalid_value"),
        ({"items": [{"role": "user"}]}, "items[0].content", "missing_required_parameter"),
        ({"items": [{"role": "user", "content": 7}]}, "items[0].content", "invalid_type"),
        ({"items": [user("x")] * 21}, "items", "array_above_max_length"),
        ({"items": [], "extra": True}, "extra", "unknown_parameter"),
    ],
)
def test_add_items_validation(gw: Gateway, body: JsonObject, param: str, code: str) -> None:
    conversation_id = gw.create()["id"]
    reply = gw.http.post(f"/v1/conversations/{conversation_id}/items", json=body)
    assert_error(reply, 400, param, code)


def test_create_validation(gw: Gateway) -> None:
    assert_error(
        gw.http.post("/v1/conversations", json={"items": [{"role": "bot", "content": "x"}]}),
        400,
        "items[0].role",
        "invalid_value",
        "Invalid value: 'bot'. Supported values are: 'user', 'assistant', 'system', and "
        "'developer'.",
    )
    assert_error(
        gw.http.post("/v1/conversations", json={"items": [user("x")] * 21}),
        400,
        "items",
        "array_above_max_length",
        "Expected an array with maximum length 20, but got an array with length 21 instead.",
    )
    assert_error(
        gw.http.post("/v1/conversations", json={"item": []}), 400, "item", "unknown_parameter"
    )
    assert_error(gw.http.post("/v1/conversations", content=b"{not json"), 400, None, "invalid_json")
    assert_error(gw.http.post("/v1/conversations", json=[1]), 400, None, "invalid_json")


def test_body_size_limit(tmp_path: Path) -> None:
    with running_gateway("memory", tmp_path, max_body_bytes=64) as gateway:
        reply = gateway.http.post("/v1/conversations", json={"metadata": {"k": "v" * 100}})
        assert_error(reply, 413, None, "request_too_large")


def test_get_and_delete_one_item(gw: Gateway) -> None:
    conversation = gw.create(items=[user("keep"), user("drop")])
    conversation_id = conversation["id"]
    keep, drop = gw.items(conversation_id, order="asc")["data"]
    path = f"/v1/conversations/{conversation_id}/items"

    assert gw.http.get(f"{path}/{drop['id']}").json() == drop
    assert gw.http.get(f"{path}/{drop['id']}", params={"include[]": "x"}).json() == drop
    deleted = gw.http.delete(f"{path}/{drop['id']}")
    assert deleted.status_code == 200
    assert deleted.json() == conversation  # OpenAI answers with the conversation
    assert gw.items(conversation_id)["data"] == [keep]

    for reply in (gw.http.get(f"{path}/{drop['id']}"), gw.http.delete(f"{path}/{drop['id']}")):
        assert_error(reply, 404, "item_id", "not_found", f"Item with id '{drop['id']}' not found.")
    # An item that exists, but in another conversation, is not this conversation's.
    other = gw.create()["id"]
    assert_error(
        gw.http.get(f"/v1/conversations/{other}/items/{keep['id']}"), 404, "item_id", "not_found"
    )


def test_concurrent_appends_all_land_in_order(gw: Gateway) -> None:
    conversation_id = gw.create()["id"]

    def add_batch(n: int) -> int:
        reply = gw.add(conversation_id, user(f"{n}-a"), user(f"{n}-b"))
        return reply.status_code

    with ThreadPoolExecutor(max_workers=8) as pool:
        assert set(pool.map(add_batch, range(16))) == {200}
    texts = gw.texts(conversation_id)
    assert len(texts) == 32
    # Every batch landed whole: its two items are adjacent, in request order.
    for n in range(16):
        assert texts.index(f"{n}-b") == texts.index(f"{n}-a") + 1


# ------------------------------------------------------------------------------ pagination


def test_pagination(gw: Gateway) -> None:
    conversation_id = gw.create(items=[user(f"m{i}") for i in range(5)])["id"]
    ids = [item["id"] for item in gw.items(conversation_id, order="asc")["data"]]

    def page(**params: Any) -> tuple[list[str], str | None, str | None, bool]:
        data = gw.items(conversation_id, **params)
        listed = [item["id"] for item in data["data"]]
        return listed, data["first_id"], data["last_id"], data["has_more"]

    assert page() == (ids[::-1], ids[4], ids[0], False)  # default order: desc
    assert page(limit=2) == (ids[4:2:-1], ids[4], ids[3], True)
    assert page(limit=2, after=ids[3]) == ([ids[2], ids[1]], ids[2], ids[1], True)
    assert page(limit=2, after=ids[1]) == ([ids[0]], ids[0], ids[0], False)
    assert page(order="asc", limit=2) == (ids[:2], ids[0], ids[1], True)
    assert page(order="asc", limit=2, after=ids[1]) == (ids[2:4], ids[2], ids[3], True)
    assert page(order="asc", limit=2, after=ids[3]) == ([ids[4]], ids[4], ids[4], False)
    assert page(order="asc", after=ids[4]) == ([], None, None, False)
    assert page(order="asc", limit=5) == (ids, ids[0], ids[4], False)
    included = page(order="asc", **{"include[]": "message.output_text.logprobs"})
    assert included == (ids, ids[0], ids[4], False)

    # The SDK's cursor page walks every page.
    listed = [item.id for item in gw.sdk.conversations.items.list(conversation_id, limit=2)]
    assert listed == ids[::-1]


def test_pagination_errors(gw: Gateway) -> None:
    conversation_id = gw.create(items=[user("a"), user("b")])["id"]
    gone = gw.items(conversation_id)["first_id"]
    gw.http.delete(f"/v1/conversations/{conversation_id}/items/{gone}")
    path = f"/v1/conversations/{conversation_id}/items"
    error = assert_error(gw.http.get(path, params={"after": gone, "limit": 2}), 404, "after", None)
    assert error["message"] == f"No item found with id '{gone}'"
    assert_error(gw.http.get(path, params={"limit": 0}), 400, "limit", "invalid_value")
    assert_error(gw.http.get(path, params={"limit": 101}), 400, "limit", "invalid_value")
    assert_error(gw.http.get(path, params={"limit": "x"}), 400, "limit", "invalid_value")
    assert_error(gw.http.get(path, params={"order": "up"}), 400, "order", "invalid_value")


# ------------------------------------------------------------------------------ with responses


def test_responses_continue_a_conversation(gw: Gateway) -> None:
    conversation_id = gw.create(items=[user("Remember CHERRY.")])["id"]
    before = len(gw.upstream.requests)

    first = gw.http.post(
        "/v1/responses",
        json={"model": "test-model", "conversation": conversation_id, "input": "What word?"},
    )
    assert first.status_code == 200, first.text
    assert first.json()["conversation"] == {"id": conversation_id}
    sent = gw.upstream.requests[before]
    assert "conversation" not in sent
    assert [item["content"][0]["text"] for item in sent["input"]] == [
        "Remember CHERRY.",
        "What word?",
    ]
    assert gw.texts(conversation_id) == ["Remember CHERRY.", "What word?", "Hi there"]
    output_id = first.json()["output"][0]["id"]
    assert gw.items(conversation_id)["first_id"] == output_id

    # Items added between responses are part of the next one's history; {"id": ...} works too.
    gw.add(conversation_id, user("Also remember PLUM."))
    second = gw.http.post(
        "/v1/responses",
        json={"model": "test-model", "conversation": {"id": conversation_id}, "input": "And?"},
    )
    assert second.status_code == 200, second.text
    sent = gw.upstream.requests[-1]
    assert [item["content"][0]["text"] for item in sent["input"]] == [
        "Remember CHERRY.",
        "What word?",
        "Hi there",
        "Also remember PLUM.",
        "And?",
    ]
    assert [item["id"] for item in sent["input"][:3]] == [
        item["id"] for item in gw.items(conversation_id, order="asc", limit=3)["data"]
    ]
    assert len(gw.texts(conversation_id)) == 6


def test_store_false_adds_nothing_to_the_conversation(gw: Gateway) -> None:
    conversation_id = gw.create(items=[user("kept")])["id"]
    reply = gw.http.post(
        "/v1/responses",
        json={"model": "m", "conversation": conversation_id, "input": "x", "store": False},
    )
    assert reply.status_code == 200, reply.text
    assert gw.texts(conversation_id) == ["kept"]


def test_responses_errors_about_conversations(gw: Gateway) -> None:
    reply = gw.http.post(
        "/v1/responses", json={"model": "m", "conversation": "conv_missing", "input": "x"}
    )
    assert_error(reply, 404, "conversation", "not_found", "conv_missing")
    conversation_id = gw.create()["id"]
    reply = gw.http.post(
        "/v1/responses",
        json={
            "model": "m",
            "conversation": conversation_id,
            "previous_response_id": "resp_x",
            "input": "x",
        },
    )
    assert_error(reply, 400, "conversation", "mutually_exclusive_parameters")


# ------------------------------------------------------------------------------ the SDK


def test_openai_sdk_round_trip(gw: Gateway) -> None:
    sdk = gw.sdk
    conversation = sdk.conversations.create(
        items=[{"type": "message", "role": "user", "content": "Hello"}],
        metadata={"topic": "sdk"},
    )
    assert conversation.metadata == {"topic": "sdk"}
    assert sdk.conversations.retrieve(conversation.id).id == conversation.id
    updated = sdk.conversations.update(conversation.id, metadata={"topic": "changed"})
    assert updated.metadata == {"topic": "changed"}

    added = sdk.conversations.items.create(
        conversation.id, items=[{"type": "message", "role": "user", "content": "More"}]
    )
    assert [item.type for item in added.data] == ["message"]
    assert added.first_id == added.last_id == added.data[0].id
    item = sdk.conversations.items.retrieve(added.data[0].id, conversation_id=conversation.id)
    assert item.id == added.data[0].id
    page = sdk.conversations.items.list(conversation.id, order="asc")
    assert [i.model_dump()["content"][0]["text"] for i in page.data] == ["Hello", "More"]

    after_delete = sdk.conversations.items.delete(item.id, conversation_id=conversation.id)
    assert after_delete.id == conversation.id
    with pytest.raises(openai.NotFoundError):
        sdk.conversations.items.retrieve(item.id, conversation_id=conversation.id)
    with pytest.raises(openai.BadRequestError) as caught:
        sdk.conversations.update(conversation.id, metadata={"k": "v" * 513})
    assert caught.value.param == "metadata.k"

    deleted = sdk.conversations.delete(conversation.id)
    assert (deleted.id, deleted.deleted, deleted.object) == (
        conversation.id,
        True,
        "conversation.deleted",
    )
    with pytest.raises(openai.NotFoundError):
        sdk.conversations.retrieve(conversation.id)
