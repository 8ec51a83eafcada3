"""Every gateway tool kind reports its calls on the one event bus (``core.observe.ToolEvents``),
through the tool loop: MCP against the real counter server, web search and file search over
hand-written backends. A failed call carries the kind of its failure."""

from __future__ import annotations

from typing import Any

from app.core.observe import COMPLETED, FAILED, STARTED, ToolCallEvent, ToolEvents
from app.core.service import ResponsesService
from app.core.tenancy import DEFAULT_TENANT
from app.core.tools import GatewayCall, ToolProvider
from app.errors import NotFoundError
from app.files.requests import SearchRequest
from app.protocol.json_types import JsonObject
from app.protocol.requests import ParsedRequest
from app.tools.file_search.provider import FileSearchToolProvider
from app.tools.mcp.errors import outcome_error_kind
from app.tools.mcp.executor import McpToolExecutor
from app.tools.mcp.provider import McpToolProvider
from app.tools.mcp.servers import McpPolicy
from app.tools.toolkit import GatewayToolKit
from app.tools.web_search.executor import WebSearchExecutor, WebSearchOptions
from app.tools.web_search.provider import WebSearchToolProvider
from app.tools.web_search.results import SearchError
from tests.fakes import MemoryResponseStore, ScriptedUpstream, function_call, message
from tests.helpers import local_policy
from tests.tools.file_search.test_provider import RecordingSearch
from tests.tools.web_search.fakes import FakeSearch


async def events_of(
    provider: ToolProvider, tools: list[JsonObject], calls: list[tuple[str, str]]
) -> list[tuple[str, str | None]]:
    """Run one round of ``calls`` (name, arguments); each call's outcome in call order:
    (``tool_call.completed`` or ``tool_call.failed``, the error kind)."""
    seen: list[ToolCallEvent] = []
    bus = ToolEvents([seen.append])
    script = [function_call(name, arguments) for name, arguments in calls]
    upstream = ScriptedUpstream([script, [message("done")]])
    toolkit = GatewayToolKit([provider])
    service = ResponsesService(upstream, MemoryResponseStore(), toolkit=toolkit, tool_events=bus)
    body: JsonObject = {"model": "m", "input": "go", "tools": tools}
    response = await service.create(ParsedRequest.from_body(body, tenant=DEFAULT_TENANT), {})
    await bus.aclose()
    item_ids = [item["id"] for item in response["output"] if item["type"] != "message"]
    item_ids = [i for i in item_ids if not str(i).startswith("mcpl")]  # the mcp_list_tools item
    assert len(item_ids) == len(calls)
    outcomes: list[tuple[str, str | None]] = []
    for item_id in item_ids:
        mine = [e for e in seen if e.item_id == item_id]
        assert len(mine) == 2 and mine[0].type == STARTED
        end = mine[1]
        assert end.response_id == response["id"] and end.round == 1
        assert end.duration_ms is not None and end.duration_ms >= 0
        assert (end.preview is not None) == (end.type == COMPLETED)
        assert (end.message is not None) == (end.type == FAILED)
        outcomes.append((end.type, end.error_kind))
    return outcomes


async def test_mcp_calls_against_a_real_server(counter_url: str) -> None:
    tool: JsonObject = {
        "type": "mcp",
        "server_label": "counter",
        "server_url": counter_url,
        "require_approval": "never",
    }
    outcomes = await events_of(
        McpToolProvider(policy=McpPolicy(egress=local_policy())),
        [tool],
        [
            ("mcp__counter__sum", '{"a": 1, "b": 2}'),
            ("mcp__counter__fail", '{"message": "no such customer"}'),
            ("mcp__counter__sum", '{"a": 1,'),
            ("mcp__counter__nosuch", "{}"),
        ],
    )
    assert outcomes == [
        (COMPLETED, None),
        (FAILED, "tool_error"),
        (FAILED, "invalid_arguments"),
        (FAILED, "unknown_tool"),
    ]


def test_mcp_error_objects_map_to_kinds() -> None:
    def kind(**error: Any) -> str:
        return outcome_error_kind(error)

    assert kind(type="http_error", code=503) == "http_status"
    assert kind(type="mcp_protocol_error", code=-32001) == "timeout"
    assert kind(type="mcp_protocol_error", code=-32000) == "network_error"
    assert kind(type="mcp_protocol_error", code=-32602) == "invalid_arguments"
    assert kind(type="mcp_protocol_error", code=-32603) == "protocol_error"
    assert kind(type="mcp_tool_execution_error", content=[]) == "tool_error"


async def test_web_search_calls() -> None:
    search = FakeSearch({"potato": [], "broken": SearchError("the backend said 500")})
    outcomes = await events_of(
        WebSearchToolProvider(search),
        [{"type": "web_search"}],
        [
            ("web_search", '{"query": "potato"}'),
            ("web_search", '{"query": "broken"}'),
            ("web_search", '{"query": ""}'),
        ],
    )
    assert outcomes == [(COMPLETED, None), (FAILED, "search_failed"), (FAILED, "invalid_arguments")]


class GoneSearch(RecordingSearch):
    """A vector store search whose store is deleted under the query ``gone``."""

    async def search(
        self, vector_store_id: str, request: SearchRequest, *, tenant: str
    ) -> JsonObject:
        if request.query == "gone":
            raise NotFoundError("the vector store was deleted")
        return await super().search(vector_store_id, request, tenant=tenant)


async def test_file_search_calls() -> None:
    outcomes = await events_of(
        FileSearchToolProvider(GoneSearch()),
        [{"type": "file_search", "vector_store_ids": ["vs_docs"]}],
        [
            ("file_search", '{"queries": ["rust"]}'),
            ("file_search", '{"queries": ["gone"]}'),
            ("file_search", '{"queries": 3}'),
        ],
    )
    assert outcomes == [(COMPLETED, None), (FAILED, "search_failed"), (FAILED, "invalid_arguments")]


def test_calls_that_were_never_run_are_not_run() -> None:
    call = GatewayCall(item_id="x_1", call_id="c", name="n", arguments="{}", output_index=0)
    executors: list[Any] = [
        McpToolExecutor(None, "counter", "sum"),
        WebSearchExecutor(None, WebSearchOptions()),
        FileSearchToolProvider(None).unknown_executor("file_search"),
    ]
    for executor in executors:
        assert executor.error_result(call, "stopped", status="incomplete").error_kind == "not_run"
        assert executor.error_result(call, "broke", status="failed").error_kind == "error"
