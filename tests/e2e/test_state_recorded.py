"""Server-side state against real multi-turn recordings, through the SDK and the SQL store.

* ``previous_response_id`` chains recorded against OpenAI and vLLM (``tool_calls/multi_turn``):
  the client sends exactly what the recorded client sent; the upstream, which keeps no state
  behind the gateway, must receive the whole history: every earlier input and output of the
  chain (and only of that branch), then the new input.
* Client-side-history recordings (the client resent the history itself): the gateway is
  driven with only the new input plus ``previous_response_id`` and must send the upstream the
  same history the recorded client sent.

Items are compared without ids (the gateway names the items it stores) and with message
content in one canonical form (a string is an ``input_text``/``output_text`` part).
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from app.protocol.json_types import JsonObject
from app.recording.cassette import Turn
from tests.e2e.conftest import SharedStack
from tests.e2e.test_openai_sdk import sdk_kwargs
from tests.recordings import SHARED as SHARED_CASSETTES
from tests.recordings import needs_shared

pytestmark = needs_shared

CHAINS = [
    f"tool_calls/multi_turn/{prefix}responses_tool_calls_{kind}.yaml"
    for prefix in ("", "openai_")
    for kind in ("3turn", "5turn", "branch", "parallel", "tool_output_only")
]
CLIENT_SIDE_HISTORY = ["sglang/sglang-stateful-Qwen-Qwen3-8B-nonstreaming.yaml"]


def view(item: JsonObject) -> JsonObject:
    """An item's content, comparable across servers and clients."""
    kind = item.get("type") or ("message" if "role" in item else None)
    if kind == "message":
        content = item.get("content")
        parts = [{"text": content}] if isinstance(content, str) else content or []
        return {
            "type": "message",
            "role": item.get("role"),
            "text": [part.get("text") or part.get("refusal") for part in parts],
        }
    if kind == "function_call":
        return {
            "type": kind,
            "name": item.get("name"),
            "call_id": item.get("call_id"),
            "arguments": json.loads(item.get("arguments") or "null"),
        }
    if kind == "function_call_output":
        return {"type": kind, "call_id": item.get("call_id"), "output": item.get("output")}
    if kind == "reasoning":
        return {
            "type": kind,
            "content": [part.get("text") for part in item.get("content") or []],
            "encrypted_content": item.get("encrypted_content"),
        }
    return {k: v for k, v in item.items() if k not in ("id", "status")}


def as_items(value: Any) -> list[JsonObject]:
    if isinstance(value, str):
        return [{"type": "message", "role": "user", "content": value}]
    return list(value or [])


def responses_turns(turns: list[Turn]) -> list[Turn]:
    return [t for t in turns if t.request.path == "/v1/responses"]


@pytest.mark.parametrize("relative", CHAINS)
def test_previous_response_id_chain_sends_the_whole_history(
    replay_stack: SharedStack, relative: str
) -> None:
    stack = replay_stack.play(SHARED_CASSETTES / relative)
    turns = responses_turns(stack.cassette.turns)
    gateway_id: dict[str, str] = {}  # recorded response id -> the gateway's
    history: dict[str, list[JsonObject]] = {}  # gateway response id -> its checkpoint
    for turn in turns:
        body = dict(turn.request.body)
        parent = body.get("previous_response_id")
        if parent:
            body["previous_response_id"] = gateway_id[parent]
        response = stack.client.responses.create(**sdk_kwargs(body))
        recorded = turn.response.body
        gateway_id[recorded["id"]] = response.id
        output = response.model_dump(mode="json", warnings=False)["output"]
        assert [view(i) for i in output] == [view(i) for i in recorded["output"]]

        sent = stack.received()[-1]["body"]
        assert isinstance(sent, dict)
        assert "previous_response_id" not in sent
        expected = [*history.get(body.get("previous_response_id", ""), [])]
        expected += as_items(turn.request.body["input"])
        assert [view(i) for i in as_items(sent["input"])] == [view(i) for i in expected]
        history[response.id] = [*expected, *output]

        stored = stack.client.responses.retrieve(response.id)
        assert stored.model_dump(mode="json", warnings=False) == response.model_dump(
            mode="json", warnings=False
        )


@pytest.mark.parametrize("relative", CLIENT_SIDE_HISTORY)
def test_client_side_history_is_supplied_by_the_gateway(
    replay_stack: SharedStack, relative: str
) -> None:
    stack = replay_stack.play(SHARED_CASSETTES / relative)
    turns = responses_turns(stack.cassette.turns)
    first, *rest = turns
    previous = stack.client.responses.create(**sdk_kwargs(dict(first.request.body)))
    history = [*as_items(first.request.body["input"]), *first.response.body["output"]]
    for turn in rest:
        recorded_input = as_items(turn.request.body["input"])
        assert [view(i) for i in recorded_input[: len(history)]] == [view(i) for i in history], (
            "the recorded client did not resend the whole history"
        )
        new_input = recorded_input[len(history) :]
        body = {**turn.request.body, "input": new_input, "previous_response_id": previous.id}
        previous = stack.client.responses.create(**sdk_kwargs(body))
        sent = stack.received()[-1]["body"]
        assert isinstance(sent, dict)
        assert [view(i) for i in as_items(sent["input"])] == [view(i) for i in recorded_input]
        history = [*recorded_input, *turn.response.body["output"]]


def test_input_items_lists_the_new_input_of_a_response(replay_stack: SharedStack) -> None:
    relative = "tool_calls/multi_turn/responses_tool_calls_3turn.yaml"
    stack = replay_stack.play(SHARED_CASSETTES / relative)
    turns = responses_turns(stack.cassette.turns)
    first = stack.client.responses.create(**sdk_kwargs(dict(turns[0].request.body)))
    body = {**turns[1].request.body, "previous_response_id": first.id}
    second = stack.client.responses.create(**sdk_kwargs(body))
    page = stack.client.responses.input_items.list(second.id, order="asc")
    assert [view(i.model_dump(mode="json", warnings=False)) for i in page.data] == [
        view(i) for i in as_items(turns[1].request.body["input"])
    ]
    assert all(i.id for i in page.data)


def test_deleted_response_cannot_be_retrieved_or_continued(replay_stack: SharedStack) -> None:
    import openai

    relative = "text_only/responses/resp-two-turn-gpt-4o-nonstreaming.yaml"
    stack = replay_stack.play(SHARED_CASSETTES / relative)
    first_turn = responses_turns(stack.cassette.turns)[0]
    first = stack.client.responses.create(**sdk_kwargs(dict(first_turn.request.body)))
    stack.client.responses.delete(first.id)
    with pytest.raises(openai.NotFoundError):
        stack.client.responses.retrieve(first.id)
    with pytest.raises(openai.BadRequestError) as caught:
        stack.client.responses.create(model="gpt-4o", input="and?", previous_response_id=first.id)
    assert caught.value.code == "previous_response_not_found"


def test_store_false_is_not_retrievable(replay_stack: SharedStack) -> None:
    import openai

    relative = "text_only/responses/resp-no-store-gpt-4o-nonstreaming.yaml"
    stack = replay_stack.play(SHARED_CASSETTES / relative)
    turn = responses_turns(stack.cassette.turns)[0]
    response = stack.client.responses.create(**sdk_kwargs(dict(turn.request.body)))
    assert response.store is False
    with pytest.raises(openai.NotFoundError):
        stack.client.responses.retrieve(response.id)
