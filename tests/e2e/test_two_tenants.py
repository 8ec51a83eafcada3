"""Two tenants on one gateway with real API keys, on SQLite and on a real PostgreSQL, each
through the official ``openai`` SDK (``anthropic`` on ``/v1/messages``): issue 17's test.

The gateway has ``[auth] mode = "on"``, a configured key for each tenant (``tests.tenants``)
and a key of its ``api_keys`` table made as ``respgate keys create`` makes one. Every endpoint
one tenant calls on the other's ids answers exactly as it does for an id nobody stored (the
same status, the same body but for the id: 404, or OpenAI's 400 for an unknown
``previous_response_id``), never 403: responses (retrieve, delete, input items, cancel, the
stream of a background response, ``previous_response_id``, ``item_reference``, input tokens,
compact), conversations and their items (and ``conversation`` on a create), files, vector
stores (their files, file batches, search, attaching the other's file), a ``file_search`` tool
naming the other's store, a WebSocket continuing the other's response. Lists show each tenant
only its own; the owner's objects are untouched by all of it; client-chosen item ids are per
tenant. ``/v1/messages`` stores nothing and runs its tools as the caller. A keyless request, a
wrong key and a revoked key are refused (401) on the same gateway.

The model is ``TenantsUpstream``: it echoes the last input it was given (a text, or a tool's
output), so a test sees whose item reached it; embeddings are ``tests.fakes.FakeEmbedder``'s.
"""

from __future__ import annotations

import asyncio
import copy
import json
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anthropic
import openai
import pytest
import yaml
from starlette.testclient import TestClient, WebSocketDenialResponse

from app.core.ids import new_id, uuid7_hex
from app.main import create_app
from app.protocol.json_types import JsonObject
from app.settings import Settings
from app.store.engine import create_engine_for
from app.store.sql import SqlResponseStore
from tests.api.auth_gateways import eventually
from tests.background.test_background_api import POLL_DEADLINE, GatedUpstream, database_url
from tests.fakes import FakeEmbedder, FakeUpstream, ListEventStream, function_call, message
from tests.fakes import round_events as events_of
from tests.helpers import in_process
from tests.postgres import run_in_thread
from tests.tenants import (
    claude_as,
    client_as,
    headers_as,
    revoke_key,
    sdk,
    store_key,
    tenants_gateway,
)

__all__ = ["database_url"]  # the fixture, parametrized on SQLite and PostgreSQL

MODEL = "test-model"
SIMULATOR = "simulator-model"
A, B = "acme", "globex"
HERONS = "Herons are long-legged wading birds that eat fish and frogs."
EGRETS = "Egrets are herons with white plumage."
# The ``weather`` tool set: one tool, run by the ``lm`` engine (the simulating model).
FORECAST_TOOL = "mcp__weather__forecast"
FORECAST = {"city": "Oslo", "sky": "rain"}
WEATHER_TOOLS = [
    {
        "name": "forecast",
        "description": "Tomorrow's weather in a city",
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string"}},
            "required": ["city"],
        },
    }
]


class TenantsUpstream(FakeUpstream):
    """The model. It answers with one message echoing the last input it was given (a text, or
    a tool's output); offered ``file_search`` or the weather tool with no output of it yet, it
    calls that tool first. Asked as the ``lm`` engine's simulating model, it answers
    ``FORECAST``."""

    def answer(self, body: JsonObject) -> list[JsonObject]:
        if body.get("model") == SIMULATOR:
            return [message(json.dumps(FORECAST))]
        offered = {tool.get("name") for tool in body.get("tools") or []}
        items = body.get("input") if isinstance(body.get("input"), list) else []
        called = any(item.get("type") == "function_call_output" for item in items or [])
        if "file_search" in offered and not called:
            query = json.dumps({"queries": [last_text(body)]})
            return [function_call("file_search", query)]
        if FORECAST_TOOL in offered and not called:
            return [function_call(FORECAST_TOOL, '{"city": "Oslo"}')]
        return [message(last_text(body))]

    async def create_response(self, body: JsonObject, headers: Mapping[str, str]) -> JsonObject:
        self.requests.append(copy.deepcopy(body))
        return {"status": "completed", "output": self.answer(body)}

    async def stream_response(
        self, body: JsonObject, headers: Mapping[str, str]
    ) -> ListEventStream:
        self.requests.append(copy.deepcopy(body))
        return ListEventStream(events_of(self.answer(body)))


def last_text(body: JsonObject) -> str:
    value = body.get("input")
    if isinstance(value, str):
        return value
    for item in reversed(value if isinstance(value, list) else []):
        if item.get("type") == "function_call_output":
            return str(item.get("output"))
        content = item.get("content")
        if isinstance(content, str):
            return content
        if isinstance(content, list) and content:
            return str(content[0].get("text"))
    return ""


@pytest.fixture
def settings(database_url: str, tmp_path: Path) -> Callable[..., Settings]:
    """``settings(**more)``: the gateway's settings on the test's database (``database_url``:
    SQLite, then PostgreSQL); the api_keys table is read again every 0.1 s."""

    def make(**more: Any) -> Settings:
        return Settings(
            database_url=database_url,
            data_dir=tmp_path / "data",
            auth={"refresh_seconds": 0.1},
            **more,
        )

    return make


@dataclass
class Gateway:
    http: TestClient
    upstream: TenantsUpstream
    database_url: str
    a: openai.OpenAI
    b: openai.OpenAI


@pytest.fixture
def gw(settings: Callable[..., Settings], database_url: str) -> Iterator[Gateway]:
    """The gateway with keys for A and B, and the ``openai`` SDK as each."""
    upstream = TenantsUpstream()
    with tenants_gateway(settings(), upstream, A, B, embedder=FakeEmbedder()) as http:
        yield Gateway(http, upstream, database_url, client_as(http, A), client_as(http, B))


def unknown_like(their_id: str) -> str:
    """An id of the same kind as ``their_id`` that nobody stored."""
    if their_id.startswith("file-"):
        return f"file-{uuid7_hex()}"
    return new_id(their_id.split("_", 1)[0])


def refusal(call: Callable[[], object]) -> tuple[int, JsonObject]:
    """The status and body of the error ``call`` raises."""
    with pytest.raises(openai.APIStatusError) as raised:
        call()
    return raised.value.status_code, raised.value.response.json()


def assert_unknown(call: Callable[[str], object], their_id: str, status: int = 404) -> None:
    """``call`` with another tenant's ``their_id`` fails exactly as with an id nobody stored:
    the same status and the same body, the id aside."""
    unknown_id = unknown_like(their_id)
    theirs = refusal(lambda: call(their_id))
    unknown = refusal(lambda: call(unknown_id))
    assert theirs[0] == unknown[0] == status, theirs
    assert theirs[1] == json.loads(json.dumps(unknown[1]).replace(unknown_id, their_id))


def user(text: str, item_id: str | None = None) -> Any:
    """A user message input item (``Any``: the SDK's item types have no ``id`` on it)."""
    item: dict[str, Any] = {"type": "message", "role": "user", "content": text}
    if item_id is not None:
        item["id"] = item_id
    return item


# ------------------------------------------------------------------------------------ keys


def test_a_missing_wrong_or_revoked_key_is_refused(gw: Gateway) -> None:
    mine = gw.a.responses.create(model=MODEL, input="A's")
    # a key of the api_keys table (respgate keys create --tenant acme) is acme's as well
    table_key, table_id = store_key(gw.database_url, A, "laptop")
    assert sdk(gw.http, table_key).responses.retrieve(mine.id).id == mine.id
    revoke_key(gw.database_url, table_id)
    revoked = bearer(table_key)
    assert eventually(lambda: gw.http.get("/v1/models", headers=revoked).status_code == 401)

    for key in (None, "sk-wrong-key-00000000000000", table_key):
        assert_refused(gw.http, key, mine.id)
    # the tenants' own keys still work, the configured ones and anthropic's x-api-key
    assert gw.a.responses.retrieve(mine.id).id == mine.id
    said = claude_as(gw.http, B).messages.create(
        model=MODEL, max_tokens=16, messages=[{"role": "user", "content": "B here"}]
    )
    assert [block.type for block in said.content] == ["text"]


def assert_refused(http: TestClient, key: str | None, response_id: str) -> None:
    """Requests with ``key`` (``None``: no key at all) answer 401, through each SDK and on a
    WebSocket. (A key the gateway does not know makes it read the api_keys table first, at most
    once a second: a few requests per key keep this test short.)"""
    client = sdk(http, key or "unused")
    headers = {"Authorization": openai.omit} if key is None else None  # the SDK's "no key"
    calls = [lambda: client.responses.retrieve(response_id, extra_headers=headers)]
    if key is None:
        calls += [
            lambda: client.responses.create(model=MODEL, input="hi", extra_headers=headers),
            lambda: client.files.list(extra_headers=headers),
            lambda: client.vector_stores.list(extra_headers=headers),
        ]
    for call in calls:
        with pytest.raises(openai.AuthenticationError) as refused:
            call()
        assert refused.value.status_code == 401
        assert refused.value.code == "invalid_api_key"
    with (
        pytest.raises(WebSocketDenialResponse) as denied,
        http.websocket_connect("/v1/responses", headers=bearer(key)),
    ):
        pass
    assert denied.value.status_code == 401
    claude = anthropic.Anthropic(
        base_url=str(http.base_url), api_key=key or "", max_retries=0, http_client=http
    )
    with pytest.raises(anthropic.AuthenticationError) as refused_message:
        claude.messages.create(
            model=MODEL, max_tokens=16, messages=[{"role": "user", "content": "hi"}]
        )
    assert refused_message.value.body["error"]["type"] == "authentication_error"


def bearer(key: str | None) -> dict[str, str]:
    return {"authorization": f"Bearer {key}"} if key else {}


# ------------------------------------------------------------------------------- responses


def test_another_tenants_response_is_an_unknown_id(gw: Gateway) -> None:
    a, b = gw.a, gw.b
    theirs = a.responses.create(model=MODEL, input="A's secret")
    rid, item_id = theirs.id, str(theirs.output[0].id)

    assert_unknown(lambda i: b.responses.retrieve(i), rid)
    assert_unknown(lambda i: b.responses.retrieve(i, stream=True), rid)
    assert_unknown(lambda i: b.responses.input_items.list(i), rid)
    assert_unknown(lambda i: b.responses.cancel(i), rid)
    assert_unknown(lambda i: b.responses.delete(i), rid)
    # a continuation from it: OpenAI's 400 for an unknown previous response
    for stream in (False, True):
        assert_unknown(
            lambda i, s=stream: b.responses.create(
                model=MODEL, input="more", previous_response_id=i, stream=s
            ),
            rid,
            400,
        )
    assert_unknown(
        lambda i: b.responses.input_tokens.count(model=MODEL, input="x", previous_response_id=i),
        rid,
        400,
    )
    assert_unknown(
        lambda i: b.responses.compact(model=MODEL, input="x", previous_response_id=i), rid, 400
    )
    # A's answer, referenced by B, is an unknown item
    assert_unknown(
        lambda i: b.responses.create(model=MODEL, input=[{"type": "item_reference", "id": i}]),
        item_id,
    )

    # nothing of it reached the upstream, and A's response is as it was
    assert len(gw.upstream.requests) == 1
    assert a.responses.retrieve(rid).model_dump() == theirs.model_dump()
    [item] = a.responses.input_items.list(rid).data
    assert item.model_dump()["content"][0]["text"] == "A's secret"
    reference: Any = [{"type": "item_reference", "id": item_id}]
    assert a.responses.create(model=MODEL, input=reference).output_text == "A's secret"
    follow = a.responses.create(model=MODEL, input="and then?", previous_response_id=rid)
    assert follow.output_text == "and then?"
    a.responses.delete(rid)
    with pytest.raises(openai.NotFoundError):
        a.responses.retrieve(rid)


def test_another_tenants_background_response_is_unknown(settings: Callable[..., Settings]) -> None:
    upstream = GatedUpstream([[message("done for A")]])
    with tenants_gateway(settings(), upstream, A, B) as http:
        a, b = client_as(http, A), client_as(http, B)
        rid = a.responses.create(model=MODEL, input="hi", background=True).id
        assert upstream.started.wait(POLL_DEADLINE)  # A's job runs (held at the upstream)

        assert_unknown(lambda i: b.responses.retrieve(i), rid)
        assert_unknown(lambda i: b.responses.retrieve(i, stream=True, starting_after=0), rid)
        assert_unknown(lambda i: b.responses.cancel(i), rid)
        assert_unknown(lambda i: b.responses.delete(i), rid)
        assert_unknown(
            lambda i: b.responses.create(model=MODEL, input="x", previous_response_id=i), rid, 400
        )

        # A's job was not stopped: it completes, and its stream replays from the log
        upstream.gate.set()
        deadline = time.monotonic() + POLL_DEADLINE
        while (polled := a.responses.retrieve(rid)).status != "completed":
            assert time.monotonic() < deadline, polled.status
            time.sleep(0.01)
        assert polled.output_text == "done for A"
        with a.responses.retrieve(rid, stream=True, starting_after=0) as stream:
            events = [event.type for event in stream]
        assert events[-1] == "response.completed"


def test_the_websocket_of_another_tenant_cannot_continue_a_response(gw: Gateway) -> None:
    rid = gw.a.responses.create(model=MODEL, input="A's").id

    def first_frame(tenant: str, previous: str) -> JsonObject:
        with gw.http.websocket_connect("/v1/responses", headers=headers_as(tenant)) as ws:
            body = {"type": "response.create", "model": MODEL, "input": "x"}
            ws.send_text(json.dumps({**body, "previous_response_id": previous}))
            frame: JsonObject = json.loads(ws.receive_text())
            return frame

    unknown = new_id("resp")
    refused = first_frame(B, rid)
    assert refused["type"] == "error" and refused["status"] == 400
    assert refused == json.loads(json.dumps(first_frame(B, unknown)).replace(unknown, rid))
    assert first_frame(A, rid)["type"] == "response.created"


# --------------------------------------------------------------------------- conversations


def test_another_tenants_conversation_and_items_are_unknown(gw: Gateway) -> None:
    a, b = gw.a, gw.b
    conv = a.conversations.create(items=[user("A's note", "msg_1")], metadata={"of": "a"})
    answer = a.responses.create(model=MODEL, input="A asks", conversation=conv.id)
    item_id = str(answer.output[0].id)  # a gateway-made id of A's
    cid = conv.id

    assert_unknown(lambda i: b.conversations.retrieve(i), cid)
    assert_unknown(lambda i: b.conversations.update(i, metadata={"of": "b"}), cid)
    assert_unknown(lambda i: b.conversations.delete(i), cid)
    assert_unknown(lambda i: b.conversations.items.list(i), cid)
    assert_unknown(lambda i: b.conversations.items.create(i, items=[user("B's")]), cid)
    assert_unknown(lambda i: b.conversations.items.retrieve("msg_1", conversation_id=i), cid)
    assert_unknown(lambda i: b.conversations.items.delete("msg_1", conversation_id=i), cid)
    assert_unknown(lambda i: b.responses.create(model=MODEL, input="x", conversation=i), cid)
    assert_unknown(
        lambda i: b.responses.input_tokens.count(model=MODEL, input="x", conversation=i), cid
    )

    # A's items, referenced by B, are unknown items
    def reference(i: str) -> Any:
        return [{"type": "item_reference", "id": i}]

    assert_unknown(lambda i: b.responses.create(model=MODEL, input=reference(i)), item_id)
    assert_unknown(lambda i: b.conversations.create(items=reference(i)), item_id)

    # A's conversation is as it was
    assert a.conversations.retrieve(cid).metadata == {"of": "a"}
    # its note, A's question and the answer
    listed = [i.id for i in a.conversations.items.list(cid, order="asc").data]
    assert len(listed) == 3 and listed[0] == "msg_1" and listed[2] == item_id
    assert a.conversations.items.retrieve(item_id, conversation_id=cid).id == item_id
    assert len(gw.upstream.requests) == 1


def test_client_chosen_item_ids_are_per_tenant(gw: Gateway) -> None:
    a, b = gw.a, gw.b
    conv_a = a.conversations.create(items=[user("A's words", "msg_1"), user("A's", "msg_2")])
    conv_b = b.conversations.create(items=[user("B's words", "msg_1")])

    def listed(client: openai.OpenAI, cid: str) -> list[JsonObject]:
        return [i.model_dump() for i in client.conversations.items.list(cid, order="asc").data]

    mine, _ = listed(a, conv_a.id)
    [theirs] = listed(b, conv_b.id)
    assert (mine["id"], mine["content"][0]["text"]) == ("msg_1", "A's words")
    assert (theirs["id"], theirs["content"][0]["text"]) == ("msg_1", "B's words")
    got = b.conversations.items.retrieve("msg_1", conversation_id=conv_b.id).model_dump()
    assert got == theirs
    # an item_reference to msg_1 is each tenant's own msg_1
    reference: Any = [{"type": "item_reference", "id": "msg_1"}]
    assert a.responses.create(model=MODEL, input=reference).output_text == "A's words"
    assert b.responses.create(model=MODEL, input=reference).output_text == "B's words"
    # B's deleting its msg_1 leaves A's
    b.conversations.items.delete("msg_1", conversation_id=conv_b.id)
    assert listed(b, conv_b.id) == []
    assert listed(a, conv_a.id)[0] == mine
    # an input item that carries an id only another tenant has is the sender's own new item
    sent = b.responses.create(model=MODEL, input=[user("B again", "msg_2")])
    assert sent.output_text == "B again"
    [stored] = b.responses.input_items.list(sent.id).data
    assert stored.model_dump()["content"][0]["text"] == "B again"


# ------------------------------------------------------------------- files and vector stores


@dataclass
class Owned:
    """One tenant's file, ingested into its vector store, with a batch of it."""

    file_id: str
    store_id: str
    batch_id: str


def own(client: openai.OpenAI, name: str, text: str) -> Owned:
    uploaded = client.files.create(file=(f"{name}.txt", text.encode()), purpose="assistants")
    store = client.vector_stores.create(name=name, file_ids=[uploaded.id])
    batch = client.vector_stores.file_batches.create(
        vector_store_id=store.id, file_ids=[uploaded.id]
    )
    ingested(client, store.id)
    return Owned(uploaded.id, store.id, batch.id)


def ingested(client: openai.OpenAI, store_id: str) -> None:
    """Wait until nothing of the store is being ingested; then it has no failed file."""
    deadline = time.monotonic() + POLL_DEADLINE
    while (store := client.vector_stores.retrieve(store_id)).file_counts.in_progress:
        assert time.monotonic() < deadline, store.file_counts
        time.sleep(0.02)
    assert store.file_counts.failed == 0 and store.file_counts.completed > 0


def test_files_of_another_tenant_are_unknown(
    gw: Gateway, settings: Callable[..., Settings]
) -> None:
    a, b = gw.a, gw.b
    mine = a.files.create(file=("notes.txt", b"A's notes"), purpose="assistants")
    theirs = b.files.create(file=("notes.txt", b"B's notes"), purpose="user_data")

    assert_unknown(b.files.retrieve, mine.id)
    assert_unknown(b.files.content, mine.id)
    assert_unknown(b.files.delete, mine.id)
    assert_unknown(lambda after: b.files.list(after=after), mine.id)

    assert [f.id for f in b.files.list()] == [theirs.id]
    assert [f.id for f in a.files.list()] == [mine.id]
    assert [f.id for f in a.files.list(purpose="assistants")] == [mine.id]
    assert a.files.retrieve(mine.id) == mine
    assert a.files.content(mine.id).content == b"A's notes"
    # a gateway without authentication on the same database (the default tenant) sees neither
    with in_process(create_app(settings(), upstream=TenantsUpstream())) as anonymous:
        assert anonymous.get("/v1/files").json()["data"] == []
        assert anonymous.get(f"/v1/files/{mine.id}").status_code == 404
    a.files.delete(mine.id)
    assert_unknown(a.files.retrieve, mine.id)
    assert b.files.content(theirs.id).content == b"B's notes"


def test_vector_stores_of_another_tenant_are_unknown(gw: Gateway) -> None:
    mine, theirs = own(gw.a, "a", HERONS), own(gw.b, "b", EGRETS)
    stores = gw.b.vector_stores

    assert_unknown(stores.retrieve, mine.store_id)
    assert_unknown(lambda vs: stores.update(vs, name="taken"), mine.store_id)
    assert_unknown(stores.delete, mine.store_id)
    assert_unknown(lambda vs: stores.search(vs, query="herons"), mine.store_id)
    assert_unknown(lambda vs: stores.list(after=vs), mine.store_id)
    assert [s.id for s in stores.list()] == [theirs.store_id]
    assert [s.id for s in gw.a.vector_stores.list()] == [mine.store_id]

    # the files of A's store
    files = stores.files
    assert_unknown(lambda vs: files.list(vector_store_id=vs), mine.store_id)
    for call in (
        files.retrieve,
        files.delete,
        lambda f, vector_store_id: files.update(f, vector_store_id=vector_store_id, attributes={}),
        lambda f, vector_store_id: files.content(f, vector_store_id=vector_store_id),
    ):
        assert_unknown(lambda vs, c=call: c(mine.file_id, vector_store_id=vs), mine.store_id)
        # A's file id in B's own store: as a file that is not in it
        assert_unknown(lambda f, c=call: c(f, vector_store_id=theirs.store_id), mine.file_id)

    # file batches
    batches = stores.file_batches
    for call in (batches.retrieve, batches.cancel, batches.list_files):
        assert_unknown(lambda vs, c=call: c(mine.batch_id, vector_store_id=vs), mine.store_id)
        assert_unknown(
            lambda batch, c=call: c(batch, vector_store_id=theirs.store_id), mine.batch_id
        )
    assert_unknown(
        lambda vs: batches.create(vector_store_id=vs, file_ids=[theirs.file_id]), mine.store_id
    )
    assert_unknown(
        lambda vs: files.create(vector_store_id=vs, file_id=theirs.file_id), mine.store_id
    )

    # A's store is as it was, and A's alone
    store = gw.a.vector_stores.retrieve(mine.store_id)
    assert (store.name, store.status, store.file_counts.completed) == ("a", "completed", 1)
    found = gw.a.vector_stores.search(mine.store_id, query="wading birds")
    assert [hit.file_id for hit in found.data] == [mine.file_id]
    batch = gw.a.vector_stores.file_batches.retrieve(mine.batch_id, vector_store_id=mine.store_id)
    assert batch.status == "completed"
    content = gw.a.vector_stores.files.content(mine.file_id, vector_store_id=mine.store_id)
    assert [part.text for part in content.data] == [HERONS]


def test_attaching_another_tenants_file_fails_as_an_unknown_file(gw: Gateway) -> None:
    mine, theirs = own(gw.a, "a", HERONS), own(gw.b, "b", EGRETS)
    stores = gw.b.vector_stores

    assert_unknown(
        lambda f: stores.files.create(vector_store_id=theirs.store_id, file_id=f), mine.file_id
    )
    assert_unknown(
        lambda f: stores.file_batches.create(vector_store_id=theirs.store_id, file_ids=[f]),
        mine.file_id,
    )
    assert_unknown(lambda f: stores.create(name="stolen", file_ids=[f]), mine.file_id)

    assert [s.id for s in stores.list()] == [theirs.store_id]  # none created
    listed = stores.files.list(vector_store_id=theirs.store_id)
    assert [f.id for f in listed] == [theirs.file_id]
    found = stores.search(theirs.store_id, query="herons")
    assert {hit.file_id for hit in found.data} == {theirs.file_id}  # never A's passages
    # B deleting its own file and store leaves A's
    gw.b.files.delete(theirs.file_id)
    stores.delete(theirs.store_id)
    assert gw.a.vector_stores.retrieve(mine.store_id).file_counts.completed == 1
    assert gw.a.vector_stores.search(mine.store_id, query="herons").data


def test_a_file_search_tool_searches_only_its_tenants_stores(gw: Gateway) -> None:
    mine, theirs = own(gw.a, "a", HERONS), own(gw.b, "b", EGRETS)

    def ask(store_id: str) -> Any:
        return gw.b.responses.create(
            model=MODEL,
            input="Which birds wade?",
            tools=[{"type": "file_search", "vector_store_ids": [store_id]}],
            include=["file_search_call.results"],
        )

    # A's store is unknown to B: refused before the model is asked
    assert_unknown(ask, mine.store_id)
    assert gw.upstream.requests == []
    answer = ask(theirs.store_id)
    call = answer.output[0]
    assert call.type == "file_search_call" and call.status == "completed"
    assert [hit.file_id for hit in call.results or []] == [theirs.file_id]
    assert EGRETS in answer.output_text and HERONS not in answer.output_text


def test_ingestion_resumed_after_a_restart_stays_the_stores_tenants(
    settings: Callable[..., Settings],
) -> None:
    held = FakeEmbedder(gate=asyncio.Event())  # never opened: the file stays in progress
    with tenants_gateway(settings(), TenantsUpstream(), A, B, embedder=held) as http:
        a = client_as(http, A)
        uploaded = a.files.create(file=("herons.txt", HERONS.encode()), purpose="assistants")
        store = a.vector_stores.create(name="birds", file_ids=[uploaded.id])
        assert store.file_counts.in_progress == 1
    # the next gateway on the database resumes the ingestion, as A's
    with tenants_gateway(settings(), TenantsUpstream(), A, B, embedder=FakeEmbedder()) as http:
        a, b = client_as(http, A), client_as(http, B)
        ingested(a, store.id)
        found = a.vector_stores.search(store.id, query="wading birds")
        assert [hit.file_id for hit in found.data] == [uploaded.id]
        assert_unknown(b.vector_stores.retrieve, store.id)
        assert_unknown(lambda vs: b.vector_stores.search(vs, query="herons"), store.id)
        assert b.vector_stores.list().data == []


# ------------------------------------------------------------------------------- messages


def test_messages_store_nothing_and_run_their_tools_as_the_caller(
    settings: Callable[..., Settings], database_url: str, tmp_path: Path
) -> None:
    tools = tmp_path / "weather.yaml"
    tools.write_text(yaml.safe_dump(WEATHER_TOOLS))
    weather = settings(
        tool_engines={"sim": {"kind": "lm", "model": SIMULATOR}},
        tool_sets=[{"namespace": "weather", "engine": "sim", "file": str(tools)}],
        default_tool_sets=["weather"],
    )
    with tenants_gateway(weather, TenantsUpstream(), A, B) as http:
        said = claude_as(http, B).messages.create(
            model=MODEL,
            max_tokens=64,
            messages=[{"role": "user", "content": "Weather in Oslo tomorrow?"}],
        )
        # the model asked the forecast tool, and said what it answered
        text = said.content[-1]
        assert text.type == "text" and json.loads(text.text) == FORECAST
        response_id = "resp_" + said.id.removeprefix("msg_")
        # nothing stored: to either tenant, its response is an unknown id
        for client in (client_as(http, A), client_as(http, B)):
            assert_unknown(lambda i, c=client: c.responses.retrieve(i), response_id)
    # the tool ran in a session of B's (the lm engine's state), none of A's
    assert tool_session(database_url, response_id, B) is not None
    assert tool_session(database_url, response_id, A) is None


def tool_session(url: str, session_id: str, tenant: str) -> JsonObject | None:
    async def read() -> JsonObject | None:
        store = SqlResponseStore(create_engine_for(url))
        try:
            return await store.load_tool_session(session_id, tenant=tenant)
        finally:
            await store.aclose()

    return run_in_thread(read)
