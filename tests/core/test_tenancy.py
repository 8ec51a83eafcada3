"""The kernel runs a request as its tenant (``ParsedRequest.tenant``): it rehydrates, stores
and runs its tools (``ToolContext.tenant``: the tool engine session is the tenant's) as that
tenant, and another tenant's objects are unknown to it."""

from __future__ import annotations

import pytest

from app.core.engines import Namespace, ToolSpec
from app.core.service import ResponsesService
from app.core.tool_sessions import ToolSessions
from app.errors import InvalidRequestError, NotFoundError
from app.protocol.json_types import JsonObject
from app.protocol.requests import ParsedRequest
from app.tools.engines.multi import MultiEngine, Route
from app.tools.mcp.provider import McpToolProvider
from app.tools.toolkit import GatewayToolKit
from tests.fakes import MemoryResponseStore, ScriptedUpstream, function_call, message
from tests.tools.engines.recording_engine import RecordingEngine

A, B = "acme", "globex"
TOOLS: JsonObject = {"tools": [{"type": "mcp", "server_label": "crm"}]}


class StaticTools:
    async def list_tools(self) -> list[ToolSpec]:
        return [ToolSpec("crm", "read", "reads")]


def service_with_engine(
    rounds: list[list[JsonObject]],
) -> tuple[ResponsesService, MemoryResponseStore]:
    """A service whose ``mcp`` namespace ``crm`` runs on a recording engine, its sessions in
    the store (as ``app.tool_engines`` wires them)."""
    store = MemoryResponseStore()
    sessions = ToolSessions(MultiEngine({"crm": Route("api", RecordingEngine("api"))}), store)
    namespace = Namespace("crm", "api", StaticTools())
    provider = McpToolProvider(namespaces={"crm": namespace}, sessions=sessions)
    toolkit = GatewayToolKit([provider])
    return ResponsesService(ScriptedUpstream(rounds), store, toolkit=toolkit), store


def as_tenant(tenant: str, **body: object) -> ParsedRequest:
    return ParsedRequest.from_body({"model": "m", "input": "hi", **body}, tenant)


async def test_a_request_stores_and_runs_its_tools_as_its_tenant() -> None:
    rounds = [
        [function_call("mcp__crm__read", "{}")],
        [message("read it")],
        [function_call("mcp__crm__read", "{}")],
        [message("read it again")],
    ]
    service, store = service_with_engine(rounds)

    first = await service.create(as_tenant(A, **TOOLS), {})
    follow = await service.create(as_tenant(A, previous_response_id=first["id"], **TOOLS), {})

    # stored as A's only
    assert await service.get(first["id"], tenant=A) == first
    with pytest.raises(NotFoundError):
        await service.get(first["id"], tenant=B)
    # the chain's tool session (named by its first response) is A's, and both rounds ran in it
    assert list(store.tool_sessions) == [(A, first["id"])]
    state = await store.load_tool_session(first["id"], tenant=A)
    assert state is not None and len(state["engines"]["api"]["history"]) == 2
    assert await store.load_tool_session(first["id"], tenant=B) is None
    assert follow["output"][-1]["content"][0]["text"] == "read it again"


async def test_another_tenants_objects_are_unknown_to_a_request() -> None:
    service, store = service_with_engine([[message("A's answer")]])
    first = await service.create(as_tenant(A), {})
    conversation = await store.create_conversation({}, [], tenant=A)
    item_id = first["output"][0]["id"]

    with pytest.raises(InvalidRequestError) as refused:
        await service.create(as_tenant(B, previous_response_id=first["id"]), {})
    assert refused.value.code == "previous_response_not_found"
    with pytest.raises(NotFoundError, match="Conversation"):
        await service.create(as_tenant(B, conversation=conversation.id), {})
    with pytest.raises(NotFoundError, match=item_id):
        reference = [{"type": "item_reference", "id": item_id}]
        await service.create(as_tenant(B, input=reference), {})
    with pytest.raises(NotFoundError):
        await service.delete(first["id"], tenant=B)
    with pytest.raises(NotFoundError):
        await service.input_items(first["id"], tenant=B, after=None, limit=10, order="asc")
    assert await service.get(first["id"], tenant=A) == first
