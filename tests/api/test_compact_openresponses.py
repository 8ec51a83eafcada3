"""The Open Responses compact scenarios (openresponses/openresponses: the specification's
"Context Compaction" capability, ``schema/paths/responses_compact.json``, the request body
``CompactResponseMethodPublicBody`` with ``model`` required and the answer ``CompactResource``)
run through the ``openai`` SDK against a gateway over a scripted upstream, on SQLite and on a
real PostgreSQL: compact a stored chain (``previous_response_id`` and ``instructions``, as the
specification's example), compact an ``input``, continue from the compacted items (and keep
chaining from the stored continuation), and a missing ``model`` is a 400."""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import openai
import pytest
from openai.types.responses import CompactedResponse, Response

from app.main import create_app
from app.settings import Settings
from tests.api.test_compaction import MODEL, SUMMARY, SummarizingUpstream
from tests.background.test_background_api import database_url
from tests.helpers import in_process, openai_client, serve_in_thread

__all__ = ["database_url"]  # the fixture, parametrized on SQLite and PostgreSQL

# The specification's example instructions for a compaction pass.
INSTRUCTIONS = "Compact the conversation while preserving user goals and open tasks."
# CompactResource's required fields, and Usage's.
COMPACT_RESOURCE_FIELDS = {"id", "object", "output", "created_at", "usage"}
USAGE_FIELDS = {"input_tokens", "output_tokens", "total_tokens"}


@dataclass
class Gateway:
    client: openai.OpenAI
    server: SummarizingUpstream


@pytest.fixture
def gateway(database_url: str) -> Iterator[Gateway]:
    server = SummarizingUpstream()
    with serve_in_thread(server.app()) as url:
        settings = Settings(upstream_url=url, database_url=database_url)
        with in_process(create_app(settings)) as http:
            yield Gateway(openai_client(http), server)


def compact_resource(client: openai.OpenAI, **fields: Any) -> CompactedResponse:
    """``POST /v1/responses/compact``; its JSON checked against ``CompactResource`` (the
    required fields, the object type, the items), then as the SDK parses it. (Not with the
    SDK's ``CompactedResponse.model_validate``: its ``output`` is typed as output items, which
    the user messages that OpenAI's compaction keeps, ``input_text`` parts, are not.)"""
    raw = client.responses.with_raw_response.compact(model=MODEL, **fields)
    body = json.loads(raw.text)
    assert body.keys() >= COMPACT_RESOURCE_FIELDS
    assert body["object"] == "response.compaction"
    assert isinstance(body["created_at"], int) and isinstance(body["id"], str)
    assert body["usage"].keys() >= USAGE_FIELDS
    assert all(isinstance(item.get("type"), str) for item in body["output"])
    compactions = [item for item in body["output"] if item["type"] == "compaction"]
    assert len(compactions) == 1 and body["output"][-1] is compactions[0]
    assert isinstance(compactions[0]["encrypted_content"], str)
    assert SUMMARY not in json.dumps(body)  # opaque: the summary is not readable in it
    parsed = raw.parse()
    assert parsed.id == body["id"] and len(parsed.output) == len(body["output"])
    return parsed


def as_input(items: list[Any]) -> list[Any]:
    return [item.model_dump(exclude_none=True, warnings=False) for item in items]


def test_compact_a_chain_then_continue_from_the_compacted_items(gateway: Gateway) -> None:
    client, server = gateway.client, gateway.server
    first = client.responses.create(model=MODEL, input="Remember the code word: papaya.")
    second = client.responses.create(
        model=MODEL, input="And my name is Ada.", previous_response_id=first.id
    )

    compacted = compact_resource(client, previous_response_id=second.id, instructions=INSTRUCTIONS)

    summary_round = json.dumps(server.requests[-1])
    assert "papaya" in summary_round and first.output_text in summary_round
    assert INSTRUCTIONS in summary_round
    assert [getattr(item, "role", item.type) for item in compacted.output] == [
        "user",
        "user",
        "compaction",
    ]

    # Continue from the compacted items: the model sees the summary, not the old turns.
    continued = client.responses.create(
        model=MODEL, input=[*as_input(compacted.output), {"role": "user", "content": "Go on."}]
    )
    assert continued.status == "completed"
    seen = json.dumps(server.requests[-1])
    assert SUMMARY in seen and first.output_text not in seen and second.output_text not in seen
    stored = client.responses.retrieve(continued.id)
    Response.model_validate(stored.model_dump())
    assert stored.output_text == continued.output_text
    items = client.responses.input_items.list(continued.id, order="asc").data
    assert [item.type for item in items][-2:] == ["compaction", "message"]

    # The stored continuation chains on, its compaction item standing for the old turns.
    after = client.responses.create(
        model=MODEL, input="And then?", previous_response_id=continued.id
    )
    assert after.status == "completed"
    seen = json.dumps(server.requests[-1])
    assert SUMMARY in seen and continued.output_text in seen
    assert first.output_text not in seen  # kept: the user's messages, not the old answers


def test_compact_an_input_then_compact_the_result_again(gateway: Gateway) -> None:
    client = gateway.client
    history: Any = [
        {"role": "user", "content": "My name is Alice."},
        {"role": "assistant", "content": "Hello Alice! How can I help you today?"},
        {"role": "user", "content": "What is my name?"},
    ]
    compacted = compact_resource(client, input=history)
    again = compact_resource(
        client, input=[*as_input(compacted.output), {"role": "user", "content": "More."}]
    )
    kinds = [getattr(item, "role", item.type) for item in again.output]
    assert kinds == ["user", "user", "user", "compaction"]  # the older compaction is folded in
    assert "Hello Alice" not in json.dumps(gateway.server.requests[-1])


def test_missing_model_is_a_400(gateway: Gateway) -> None:
    client = gateway.client
    calls = len(gateway.server.requests)
    with pytest.raises(openai.BadRequestError) as null_model:
        client.responses.compact(model=None, input="hi")
    with pytest.raises(openai.BadRequestError) as no_model:
        client.post("/responses/compact", body={"input": "hi"}, cast_to=object)
    for caught in (null_model, no_model):
        error: Any = caught.value.body
        assert caught.value.status_code == 400
        assert error["type"] == "invalid_request_error" and error["param"] == "model"
    assert len(gateway.server.requests) == calls  # nothing went upstream
