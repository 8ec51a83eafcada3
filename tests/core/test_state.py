"""Server-side state in the service: rehydration, validation, persistence (in-memory store)."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from app.core.service import ResponsesService
from app.core.tenancy import DEFAULT_TENANT
from app.errors import InvalidRequestError, NotFoundError
from app.protocol.json_types import JsonObject
from app.protocol.requests import ParsedRequest
from tests.fakes import FakeUpstream, MemoryResponseStore


def message(text: str) -> JsonObject:
    return {
        "id": "msg_upstream",
        "type": "message",
        "role": "assistant",
        "status": "completed",
        "content": [{"type": "output_text", "text": text, "annotations": []}],
    }


def call(call_id: str) -> JsonObject:
    return {
        "id": "fc_upstream",
        "type": "function_call",
        "call_id": call_id,
        "name": "get_weather",
        "arguments": '{"city": "Paris"}',
        "status": "completed",
    }


class ScriptedUpstream(FakeUpstream):
    """Answers each JSON call with the next canned output."""

    def __init__(self, *outputs: list[JsonObject]) -> None:
        super().__init__()
        self.outputs = list(outputs)

    async def create_response(self, body: JsonObject, headers: Any) -> JsonObject:
        self.requests.append(copy.deepcopy(body))
        output = self.outputs.pop(0)
        return {"status": "completed", "output": output, "usage": {"input_tokens": 1}}


@pytest.fixture
def store() -> MemoryResponseStore:
    return MemoryResponseStore()


async def test_previous_response_id_sends_the_checkpoint_then_the_new_input(
    store: MemoryResponseStore,
) -> None:
    upstream = ScriptedUpstream([message("OK")], [message("APPLE")])
    service = ResponsesService(upstream, store)
    first = await service.create(
        ParsedRequest.from_body(
            {"model": "m", "input": "Remember APPLE. Say OK"}, tenant=DEFAULT_TENANT
        ),
        {},
    )
    second = await service.create(
        ParsedRequest.from_body(
            {"model": "m", "input": "Which word?", "previous_response_id": first["id"]},
            tenant=DEFAULT_TENANT,
        ),
        {},
    )
    sent = upstream.requests[1]
    assert "previous_response_id" not in sent
    assert [(i["type"], i.get("role")) for i in sent["input"]] == [
        ("message", "user"),
        ("message", "assistant"),
        ("message", "user"),
    ]
    assert sent["input"][0]["content"] == [{"type": "input_text", "text": "Remember APPLE. Say OK"}]
    assert sent["input"][1]["id"] == first["output"][0]["id"]
    assert second["previous_response_id"] == first["id"]
    stored = await store.get_response(second["id"], tenant=DEFAULT_TENANT)
    assert stored is not None and stored.response == second
    assert len(stored.checkpoint_ids) == 4


async def test_output_items_get_gateway_ids(store: MemoryResponseStore) -> None:
    service = ResponsesService(ScriptedUpstream([message("a")], [message("b")]), store)
    one = await service.create(
        ParsedRequest.from_body({"model": "m", "input": "x"}, tenant=DEFAULT_TENANT), {}
    )
    two = await service.create(
        ParsedRequest.from_body({"model": "m", "input": "y"}, tenant=DEFAULT_TENANT), {}
    )
    ids = [one["output"][0]["id"], two["output"][0]["id"]]
    assert ids[0] != ids[1] and all(i.startswith("msg_") for i in ids)


async def test_instructions_are_not_inherited(store: MemoryResponseStore) -> None:
    upstream = ScriptedUpstream([message("OK")], [message("OK")])
    service = ResponsesService(upstream, store)
    first = await service.create(
        ParsedRequest.from_body(
            {"model": "m", "input": "a", "instructions": "be terse"}, tenant=DEFAULT_TENANT
        ),
        {},
    )
    second = await service.create(
        ParsedRequest.from_body(
            {"model": "m", "input": "b", "previous_response_id": first["id"]}, tenant=DEFAULT_TENANT
        ),
        {},
    )
    assert "instructions" not in upstream.requests[1]
    assert second["instructions"] is None


async def test_unknown_previous_response_is_a_400(store: MemoryResponseStore) -> None:
    service = ResponsesService(ScriptedUpstream(), store)
    with pytest.raises(InvalidRequestError) as caught:
        await service.create(
            ParsedRequest.from_body(
                {"model": "m", "input": "a", "previous_response_id": "resp_nope"},
                tenant=DEFAULT_TENANT,
            ),
            {},
        )
    assert caught.value.code == "previous_response_not_found"
    assert caught.value.param == "previous_response_id"


async def test_previous_response_and_conversation_together_is_a_400(
    store: MemoryResponseStore,
) -> None:
    service = ResponsesService(ScriptedUpstream(), store)
    with pytest.raises(InvalidRequestError):
        await service.create(
            ParsedRequest.from_body(
                {
                    "model": "m",
                    "input": "a",
                    "previous_response_id": "resp_1",
                    "conversation": "conv_1",
                },
                tenant=DEFAULT_TENANT,
            ),
            {},
        )


async def test_pending_function_calls_need_their_outputs(store: MemoryResponseStore) -> None:
    upstream = ScriptedUpstream([call("call_1"), call("call_2")], [message("Sunny")])
    service = ResponsesService(upstream, store)
    first = await service.create(
        ParsedRequest.from_body(
            {
                "model": "m",
                "input": "weather?",
                "tools": [{"type": "function", "name": "get_weather"}],
            },
            tenant=DEFAULT_TENANT,
        ),
        {},
    )
    one_output = {"type": "function_call_output", "call_id": "call_1", "output": "sunny"}
    with pytest.raises(InvalidRequestError) as caught:
        await service.create(
            ParsedRequest.from_body(
                {"model": "m", "input": [one_output], "previous_response_id": first["id"]},
                tenant=DEFAULT_TENANT,
            ),
            {},
        )
    assert caught.value.message == "No tool output found for function call call_2."
    assert caught.value.param == "input"
    both = [one_output, {**one_output, "call_id": "call_2"}]
    answer = await service.create(
        ParsedRequest.from_body(
            {"model": "m", "input": both, "previous_response_id": first["id"]},
            tenant=DEFAULT_TENANT,
        ),
        {},
    )
    assert answer["status"] == "completed"
    sent = upstream.requests[-1]["input"]
    assert [i["type"] for i in sent] == [
        "message", "function_call", "function_call", "function_call_output",
        "function_call_output",
    ]  # fmt: skip
    assert first["tools"][0]["strict"] is True
    stored = await store.get_response(first["id"], tenant=DEFAULT_TENANT)
    assert stored is not None and stored.response["tools"] == first["tools"]


async def test_store_false_rehydrates_but_writes_nothing(store: MemoryResponseStore) -> None:
    upstream = ScriptedUpstream([message("OK")], [message("APPLE")])
    service = ResponsesService(upstream, store)
    first = await service.create(
        ParsedRequest.from_body({"model": "m", "input": "Remember APPLE"}, tenant=DEFAULT_TENANT),
        {},
    )
    second = await service.create(
        ParsedRequest.from_body(
            {"model": "m", "input": "Which?", "previous_response_id": first["id"], "store": False},
            tenant=DEFAULT_TENANT,
        ),
        {},
    )
    assert len(upstream.requests[1]["input"]) == 3
    assert await store.get_response(second["id"], tenant=DEFAULT_TENANT) is None
    with pytest.raises(InvalidRequestError):
        await service.create(
            ParsedRequest.from_body(
                {"model": "m", "input": "again", "previous_response_id": second["id"]},
                tenant=DEFAULT_TENANT,
            ),
            {},
        )


async def test_conversation_items_are_prepended_and_appended(store: MemoryResponseStore) -> None:
    conversation = await store.create_conversation({}, [], tenant=DEFAULT_TENANT)
    upstream = ScriptedUpstream([message("OK")], [message("LEMON")])
    service = ResponsesService(upstream, store)
    first = await service.create(
        ParsedRequest.from_body(
            {"model": "m", "input": "Remember LEMON", "conversation": conversation.id},
            tenant=DEFAULT_TENANT,
        ),
        {},
    )
    assert first["conversation"] == {"id": conversation.id}
    await service.create(
        ParsedRequest.from_body(
            {"model": "m", "input": "Which?", "conversation": {"id": conversation.id}},
            tenant=DEFAULT_TENANT,
        ),
        {},
    )
    assert len(upstream.requests[1]["input"]) == 3
    assert "conversation" not in upstream.requests[1]
    items = await store.conversation_items(conversation.id, tenant=DEFAULT_TENANT)
    assert items is not None
    assert [i["role"] for i in items] == ["user", "assistant", "user", "assistant"]


async def test_unknown_conversation_is_a_404(store: MemoryResponseStore) -> None:
    service = ResponsesService(ScriptedUpstream(), store)
    with pytest.raises(NotFoundError):
        await service.create(
            ParsedRequest.from_body(
                {"model": "m", "input": "a", "conversation": "conv_missing"}, tenant=DEFAULT_TENANT
            ),
            {},
        )


async def test_stateless_request_is_forwarded_unchanged(store: MemoryResponseStore) -> None:
    upstream = ScriptedUpstream([message("OK")])
    body = {"model": "m", "input": [{"role": "user", "content": "hi"}], "store": True}
    await ResponsesService(upstream, store).create(
        ParsedRequest.from_body(copy.deepcopy(body), tenant=DEFAULT_TENANT), {}
    )
    assert upstream.requests == [body]


async def test_input_item_referencing_a_stored_item_is_resolved(
    store: MemoryResponseStore,
) -> None:
    upstream = ScriptedUpstream([message("OK")], [message("OK")])
    service = ResponsesService(upstream, store)
    first = await service.create(
        ParsedRequest.from_body({"model": "m", "input": "a"}, tenant=DEFAULT_TENANT), {}
    )
    item_id = first["output"][0]["id"]
    await service.create(
        ParsedRequest.from_body(
            {"model": "m", "input": [{"type": "item_reference", "id": item_id}]},
            tenant=DEFAULT_TENANT,
        ),
        {},
    )
    assert upstream.requests[1]["input"] == [first["output"][0]]


async def test_delete_then_continue_is_not_found(store: MemoryResponseStore) -> None:
    service = ResponsesService(ScriptedUpstream([message("OK")]), store)
    first = await service.create(
        ParsedRequest.from_body({"model": "m", "input": "a"}, tenant=DEFAULT_TENANT), {}
    )
    assert await service.delete(first["id"], tenant=DEFAULT_TENANT) == {
        "id": first["id"],
        "object": "response",
        "deleted": True,
    }
    with pytest.raises(NotFoundError):
        await service.get(first["id"], tenant=DEFAULT_TENANT)
    with pytest.raises(InvalidRequestError):
        await service.create(
            ParsedRequest.from_body(
                {"model": "m", "input": "b", "previous_response_id": first["id"]},
                tenant=DEFAULT_TENANT,
            ),
            {},
        )


async def test_failed_responses_are_not_stored(store: MemoryResponseStore) -> None:
    class FailingUpstream(ScriptedUpstream):
        async def create_response(self, body: JsonObject, headers: Any) -> JsonObject:
            return {"status": "failed", "output": [], "error": {"code": "x", "message": "y"}}

    result = await ResponsesService(FailingUpstream(), store).create(
        ParsedRequest.from_body({"model": "m", "input": "a"}, tenant=DEFAULT_TENANT), {}
    )
    assert result["status"] == "failed"
    assert store.saved == []
