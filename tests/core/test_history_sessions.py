"""The tool engine session of a request (``History.session_id``) and the chain root a stored
response records: a conversation is one session, a ``previous_response_id`` chain is one
session named by its first response, a fresh request has none yet (its own response id)."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from app.core.history import rehydrate
from app.core.service import ResponsesService
from app.core.tenancy import DEFAULT_TENANT
from app.protocol.json_types import JsonObject
from app.protocol.requests import CreateResponseRequest, ParsedRequest
from tests.fakes import FakeUpstream, MemoryResponseStore


class AnsweringUpstream(FakeUpstream):
    """Answers every JSON call with one assistant message."""

    async def create_response(self, body: JsonObject, headers: Any) -> JsonObject:
        self.requests.append(copy.deepcopy(body))
        output = [
            {
                "id": "msg_upstream",
                "type": "message",
                "role": "assistant",
                "status": "completed",
                "content": [{"type": "output_text", "text": "OK", "annotations": []}],
            }
        ]
        return {"status": "completed", "output": output}


@pytest.fixture
def store() -> MemoryResponseStore:
    return MemoryResponseStore()


@pytest.fixture
def service(store: MemoryResponseStore) -> ResponsesService:
    return ResponsesService(AnsweringUpstream(), store)


def request(**fields: Any) -> CreateResponseRequest:
    return CreateResponseRequest.model_validate({"model": "m", "input": "hi", **fields})


async def create(service: ResponsesService, **fields: Any) -> JsonObject:
    body = {"model": "m", "input": "hi", **fields}
    return await service.create(ParsedRequest.from_body(body, tenant=DEFAULT_TENANT), {})


async def test_a_fresh_request_has_no_session_yet(store: MemoryResponseStore) -> None:
    history = await rehydrate(store, request(), tenant=DEFAULT_TENANT)

    assert history.session_id is None
    assert history.root_id is None


async def test_a_conversation_is_the_session(store: MemoryResponseStore) -> None:
    conversation = await store.create_conversation({}, [], tenant=DEFAULT_TENANT)

    for ref in (conversation.id, {"id": conversation.id}):
        history = await rehydrate(store, request(conversation=ref), tenant=DEFAULT_TENANT)
        assert history.session_id == conversation.id
        assert history.root_id is None  # a response in a conversation is its own root


async def test_a_chain_is_one_session_named_by_its_first_response(
    service: ResponsesService, store: MemoryResponseStore
) -> None:
    first = await create(service)
    second = await create(service, previous_response_id=first["id"])
    third = await create(service, previous_response_id=second["id"])

    for parent in (first, second, third):
        history = await rehydrate(
            store, request(previous_response_id=parent["id"]), tenant=DEFAULT_TENANT
        )
        assert history.session_id == first["id"]
        assert history.root_id == first["id"]
    # what the service saved with each response
    assert [store.saved[n].root_id for n in range(3)] == [None, first["id"], first["id"]]
    for response in (first, second, third):
        stored = await store.get_response(response["id"], tenant=DEFAULT_TENANT)
        assert stored is not None and stored.root_id == first["id"]


async def test_a_branch_of_a_chain_shares_its_session(
    service: ResponsesService, store: MemoryResponseStore
) -> None:
    first = await create(service)
    second = await create(service, previous_response_id=first["id"])
    branch = await create(service, previous_response_id=first["id"])
    fresh = await create(service)

    for response in (second, branch):
        stored = await store.get_response(response["id"], tenant=DEFAULT_TENANT)
        assert stored is not None and stored.root_id == first["id"]
    stored_fresh = await store.get_response(fresh["id"], tenant=DEFAULT_TENANT)
    assert stored_fresh is not None and stored_fresh.root_id == fresh["id"]


async def test_responses_in_a_conversation_are_their_own_roots(
    service: ResponsesService, store: MemoryResponseStore
) -> None:
    conversation = await store.create_conversation({}, [], tenant=DEFAULT_TENANT)
    first = await create(service, conversation=conversation.id)
    second = await create(service, conversation=conversation.id)

    assert [new.root_id for new in store.saved] == [None, None]
    for response in (first, second):
        stored = await store.get_response(response["id"], tenant=DEFAULT_TENANT)
        assert stored is not None and stored.root_id == response["id"]
