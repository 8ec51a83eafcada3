"""The gateway's toolkit and the MCP provider against the real counter server."""

from __future__ import annotations

import json
from typing import Any

import pytest

from app.core.engines import Namespace
from app.core.tool_sessions import ToolSessions
from app.core.tools import GatewayCall, PreparedTools
from app.errors import InvalidRequestError
from app.net.egress import EgressPolicy
from app.protocol.json_types import JsonObject
from app.tools.engines.multi import MultiEngine, Route
from app.tools.file_search.provider import FileSearchToolProvider
from app.tools.mcp.engine import McpEngine, McpToolSet
from app.tools.mcp.lowering import lower_mcp_items
from app.tools.mcp.outcomes import McpToolInfo
from app.tools.mcp.pool import McpSessionPool
from app.tools.mcp.provider import McpToolProvider
from app.tools.mcp.servers import McpPolicy, approval_required
from app.tools.mcp.spec import McpServerSpec
from app.tools.toolkit import MAX_NAME_LENGTH, GatewayToolKit, NameTable
from app.tools.web_search.provider import WebSearchToolProvider
from tests.helpers import free_port, local_policy
from tests.mcp_servers.counter import stdio_command

# The counter server runs on 127.0.0.1: the egress policy's loopback allow-list reaches it.
LOCAL = McpPolicy(egress=local_policy())


def mcp_tool(url: str, **extra: Any) -> JsonObject:
    return {
        "type": "mcp",
        "server_label": "counter",
        "server_url": url,
        "require_approval": "never",
        **extra,
    }


async def prepare(body: JsonObject, history: list[JsonObject] | None = None) -> PreparedTools:
    kit = GatewayToolKit([McpToolProvider(policy=LOCAL)])
    prepared = await kit.prepare(body, history or [], [])
    await prepared.aclose()
    return prepared


def names(prepared: PreparedTools) -> list[str]:
    return [t["name"] for t in prepared.upstream_tools if t.get("type") == "function"]


# ----------------------------------------------------------------------------- names


def test_names_are_safe_unique_and_bounded() -> None:
    table = NameTable(reserved=["mcp__a_b__c"])
    first = table.name("mcp", "a.b", "c")  # cleans to the reserved client name
    assert first != "mcp__a_b__c" and first.startswith("mcp__a_b__c_")
    assert table.name("mcp", "a.b", "c") == first  # stable
    assert table.name("mcp", "a b", "c") not in (first, "mcp__a_b__c")
    long = table.name("mcp", "server", "t" * 100)
    assert len(long) <= MAX_NAME_LENGTH
    assert long != table.name("mcp", "server", "t" * 99)
    assert table.name("mcp", "counter", "sum") == "mcp__counter__sum"


# ----------------------------------------------------------------------------- prepare


async def test_listed_tools_become_function_tools_with_verbatim_schemas(counter_url: str) -> None:
    body = {"tools": [mcp_tool(counter_url), {"type": "function", "name": "get_weather"}]}
    prepared = await prepare(body)
    by_name = {t["name"]: t for t in prepared.upstream_tools}
    assert by_name["get_weather"] == {"type": "function", "name": "get_weather"}
    describe = by_name["mcp__counter__describe"]["parameters"]
    assert "$defs" in describe and "$ref" in json.dumps(describe)
    assert by_name["mcp__counter__total"]["parameters"]["properties"]["items"]["items"] == {
        "type": "integer"
    }
    assert by_name["mcp__counter__say_hello"]["parameters"]["properties"] == {}
    [prelude] = prepared.prelude
    assert prelude.item["type"] == "mcp_list_tools"
    listed = {t["name"]: t for t in prelude.item["tools"]}
    assert listed["describe"]["input_schema"] == describe
    assert prelude.events[-1] == "response.mcp_list_tools.completed"
    assert "mcp__counter__sum" in prepared.executors


async def test_allowed_tools_filters_the_listing_and_the_upstream_tools(counter_url: str) -> None:
    prepared = await prepare({"tools": [mcp_tool(counter_url, allowed_tools=["sum", "echo"])]})
    assert names(prepared) == ["mcp__counter__sum", "mcp__counter__echo"]
    assert [t["name"] for t in prepared.prelude[0].item["tools"]] == ["sum", "echo"]
    filtered = await prepare(
        {"tools": [mcp_tool(counter_url, allowed_tools={"tool_names": ["echo"]})]}
    )
    assert names(filtered) == ["mcp__counter__echo"]


@pytest.mark.parametrize(
    ("choice", "expected_choice", "offered"),
    [
        ("auto", "auto", None),
        ("required", "required", None),
        ("none", "none", None),
        (
            {"type": "mcp", "server_label": "counter", "name": "sum"},
            {"type": "function", "name": "mcp__counter__sum"},
            None,
        ),
        (
            {"type": "mcp", "server_label": "counter"},
            "required",
            ["mcp__counter__sum", "mcp__counter__echo"],
        ),
        ({"type": "function", "name": "f"}, {"type": "function", "name": "f"}, None),
        (
            {
                "type": "allowed_tools",
                "mode": "required",
                "tools": [
                    {"type": "mcp", "server_label": "counter", "name": "echo"},
                    {"type": "function", "name": "f"},
                ],
            },
            "required",
            ["f", "mcp__counter__echo"],
        ),
    ],
)
async def test_tool_choice_is_translated_and_allowed_tools_is_enforced(
    counter_url: str, choice: Any, expected_choice: Any, offered: list[str] | None
) -> None:
    body = {
        "tools": [
            {"type": "function", "name": "f"},
            mcp_tool(counter_url, allowed_tools=["sum", "echo"]),
        ],
        "tool_choice": choice,
    }
    prepared = await prepare(body)
    assert prepared.tool_choice == expected_choice
    assert names(prepared) == (offered or ["f", "mcp__counter__sum", "mcp__counter__echo"])


async def test_tool_choice_of_an_unknown_mcp_tool_is_a_400(counter_url: str) -> None:
    body = {
        "tools": [mcp_tool(counter_url)],
        "tool_choice": {"type": "mcp", "server_label": "counter", "name": "nope"},
    }
    with pytest.raises(InvalidRequestError) as info:
        await prepare(body)
    assert info.value.param == "tool_choice"


async def test_an_invented_name_in_the_mcp_namespace_answers_with_an_error(
    counter_url: str,
) -> None:
    kit = GatewayToolKit([McpToolProvider(policy=LOCAL)])
    prepared = await kit.prepare({"tools": [mcp_tool(counter_url, allowed_tools=["sum"])]}, [], [])
    try:
        assert "mcp__counter__echo" in prepared.executors  # served, but not allowed
        executor = prepared.executors["mcp__counter__echo"]
        call = GatewayCall("mcp_1", "call_1", "mcp__counter__echo", '{"message":"x"}', 0)
        result = await executor.run(call, timeout=5)
        assert not result.ok and result.item["status"] == "failed"
        assert "not available" in result.model_output
        assert "get_weather" not in prepared.executors
    finally:
        await prepared.aclose()


async def test_an_unreachable_server_gives_a_failed_listing_not_a_failed_request() -> None:
    url = f"http://127.0.0.1:{free_port()}/mcp"
    prepared = await prepare({"tools": [mcp_tool(url)]})
    [prelude] = prepared.prelude
    assert prelude.events == (
        "response.mcp_list_tools.in_progress",
        "response.mcp_list_tools.failed",
    )
    assert prelude.item["error"].startswith("Error retrieving tool list from MCP server")
    assert prepared.upstream_tools == []


async def test_a_continuation_reuses_the_listing_in_its_history(counter_url: str) -> None:
    first = await prepare({"tools": [mcp_tool(counter_url, allowed_tools=["sum"])]})
    history = [first.prelude[0].item]
    again = await prepare({"tools": [mcp_tool(counter_url, allowed_tools=["sum"])]}, history)
    assert again.prelude == [] and names(again) == ["mcp__counter__sum"]
    wider = await prepare(
        {"tools": [mcp_tool(counter_url, allowed_tools=["sum", "echo"])]}, history
    )
    assert len(wider.prelude) == 1  # other allowed tools: listed again


@pytest.mark.parametrize(
    ("url", "policy"),
    [
        ("http://169.254.169.254/mcp", LOCAL),
        ("http://[fe80::1]/mcp", LOCAL),
        ("http://metadata.google.internal/mcp", LOCAL),
        ("http://127.0.0.1:1/mcp", McpPolicy()),
        ("http://10.1.2.3:5432/mcp", McpPolicy()),
    ],
)
async def test_refused_server_urls_fail_like_unreachable_ones(url: str, policy: McpPolicy) -> None:
    """Where a server_url leads is the egress policy's call when connecting: a refused one
    fails its listing with the message of a server that cannot be reached, no 400 that would
    tell an address the policy refuses from a port that is closed."""
    kit = GatewayToolKit([McpToolProvider(policy=policy)])
    prepared = await kit.prepare({"tools": [mcp_tool(url)]}, [], [])
    await prepared.aclose()
    [prelude] = prepared.prelude
    assert prelude.item["error"] == (
        "Error retrieving tool list from MCP server: cannot connect to MCP server counter"
    )
    assert prepared.upstream_tools == []


@pytest.mark.parametrize(
    "url", ["file:///etc/passwd", "ftp://example.com/mcp", "http:///mcp", "http://a:99999/"]
)
async def test_server_urls_that_are_no_http_urls_are_400s(url: str) -> None:
    kit = GatewayToolKit([McpToolProvider(policy=LOCAL)])
    with pytest.raises(InvalidRequestError) as info:
        await kit.prepare({"tools": [mcp_tool(url)]}, [], [])
    assert info.value.param == "tools[0].server_url"


async def test_missing_label_or_url_and_duplicate_labels_are_400s(counter_url: str) -> None:
    kit = GatewayToolKit([McpToolProvider(policy=LOCAL)])
    for tools, param in [
        ([{"type": "mcp", "server_url": counter_url}], "tools[0].server_label"),
        ([{"type": "mcp", "server_label": "elsewhere"}], "tools[0].server_url"),
        ([mcp_tool(counter_url), mcp_tool(counter_url)], "tools[1].server_label"),
    ]:
        with pytest.raises(InvalidRequestError) as info:
            await kit.prepare({"tools": tools}, [], [])
        assert info.value.param == param


async def test_configured_servers_are_used_by_label_over_http_and_stdio(counter_url: str) -> None:
    argv, env = stdio_command()
    specs = {
        "docs": McpServerSpec(label="docs", url=counter_url),
        "local": McpServerSpec(label="local", transport="stdio", command=argv, env=env),
    }
    # The operator's servers: trusted for their own host:port under the default policy.
    pool = McpSessionPool(specs, connect_timeout=20, egress=EgressPolicy())
    namespaces = {
        label: Namespace(
            label,
            "mcp",
            McpToolSet(pool, label, label, list_timeout=20),
            allowed_tools=(tool,),
        )
        for label, tool in (("docs", "sum"), ("local", "echo"))
    }
    engine = MultiEngine({label: Route("mcp", McpEngine(pool)) for label in namespaces})
    provider = McpToolProvider(namespaces=namespaces, sessions=ToolSessions(engine))
    kit = GatewayToolKit([provider])
    try:
        body = {
            "tools": [
                {"type": "mcp", "server_label": "docs"},
                {"type": "mcp", "server_label": "local"},
            ]
        }
        prepared = await kit.prepare(body, [], [])
        assert names(prepared) == ["mcp__docs__sum", "mcp__local__echo"]
        call = GatewayCall("mcp_1", "c1", "mcp__local__echo", '{"message": "via stdio"}', 0)
        executor = prepared.executors["mcp__local__echo"]
        assert executor.approval_item(call) is None  # operator-configured default: never
        result = await executor.run(call, timeout=10)
        assert result.ok and result.model_output == "via stdio"
        await prepared.aclose()
        # The pool keeps the sessions for the next request.
        again = await kit.prepare(body, [], [])
        result = await again.executors["mcp__docs__sum"].run(
            GatewayCall("mcp_2", "c2", "mcp__docs__sum", '{"a": 1, "b": 2}', 0), timeout=10
        )
        assert result.model_output == "3"
        await again.aclose()
    finally:
        await pool.aclose()


async def test_headers_and_authorization_reach_the_server(counter_url: str) -> None:
    tool = mcp_tool(counter_url, headers={"X-Test": "abc"}, authorization="tok123")
    kit = GatewayToolKit([McpToolProvider(policy=LOCAL)])
    prepared = await kit.prepare({"tools": [tool]}, [], [])
    try:
        call = GatewayCall("mcp_1", "c1", "mcp__counter__whoami", "", 0)
        result = await prepared.executors["mcp__counter__whoami"].run(call, timeout=10)
        seen = json.loads(result.model_output)
        assert seen["authorization"] == "Bearer tok123"
        assert seen["x-test"] == "abc"
    finally:
        await prepared.aclose()


# ----------------------------------------------------------------------------- approvals


@pytest.mark.parametrize(
    ("policy", "tool", "read_only", "expected"),
    [
        (None, "sum", False, True),
        ("always", "sum", False, True),
        ("never", "sum", False, False),
        ({"never": {"tool_names": ["sum"]}}, "sum", False, False),
        ({"never": {"tool_names": ["sum"]}}, "echo", False, True),
        ({"always": {"tool_names": ["echo"]}, "never": {"read_only": True}}, "sum", True, False),
        ({"always": {"tool_names": ["echo"]}, "never": {"read_only": True}}, "echo", False, True),
    ],
)
def test_require_approval_forms(policy: Any, tool: str, read_only: bool, expected: bool) -> None:
    info = McpToolInfo(tool, None, {"type": "object"}, {"readOnlyHint": read_only})
    assert approval_required(policy, tool, info) is expected


def test_lowering_turns_mcp_items_into_calls_and_outputs() -> None:
    request = {
        "type": "mcp_approval_request",
        "id": "mcpr_1",
        "server_label": "counter",
        "name": "sum",
        "arguments": '{"a":1,"b":2}',
    }
    declined_request = {**request, "id": "mcpr_2", "name": "echo", "arguments": "{}"}
    items = [
        {"type": "message", "role": "user", "content": "hi"},
        {"type": "mcp_list_tools", "id": "mcpl_1", "server_label": "counter", "tools": []},
        {
            "type": "mcp_call",
            "id": "mcp_a",
            "server_label": "counter",
            "name": "fail",
            "arguments": "{}",
            "output": None,
            "error": {
                "type": "mcp_tool_execution_error",
                "content": [{"type": "text", "text": "x"}],
            },
        },
        request,
        declined_request,
        {"type": "mcp_approval_response", "approval_request_id": "mcpr_1", "approve": True},
        {
            "type": "mcp_approval_response",
            "approval_request_id": "mcpr_2",
            "approve": False,
            "reason": "no echo today",
        },
        {
            "type": "mcp_call",
            "id": "mcp_b",
            "server_label": "counter",
            "name": "sum",
            "arguments": '{"a":1,"b":2}',
            "approval_request_id": "mcpr_1",
            "output": "3",
        },
    ]
    lowered = lower_mcp_items(items, NameTable())
    assert [(i["type"], i.get("call_id")) for i in lowered] == [
        ("message", None),
        ("function_call", "mcp_a"),
        ("function_call_output", "mcp_a"),
        ("function_call", "mcpr_1"),
        ("function_call", "mcpr_2"),
        ("function_call_output", "mcpr_2"),
        ("function_call_output", "mcpr_1"),
    ]
    assert lowered[2]["output"] == "Error: x"
    assert lowered[3]["name"] == "mcp__counter__sum"
    assert lowered[5]["output"] == "The user declined this tool call. Reason: no echo today"
    assert lowered[6]["output"] == "3"


async def test_server_description_reaches_the_model(counter_url: str) -> None:
    tool = mcp_tool(counter_url, allowed_tools=["sum"], server_description="Arithmetic helpers")
    prepared = await prepare({"tools": [tool]})
    [function] = prepared.upstream_tools
    assert function["description"].startswith("Calculate the sum of two numbers")
    assert "Arithmetic helpers" in function["description"]


# ----------------------------------------------------------------------------- declarations


def test_the_kit_answers_from_its_providers_declarations() -> None:
    kit = GatewayToolKit(
        [McpToolProvider(), WebSearchToolProvider(None), FileSearchToolProvider(None)]
    )
    assert {kind.type: kind.id_prefix for kind in kit.item_kinds} == {
        "mcp_call": "mcp",
        "mcp_list_tools": "mcpl",
        "mcp_approval_request": "mcpr",
        "mcp_approval_response": None,
        "web_search_call": "ws",
        "file_search_call": "fs",
    }
    assert kit.include_values == {
        "web_search_call.action.sources",
        "web_search_call.results",
        "file_search_call.results",
    }
    assert kit.secret_fields("mcp") == {"headers", "authorization"}
    assert kit.secret_fields("web_search_preview") == kit.secret_fields("function") == frozenset()
