"""Two tenants on one gateway (a real SQLite store), each through the ``openai`` SDK as its own
client (``tests.tenants``): every response, conversation, item and background endpoint called
by one tenant on the other's ids answers exactly as it does for an id nobody stored (same
status, same body but for the id: 404, or OpenAI's 400 for an unknown
``previous_response_id``), never 403; lists show each tenant only its own; a continuation,
``conversation`` or ``item_reference`` naming the other's objects fails as an unknown one; and
the owner's objects are untouched by all of it. Client-chosen item ids are per tenant.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import openai
import pytest
from starlette.testclient import TestClient

from app.core.ids import new_id
from app.protocol.json_types import JsonObject
from app.settings import Settings
from tests.background.test_background_api import POLL_DEADLINE, GatedUpstream
from tests.fakes import FakeUpstream, message, round_events
from tests.tenants import client_as, headers_as, tenants_gateway

MODEL = "test-model"
A, B = "acme", "globex"


class EchoUpstream(FakeUpstream):
    """Answers every request, streamed or not, with one message: the text of the last input
    item the upstream received (so a test sees which tenant's item it was given)."""

    async def create_response(self, body: JsonObject, headers: Any) -> JsonObject:
        self.requests.append(body)
        return {"status": "completed", "output": [message(_last_text(body))]}

    async def stream_response(self, body: JsonObject, headers: Any) -> Any:
        self.body = {}
        self.events = round_events([message(_last_text(body))])
        return await super().stream_response(body, headers)


def _last_text(body: JsonObject) -> str:
    value = body.get("input")
    if isinstance(value, str):
        return value
    for item in reversed(value if isinstance(value, list) else []):
        content = item.get("content")
        if isinstance(content, str):
            return content
        if isinstance(content, list) and content:
            return str(content[0].get("text"))
    return ""


@pytest.fixture
def settings(tmp_path: Path) -> Settings:
    return Settings(database_url=f"sqlite+aiosqlite:///{tmp_path / 'data' / 'respgate.db'}")


@pytest.fixture
def gateway(settings: Settings) -> Iterator[tuple[TestClient, EchoUpstream]]:
    upstream = EchoUpstream()
    with tenants_gateway(settings, upstream) as http:
        yield http, upstream


def refusal(call: Callable[[], object]) -> tuple[int, JsonObject]:
    """The status and body of the error ``call`` raises."""
    with pytest.raises(openai.APIStatusError) as raised:
        call()
    return raised.value.status_code, raised.value.response.json()


def assert_unknown(call: Callable[[str], object], their_id: str, status: int = 404) -> None:
    """``call`` with another tenant's ``their_id`` fails exactly as with an id nobody stored
    (one of the same kind): the same status and the same body, the id aside."""
    unknown_id = new_id(their_id.split("_", 1)[0])
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


def text_of(response: Any) -> str:
    return str(response.output_text)


def test_another_tenants_response_is_an_unknown_id(
    gateway: tuple[TestClient, EchoUpstream],
) -> None:
    http, upstream = gateway
    a, b = client_as(http, A), client_as(http, B)
    theirs = a.responses.create(model=MODEL, input="A's secret")
    rid = theirs.id

    assert_unknown(lambda i: b.responses.retrieve(i), rid)
    assert_unknown(lambda i: b.responses.retrieve(i, stream=True), rid)
    assert_unknown(lambda i: b.responses.input_items.list(i), rid)
    assert_unknown(lambda i: b.responses.cancel(i), rid)
    assert_unknown(lambda i: b.responses.delete(i), rid)
    # a continuation from it: OpenAI's 400 for an unknown previous response
    assert_unknown(
        lambda i: b.responses.create(model=MODEL, input="more", previous_response_id=i), rid, 400
    )
    assert_unknown(
        lambda i: b.responses.create(
            model=MODEL, input="more", previous_response_id=i, stream=True
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

    # nothing of it reached the upstream, and A's response is as it was
    assert len(upstream.requests) == 1
    assert a.responses.retrieve(rid).model_dump() == theirs.model_dump()
    [item] = a.responses.input_items.list(rid).data
    assert item.model_dump()["content"][0]["text"] == "A's secret"
    follow = a.responses.create(model=MODEL, input="and then?", previous_response_id=rid)
    assert text_of(follow) == "and then?"
    a.responses.delete(rid)
    with pytest.raises(openai.NotFoundError):
        a.responses.retrieve(rid)


def test_another_tenants_conversation_and_items_are_unknown(
    gateway: tuple[TestClient, EchoUpstream],
) -> None:
    http, upstream = gateway
    a, b = client_as(http, A), client_as(http, B)
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
    assert len(upstream.requests) == 1


def test_client_chosen_item_ids_are_per_tenant(
    gateway: tuple[TestClient, EchoUpstream],
) -> None:
    http, upstream = gateway
    a, b = client_as(http, A), client_as(http, B)
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
    assert text_of(a.responses.create(model=MODEL, input=reference)) == "A's words"
    assert text_of(b.responses.create(model=MODEL, input=reference)) == "B's words"
    # B's deleting its msg_1 leaves A's
    b.conversations.items.delete("msg_1", conversation_id=conv_b.id)
    assert listed(b, conv_b.id) == []
    assert listed(a, conv_a.id)[0] == mine
    # an input item that carries an id only another tenant has is the sender's own new item
    sent = b.responses.create(model=MODEL, input=[user("B again", "msg_2")])
    assert text_of(sent) == "B again"
    [stored] = b.responses.input_items.list(sent.id).data
    assert stored.model_dump()["content"][0]["text"] == "B again"
    assert len(upstream.requests) == 3


def test_the_websocket_of_another_tenant_cannot_continue_a_response(
    gateway: tuple[TestClient, EchoUpstream],
) -> None:
    http, _ = gateway
    rid = client_as(http, A).responses.create(model=MODEL, input="A's").id

    def first_frame(tenant: str, previous: str) -> JsonObject:
        with http.websocket_connect("/v1/responses", headers=headers_as(tenant)) as ws:
            body = {"type": "response.create", "model": MODEL, "input": "x"}
            ws.send_text(json.dumps({**body, "previous_response_id": previous}))
            frame: JsonObject = json.loads(ws.receive_text())
            return frame

    unknown = new_id("resp")
    refused = first_frame(B, rid)
    assert refused["type"] == "error" and refused["status"] == 400
    assert refused == json.loads(json.dumps(first_frame(B, unknown)).replace(unknown, rid))
    assert first_frame(A, rid)["type"] == "response.created"


def test_another_tenants_background_response_is_unknown(settings: Settings) -> None:
    upstream = GatedUpstream([[message("done for A")]])
    with tenants_gateway(settings, upstream) as http:
        a, b = client_as(http, A), client_as(http, B)
        queued = a.responses.create(model=MODEL, input="hi", background=True)
        rid = queued.id
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
        assert text_of(polled) == "done for A"
        with a.responses.retrieve(rid, stream=True, starting_after=0) as stream:
            events = [event.type for event in stream]
        assert events[-1] == "response.completed"
