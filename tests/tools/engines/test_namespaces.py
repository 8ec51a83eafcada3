"""Configured namespaces as ``mcp`` tools (``tools.mcp.namespaces``): the operator's terms are
a ceiling, a round's calls are one engine batch of the request's session, a dry run
simulates, and approvals run through the engine."""

from __future__ import annotations

import orjson

from app.core.engines import Namespace, ToolSpec
from app.core.tool_sessions import ToolSessions
from app.core.tools import GatewayCall, ToolContext
from app.tools.engines.multi import MultiEngine, Route
from app.tools.mcp.provider import McpToolProvider
from app.tools.toolkit import GatewayToolKit
from tests.tools.engines.recording_engine import RecordingEngine

LONG = "a_tool_with_a_name_long_enough_to_need_shortening_in_the_upstream_name"


class StaticTools:
    def __init__(self, namespace: str, names: list[str]) -> None:
        self.specs = [ToolSpec(namespace, name, f"does {name}") for name in names]

    async def list_tools(self) -> list[ToolSpec]:
        return self.specs


def kit(**terms: object) -> tuple[GatewayToolKit, RecordingEngine]:
    engine = RecordingEngine("api")
    namespace = Namespace(
        "crm",
        "api",
        StaticTools("crm", ["read", "write", "delete", LONG]),
        **terms,  # type: ignore[arg-type]
    )
    sessions = ToolSessions(MultiEngine({"crm": Route("api", engine)}))
    provider = McpToolProvider(namespaces={"crm": namespace}, sessions=sessions)
    return GatewayToolKit([provider]), engine


def tool(**fields: object) -> dict[str, object]:
    return {"tools": [{"type": "mcp", "server_label": "crm", **fields}]}


async def test_a_request_narrows_allowed_tools_and_cannot_widen_them() -> None:
    toolkit, _ = kit(allowed_tools=("read", "write"))
    prepared = await toolkit.prepare(tool(), [], [])
    assert sorted(prepared.executors) == ["mcp__crm__read", "mcp__crm__write"]
    prepared = await toolkit.prepare(tool(allowed_tools=["write", "delete"]), [], [])
    assert sorted(prepared.executors) == ["mcp__crm__write"]
    listing = prepared.prelude[0].item
    assert [t["name"] for t in listing["tools"]] == ["write"]


async def test_a_request_may_ask_for_more_approvals_never_fewer() -> None:
    call = GatewayCall("mcp_1", "c1", "mcp__crm__read", "{}", 0)
    relaxed, _ = kit(require_approval="never")
    prepared = await relaxed.prepare(tool(require_approval="always"), [], [])
    assert prepared.executors["mcp__crm__read"].approval_item(call) is not None
    strict, _ = kit(require_approval="always")
    prepared = await strict.prepare(tool(require_approval="never"), [], [])
    assert prepared.executors["mcp__crm__read"].approval_item(call) is not None
    prepared = await relaxed.prepare(tool(), [], [])
    assert prepared.executors["mcp__crm__read"].approval_item(call) is None


async def test_upstream_names_are_safe_and_map_back() -> None:
    toolkit, engine = kit()
    prepared = await toolkit.prepare(tool(), [], [], ToolContext("conv_1", "resp_1"))
    long_name = next(name for name in prepared.executors if LONG[:20] in name)
    assert len(long_name) <= 64 and long_name.startswith("mcp__crm__")
    executor = prepared.executors[long_name]
    result = await executor.run(GatewayCall("mcp_1", "c1", long_name, '{"x": 1}', 0), timeout=5)
    assert orjson.loads(result.model_output)["tool"] == f"crm::{LONG}"
    assert engine.batches[0].session_id == "conv_1"


async def test_a_dry_run_simulates_and_a_round_is_one_batch() -> None:
    toolkit, engine = kit()
    prepared = await toolkit.prepare(tool(), [], [], ToolContext("s", "r", simulate=True))
    read, write = prepared.executors["mcp__crm__read"], prepared.executors["mcp__crm__write"]
    batch = read.batch  # type: ignore[attr-defined]
    assert write.batch is batch  # type: ignore[attr-defined]
    calls = [
        GatewayCall("mcp_1", "c1", "mcp__crm__read", "{}", 0),
        GatewayCall("mcp_2", "c2", "mcp__crm__write", '{"v": 2}', 1),
    ]
    results = await batch.run_batch(calls, timeout=5)
    assert [orjson.loads(r.model_output)["mode"] for r in results] == ["simulate", "simulate"]
    assert [r.item["server_label"] for r in results] == ["crm", "crm"]
    assert [[c.call_id for c in b.calls] for b in engine.batches] == [["c1", "c2"]]


async def test_an_approved_call_runs_through_the_engine() -> None:
    toolkit, engine = kit(require_approval="always")
    history = [
        {
            "id": "mcpr_1",
            "type": "mcp_approval_request",
            "server_label": "crm",
            "name": "delete",
            "arguments": '{"id": 7}',
        }
    ]
    approval = {"type": "mcp_approval_response", "approval_request_id": "mcpr_1", "approve": True}
    prepared = await toolkit.prepare(tool(), history, [approval], ToolContext("s", "r"))
    ((call, executor),) = prepared.approved
    result = await executor.run(call, timeout=5)
    assert result.ok and orjson.loads(result.model_output)["arguments"] == {"id": 7}
    assert result.item["approval_request_id"] == "mcpr_1"
    assert engine.batches[0].calls[0].tool.qualified_name == "crm::delete"


async def test_tool_choice_names_a_namespace_or_one_of_its_tools() -> None:
    toolkit, _ = kit()
    one = {**tool(), "tool_choice": {"type": "mcp", "server_label": "crm", "name": "read"}}
    prepared = await toolkit.prepare(one, [], [])
    assert prepared.tool_choice == {"type": "function", "name": "mcp__crm__read"}
    whole = {**tool(), "tool_choice": {"type": "mcp", "server_label": "crm"}}
    prepared = await toolkit.prepare(whole, [], [])
    assert prepared.tool_choice == "required"
    assert len(prepared.upstream_tools) == 4
