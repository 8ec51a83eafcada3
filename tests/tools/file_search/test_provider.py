"""The file_search tool in the loop, over a hand-written vector store search."""

from __future__ import annotations

import json
from typing import Any

import pytest

from app.core.service import ResponsesService
from app.core.tenancy import DEFAULT_TENANT
from app.errors import InvalidRequestError, NotFoundError
from app.files.checks import MissingObjectError
from app.files.requests import SearchRequest
from app.protocol.json_types import JsonObject
from app.protocol.requests import ParsedRequest
from app.tools.file_search.provider import FileSearchToolProvider, format_results
from app.tools.toolkit import GatewayToolKit
from tests.fakes import MemoryResponseStore, ScriptedUpstream, function_call, message
from tests.lifecycle import assert_lifecycle

PASSAGES = {
    "vs_docs": [
        ("file-rust", "rust.md", 0.91, "Ownership: each value has a single owner.", {"lang": "en"}),
        ("file-go", "go.md", 0.42, "Go uses a garbage collector.", {"lang": "en"}),
    ]
}


# Exists when the request is checked, gone when the model searches it.
VANISHING = "vs_vanishing"


class RecordingSearch:
    """Answers like ``POST /v1/vector_stores/{id}/search`` and records the requests it got (the
    fields set)."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, JsonObject]] = []
        self.tenants: set[str] = set()  # the tenants it was asked for

    async def check_vector_store(self, vector_store_id: str, *, tenant: str) -> None:
        self.tenants.add(tenant)
        if vector_store_id not in PASSAGES and vector_store_id != VANISHING:
            raise MissingObjectError(f"No vector store found with id '{vector_store_id}'.")

    async def search(
        self, vector_store_id: str, request: SearchRequest, *, tenant: str
    ) -> JsonObject:
        self.tenants.add(tenant)
        self.calls.append((vector_store_id, request.model_dump(exclude_unset=True)))
        if vector_store_id not in PASSAGES:
            raise NotFoundError(f"No vector store found with id '{vector_store_id}'.")
        data = [
            {
                "file_id": file_id,
                "filename": filename,
                "score": score,
                "attributes": attributes,
                "content": [{"type": "text", "text": text}],
            }
            for file_id, filename, score, text, attributes in PASSAGES[vector_store_id]
        ][: request.max_num_results]
        return {"object": "vector_store.search_results.page", "data": data, "has_more": False}


def make(
    rounds: list[list[JsonObject]],
) -> tuple[ResponsesService, ScriptedUpstream, RecordingSearch]:
    search = RecordingSearch()
    upstream = ScriptedUpstream(rounds)
    toolkit = GatewayToolKit([FileSearchToolProvider(search)])
    return ResponsesService(upstream, MemoryResponseStore(), toolkit=toolkit), upstream, search


TOOL: JsonObject = {"type": "file_search", "vector_store_ids": ["vs_docs"], "max_num_results": 5}


def body(**extra: Any) -> JsonObject:
    return {"model": "m", "input": "How does Rust manage memory?", "tools": [TOOL], **extra}


@pytest.mark.parametrize("include", [True, False])
async def test_a_search_round_streams_a_file_search_call_and_cites_the_file(include: bool) -> None:
    service, upstream, search = make(
        [
            [function_call("file_search", '{"query": "Rust memory ownership"}')],
            [message("Rust uses ownership (see rust.md).")],
        ]
    )
    extra = {"include": ["file_search_call.results"]} if include else {}
    events = [
        e
        async for e in await service.open_stream(
            ParsedRequest.from_body(body(stream=True, **extra), tenant=DEFAULT_TENANT), {}
        )
    ]
    final = assert_lifecycle(events)
    types = [e["type"] for e in events]
    for kind in ("in_progress", "searching", "completed"):
        assert types.count(f"response.file_search_call.{kind}") == 1
    call = final["output"][0]
    assert call["type"] == "file_search_call" and call["status"] == "completed"
    assert call["queries"] == ["Rust memory ownership"]
    if include:
        assert [r["filename"] for r in call["results"]] == ["rust.md", "go.md"]
        assert call["results"][0]["text"].startswith("Ownership")
        assert call["results"][0]["attributes"] == {"lang": "en"}
    else:
        assert call["results"] is None
    assert search.calls == [("vs_docs", {"max_num_results": 5, "query": "Rust memory ownership"})]
    assert search.tenants == {DEFAULT_TENANT}  # the request's (authentication off)
    fed = upstream.requests[1]["input"][-1]
    assert fed["type"] == "function_call_output" and "[1] rust.md" in fed["output"]
    annotations = final["output"][-1]["content"][0]["annotations"]
    text = final["output"][-1]["content"][0]["text"]
    assert annotations == [
        {
            "type": "file_citation",
            "file_id": "file-rust",
            "filename": "rust.md",
            "index": text.index("rust.md") + 7,
        }
    ]
    assert await service.get(final["id"], tenant=DEFAULT_TENANT) == final
    assert upstream.requests[0]["tools"][0]["name"] == "file_search"


async def test_a_store_that_vanishes_before_the_search_fails_the_call_not_the_response() -> None:
    tool = {**TOOL, "vector_store_ids": ["vs_docs", VANISHING]}
    service, upstream, _ = make(
        [[function_call("file_search", '{"queries": ["a", "b"]}')], [message("none")]]
    )
    final = await service.create(
        ParsedRequest.from_body({**body(), "tools": [tool]}, tenant=DEFAULT_TENANT), {}
    )
    assert final["output"][0]["status"] == "failed"
    assert VANISHING in upstream.requests[1]["input"][-1]["output"]


@pytest.mark.parametrize("stream", [False, True])
async def test_a_store_that_does_not_exist_is_a_404_before_inference(stream: bool) -> None:
    tool = {**TOOL, "vector_store_ids": ["vs_docs", "vs_missing"]}
    service, upstream, _ = make([[message("never")]])
    request = {**body(), "tools": [TOOL, tool], "stream": stream}
    with pytest.raises(MissingObjectError) as caught:
        if stream:
            await service.open_stream(ParsedRequest.from_body(request, tenant=DEFAULT_TENANT), {})
        else:
            await service.create(ParsedRequest.from_body(request, tenant=DEFAULT_TENANT), {})
    assert caught.value.status_code == 404
    assert caught.value.to_error() == {
        "message": "No vector store found with id 'vs_missing'.",
        "type": "invalid_request_error",
        "param": "tools[1].vector_store_ids[1]",
        "code": None,
    }
    assert upstream.requests == []


async def test_continuation_lowers_the_call_for_the_upstream() -> None:
    service, upstream, _ = make(
        [
            [function_call("file_search", '{"query": "q"}')],
            [message("done")],
            [message("again")],
        ]
    )
    first = await service.create(
        ParsedRequest.from_body(body(include=["file_search_call.results"]), tenant=DEFAULT_TENANT),
        {},
    )
    await service.create(
        ParsedRequest.from_body(
            {"model": "m", "previous_response_id": first["id"], "input": "more", "tools": [TOOL]},
            tenant=DEFAULT_TENANT,
        ),
        {},
    )
    sent = upstream.requests[2]["input"]
    kinds = [i["type"] for i in sent]
    assert kinds[:3] == ["message", "function_call", "function_call_output"]
    assert json.loads(sent[1]["arguments"]) == {"queries": ["q"]}
    assert sent[2]["output"] == format_results(first["output"][0]["results"])


@pytest.mark.parametrize(
    ("tool", "param"),
    [
        ({"type": "file_search"}, "tools[0].vector_store_ids"),
        ({"type": "file_search", "vector_store_ids": []}, "tools[0].vector_store_ids"),
        ({**TOOL, "max_num_results": 99}, "tools[0].max_num_results"),
        ({**TOOL, "filters": {"type": "eq"}}, "tools[0].filters"),
    ],
)
async def test_bad_file_search_tools_are_400s(tool: JsonObject, param: str) -> None:
    service, upstream, _ = make([])
    with pytest.raises(InvalidRequestError) as info:
        await service.create(
            ParsedRequest.from_body({**body(), "tools": [tool]}, tenant=DEFAULT_TENANT), {}
        )
    assert info.value.param == param
    assert upstream.requests == []
