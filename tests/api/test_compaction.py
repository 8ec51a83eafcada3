"""``POST /v1/responses/compact`` through the openai SDK, over scripted upstreams of both kinds
on real sockets: compact a chain, continue from the compacted items (the upstream sees the
summary, not the old turns), forward to an upstream that compacts natively, and the 400s
(missing model, tampered or foreign compaction items)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import openai
import pytest
from openai.types.responses import CompactedResponse, ResponseCompactionItem
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from app.core.compaction import SUMMARY_PREFIX
from app.main import create_app
from app.protocol.json_types import JsonObject
from app.settings import Settings, UpstreamConfig
from tests.clients.scripted_chat_upstream import ScriptedChatUpstream
from tests.clients.scripted_upstream import ScriptedServer, ScriptedUpstream
from tests.fakes import message
from tests.helpers import in_process, openai_client, serve_in_thread

SUMMARY = "SUMMARY: the user is Ada; the codeword is PELICAN."
MODEL = "scripted-model"


def _summarizing(body: JsonObject) -> bool:
    """Whether a request is the gateway's summary round (its fixed instruction)."""
    return "You compact a conversation" in json.dumps(body)


def _reply(number: int) -> str:
    return f"ASSISTANT-REPLY-{number}"


@dataclass
class SummarizingUpstream(ScriptedUpstream):
    """A Responses server that writes ``SUMMARY`` when asked to compact, else a numbered reply."""

    def answer(self, body: JsonObject) -> list[JsonObject]:
        if _summarizing(body):
            return [message(SUMMARY)]
        return [message(_reply(len(self.requests)))]


@dataclass
class SummarizingChatUpstream(ScriptedChatUpstream):
    """The same as a chat-completions server."""

    def answer(self, body: JsonObject) -> JsonObject:
        text = SUMMARY if _summarizing(body) else _reply(len(self.requests))
        return {"role": "assistant", "content": text}


@dataclass
class NativeCompactUpstream(SummarizingUpstream):
    """A Responses server with its own ``/v1/responses/compact`` (as OpenAI has)."""

    compact_requests: list[JsonObject] = field(default_factory=list)

    def app(self) -> Starlette:
        app = super().app()
        app.router.routes.append(Route("/v1/responses/compact", self._compact, methods=["POST"]))
        return app

    async def _compact(self, request: Request) -> Response:
        body = await request.json()
        self.compact_requests.append(body)
        return JSONResponse(
            {
                "id": "resp_native",
                "object": "response.compaction",
                "created_at": 1764967971,
                "output": [
                    {"id": "cmp_native", "type": "compaction", "encrypted_content": "gAAAAnative"}
                ],
                "usage": {
                    "input_tokens": 7,
                    "input_tokens_details": {"cached_tokens": 0},
                    "output_tokens": 3,
                    "output_tokens_details": {"reasoning_tokens": 0},
                    "total_tokens": 10,
                },
            }
        )


def _serve(server: ScriptedServer) -> Any:
    return serve_in_thread(server.app())


@pytest.fixture(params=["responses", "chat"])
def gateway(request: pytest.FixtureRequest) -> Iterator[tuple[openai.OpenAI, ScriptedServer]]:
    """The SDK on a gateway over a summarizing upstream of each kind."""
    server: ScriptedServer = (
        SummarizingUpstream() if request.param == "responses" else SummarizingChatUpstream()
    )
    with _serve(server) as url:
        settings = Settings(upstream_url=url, upstream_kind=request.param)
        with in_process(create_app(settings)) as http:
            yield openai_client(http), server


def _seen(server: ScriptedServer) -> str:
    """What the upstream received last, as text."""
    return json.dumps(server.requests[-1])


def _dump(items: list[Any]) -> list[Any]:
    """Output items as a client sends them back as input."""
    return [item.model_dump(exclude_none=True, warnings=False) for item in items]


def _compaction(compacted: CompactedResponse) -> ResponseCompactionItem:
    """The compaction item that ends a compacted response's output."""
    last = compacted.output[-1]
    assert isinstance(last, ResponseCompactionItem)
    return last


def test_compact_a_chain_then_continue_from_the_compacted_items(
    gateway: tuple[openai.OpenAI, ScriptedServer],
) -> None:
    client, server = gateway
    first = client.responses.create(model=MODEL, input="My name is Ada.")
    second = client.responses.create(
        model=MODEL, input="The codeword is PELICAN.", previous_response_id=first.id
    )
    assert second.output_text == _reply(2)

    compacted = client.responses.compact(
        model=MODEL, previous_response_id=second.id, instructions="Be brief."
    )

    assert compacted.object == "response.compaction"
    assert compacted.id.startswith("resp_")
    kinds = [(item.type, getattr(item, "role", None)) for item in compacted.output]
    assert kinds == [("message", "user"), ("message", "user"), ("compaction", None)]
    compaction = _compaction(compacted)
    assert compaction.id.startswith("cmp_")
    assert SUMMARY not in compaction.encrypted_content  # opaque to the client
    assert compacted.usage.total_tokens >= 0
    # The summary round saw the whole chain, the assistant's turns included, and the
    # conversation's instructions.
    summary_round = _seen(server)
    assert _reply(1) in summary_round and _reply(2) in summary_round
    assert "Be brief." in summary_round
    calls = len(server.requests)

    follow = client.responses.create(
        model=MODEL,
        input=[*_dump(compacted.output), {"role": "user", "content": "What is the codeword?"}],
    )
    assert len(server.requests) == calls + 1
    seen = _seen(server)
    assert SUMMARY in seen and SUMMARY_PREFIX.split(".")[0] in seen
    assert _reply(1) not in seen and _reply(2) not in seen  # the old turns are gone
    assert compaction.encrypted_content not in seen  # lowered, never sent as it is
    assert "My name is Ada." in seen  # the user's messages are kept
    # Stored as the client sent it.
    listed = client.responses.input_items.list(follow.id, order="asc")
    stored = [item.model_dump() for item in listed.data if item.type == "compaction"]
    assert len(stored) == 1
    assert stored[0]["encrypted_content"] == compaction.encrypted_content

    # The stored history is lowered again on the next turn.
    client.responses.create(model=MODEL, input="And my name?", previous_response_id=follow.id)
    again = _seen(server)
    assert SUMMARY in again and compaction.encrypted_content not in again
    assert _reply(1) not in again


def test_a_compaction_can_be_compacted_again_and_streamed_from(
    gateway: tuple[openai.OpenAI, ScriptedServer],
) -> None:
    client, server = gateway
    compacted = client.responses.compact(
        model=MODEL,
        input=[
            {"role": "user", "content": "My name is Ada."},
            {"role": "assistant", "content": "Hello Ada."},
        ],
    )
    again = client.responses.compact(
        model=MODEL, input=[*_dump(compacted.output), {"role": "user", "content": "More."}]
    )
    # The second summary round read the first summary, not the token.
    assert SUMMARY in _seen(server)
    assert _compaction(compacted).encrypted_content not in _seen(server)
    assert [item.type for item in again.output] == ["message", "message", "compaction"]

    with client.responses.stream(
        model=MODEL, input=[*_dump(again.output), {"role": "user", "content": "Go on."}]
    ) as stream:
        final = stream.get_final_response()
    assert final.status == "completed"
    assert SUMMARY in _seen(server) and "Hello Ada." not in _seen(server)


def test_a_tampered_compaction_item_is_a_400_naming_its_index(
    gateway: tuple[openai.OpenAI, ScriptedServer],
) -> None:
    client, server = gateway
    compacted = client.responses.compact(model=MODEL, input="Remember PELICAN.")
    item: Any = _compaction(compacted).model_dump()
    version, payload, signature = item["encrypted_content"].split(".")
    forged = _forged(payload)
    calls = len(server.requests)
    for content in (f"{version}.{forged}.{signature}", f"{version}.{payload}.{signature[:-2]}"):
        edited: Any = {**item, "encrypted_content": content}
        with pytest.raises(openai.BadRequestError) as caught:
            client.responses.create(model=MODEL, input=[{"role": "user", "content": "hi"}, edited])
        error = caught.value.body
        assert isinstance(error, dict)
        assert error["param"] == "input[1].encrypted_content"
        assert error["code"] == "invalid_encrypted_content"
    # A compaction item this gateway did not write (an upstream without native compaction).
    with pytest.raises(openai.BadRequestError) as caught:
        client.responses.create(
            model=MODEL,
            input=[{"type": "compaction", "encrypted_content": "gAAAAforeign"}],
        )
    assert isinstance(caught.value.body, dict)
    assert caught.value.body["param"] == "input[0].encrypted_content"
    # Nor does compacting accept one.
    with pytest.raises(openai.BadRequestError):
        client.responses.compact(
            model=MODEL, input=[{"type": "compaction", "encrypted_content": "gAAAAforeign"}]
        )
    assert len(server.requests) == calls  # nothing reached the upstream


def _forged(payload: str) -> str:
    """``payload`` with one character changed (a client editing the summary)."""
    swapped = "A" if payload[5] != "A" else "B"
    return payload[:5] + swapped + payload[6:]


def test_missing_model_is_a_400_in_openai_envelope(
    gateway: tuple[openai.OpenAI, ScriptedServer],
) -> None:
    client, _ = gateway
    for body in ({"input": "hi"}, {"model": None, "input": "hi"}):
        with pytest.raises(openai.BadRequestError) as caught:
            client.post("/responses/compact", body=body, cast_to=object)
        error = caught.value.body
        assert isinstance(error, dict)
        assert error["type"] == "invalid_request_error"
        assert error["param"] == "model"


def test_an_unknown_previous_response_is_a_400(
    gateway: tuple[openai.OpenAI, ScriptedServer],
) -> None:
    client, _ = gateway
    with pytest.raises(openai.BadRequestError) as caught:
        client.responses.compact(model=MODEL, previous_response_id="resp_missing")
    assert isinstance(caught.value.body, dict)
    assert caught.value.body["code"] == "previous_response_not_found"


def test_an_upstream_that_compacts_natively_gets_the_request_as_it_came() -> None:
    server = NativeCompactUpstream()
    with _serve(server) as url:
        upstream = UpstreamConfig(
            name="openai", url=url, native_compact=True, model_map={"gw-model": MODEL}
        )
        settings = Settings(upstreams=[upstream])
        with in_process(create_app(settings)) as http:
            client = openai_client(http)
            compacted = client.responses.compact(
                model="gw-model", input="hi", prompt_cache_key="k1"
            )
            assert _compaction(compacted).encrypted_content == "gAAAAnative"
            assert compacted.usage.total_tokens == 10
            assert server.compact_requests == [
                {"model": MODEL, "input": "hi", "prompt_cache_key": "k1"}
            ]
            assert server.requests == []  # no summary round of the gateway's own
            # Its compaction items go back to it untouched.
            client.responses.create(
                model="gw-model", input=[*_dump(compacted.output), {"role": "user", "content": "x"}]
            )
            sent = server.requests[-1]["input"]
            assert {"type": "compaction", "encrypted_content": "gAAAAnative"}.items() <= sent[
                0
            ].items()


def test_compaction_items_outlive_the_gateway_process() -> None:
    """The signing key is kept in data_dir: a restarted gateway (or a replica sharing the
    directory) reads the items an earlier one wrote; the key file is its owner's only."""
    server = SummarizingUpstream()
    with _serve(server) as url:
        settings = Settings(upstream_url=url)
        with in_process(create_app(settings)) as http:
            compacted = openai_client(http).responses.compact(model=MODEL, input="Remember.")
        key = settings.data_dir / "compaction.key"
        assert key.stat().st_mode & 0o077 == 0
        with in_process(create_app(settings)) as http:
            openai_client(http).responses.create(
                model=MODEL, input=[*_dump(compacted.output), {"role": "user", "content": "Go."}]
            )
        assert SUMMARY in _seen(server)


AUTO = [{"type": "compaction", "compact_threshold": 20}]


def test_context_management_compacts_a_long_chain_first(
    gateway: tuple[openai.OpenAI, ScriptedServer],
) -> None:
    client, server = gateway
    first = client.responses.create(model=MODEL, input="My name is Ada.")
    calls = len(server.requests)

    second = client.responses.create(
        model=MODEL,
        input="The codeword is PELICAN, keep it.",
        previous_response_id=first.id,
        context_management=AUTO,  # type: ignore[arg-type]
    )

    # A summary round over the whole chain, then the turn over the user's messages and it.
    assert len(server.requests) == calls + 2
    assert _summarizing(server.requests[-2]) and _reply(1) in json.dumps(server.requests[-2])
    seen = _seen(server)
    assert SUMMARY in seen and _reply(1) not in seen
    assert "context_management" not in seen
    assert [item.type for item in second.output] == ["compaction", "message"]
    assert second.output_text == _reply(calls + 2)

    # The stored chain continues from the compaction: earlier turns are not sent again.
    client.responses.create(model=MODEL, input="Go on.", previous_response_id=second.id)
    again = _seen(server)
    assert SUMMARY in again and _reply(1) not in again
    assert _reply(calls + 2) in again and "My name is Ada." in again


def test_context_management_compacts_before_a_stream(
    gateway: tuple[openai.OpenAI, ScriptedServer],
) -> None:
    client, server = gateway
    history: Any = [
        {"role": "user", "content": "My name is Ada."},
        {"role": "assistant", "content": "Hello Ada, what a long conversation this is."},
        {"role": "user", "content": "What is my name?"},
    ]
    managed: Any = AUTO
    with client.responses.stream(model=MODEL, input=history, context_management=managed) as stream:
        kinds = [(event.type, getattr(event, "output_index", None)) for event in stream]
        final = stream.get_final_response()
    assert kinds[2:5] == [
        ("response.output_item.added", 0),
        ("response.compaction.compacting", 0),
        ("response.output_item.done", 0),
    ]
    assert ("response.output_item.added", 1) in kinds
    assert [item.type for item in final.output] == ["compaction", "message"]
    seen = _seen(server)
    assert SUMMARY in seen and "what a long conversation" not in seen
    stored = client.responses.retrieve(final.id)
    assert [item.type for item in stored.output] == ["compaction", "message"]


def test_context_management_under_the_threshold_only_stays_home(
    gateway: tuple[openai.OpenAI, ScriptedServer],
) -> None:
    client, server = gateway
    big: Any = [{"type": "compaction", "compact_threshold": 100_000}]
    response = client.responses.create(model=MODEL, input="Hi.", context_management=big)
    assert len(server.requests) == 1
    assert [item.type for item in response.output] == ["message"]
    assert "context_management" not in _seen(server)


def test_context_management_goes_to_an_upstream_that_compacts_natively() -> None:
    server = NativeCompactUpstream()
    with _serve(server) as url:
        upstream = UpstreamConfig(name="openai", url=url, native_compact=True)
        with in_process(create_app(Settings(upstreams=[upstream]))) as http:
            client = openai_client(http)
            client.responses.create(model=MODEL, input="Hi.", context_management=AUTO)  # type: ignore[arg-type]
    assert len(server.requests) == 1
    assert server.requests[0]["context_management"] == AUTO


def test_a_native_upstream_compacts_a_gateway_chain_from_its_items() -> None:
    """OpenAI knows neither the gateway's response ids nor its compaction items: it gets the
    chain's items, the gateway's compaction items lowered to their summaries."""
    server = NativeCompactUpstream()
    with _serve(server) as url:
        upstream = UpstreamConfig(name="openai", url=url, native_compact=True)
        with in_process(create_app(Settings(upstreams=[upstream]))) as http:
            client = openai_client(http)
            first = client.responses.create(model=MODEL, input="My name is Ada.")
            client.responses.compact(model=MODEL, previous_response_id=first.id)
    forwarded = server.compact_requests[-1]
    assert "previous_response_id" not in forwarded
    texts = json.dumps(forwarded["input"])
    assert "My name is Ada." in texts and _reply(1) in texts
