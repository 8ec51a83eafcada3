"""Hosted tools the gateway cannot run: ``drop`` (the default), ``reject`` and ``forward``,
through the real tool registry and the real loop (``ResponsesService``) with a scripted upstream."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import pytest

from app.core.loop import LoopLimits
from app.core.service import ResponsesService
from app.core.tenancy import DEFAULT_TENANT
from app.errors import InvalidRequestError
from app.main import build_upstream, hosted_tools
from app.protocol.json_types import JsonObject
from app.protocol.requests import ParsedRequest
from app.settings import Settings, load_settings
from app.tools.hosted import HostedToolPolicy, HostedTools, is_hosted
from app.tools.mcp.provider import McpToolProvider
from app.tools.toolkit import GatewayToolKit
from app.tools.web_search.provider import WebSearchToolProvider
from tests.fakes import MemoryResponseStore, ScriptedUpstream, message
from tests.tools.web_search.fakes import FakeSearch

EXEC = {"type": "function", "name": "exec_command", "parameters": {"type": "object"}}
NAMESPACE = {
    "type": "namespace",
    "name": "multi_agent_v1",
    "description": "agents",
    "tools": [{"type": "function", "name": "spawn_agent", "parameters": {"type": "object"}}],
}
CUSTOM = {
    "type": "custom",
    "name": "apply_patch",
    "format": {"type": "grammar", "syntax": "lark", "definition": "start: /.+/"},
}
CLIENT_SEARCH = {"type": "tool_search", "execution": "client", "parameters": {"type": "object"}}
WEB_SEARCH = {"type": "web_search", "external_web_access": True}
CODE = {"type": "code_interpreter", "container": {"type": "auto"}}
# What Codex sends (0.169.0, a newer model): its own tools and a hosted web search.
CODEX_TOOLS = [EXEC, NAMESPACE, CUSTOM, CLIENT_SEARCH, WEB_SEARCH]


def toolkit(policy: HostedToolPolicy = "drop", search: Any = None) -> GatewayToolKit:
    providers = [McpToolProvider(), WebSearchToolProvider(search)]
    return GatewayToolKit(providers, hosted=HostedTools(policy))


def service(
    rounds: list[list[JsonObject]], kit: GatewayToolKit
) -> tuple[ResponsesService, ScriptedUpstream]:
    upstream = ScriptedUpstream(rounds)
    return ResponsesService(upstream, MemoryResponseStore(), toolkit=kit, limits=LoopLimits()), (
        upstream
    )


def request(tools: list[JsonObject], **extra: Any) -> JsonObject:
    return {"model": "m", "input": "hi", "tools": tools, **extra}


# ----------------------------------------------------------------------------- which are hosted


@pytest.mark.parametrize(
    ("tool", "hosted"),
    [
        ({"type": "web_search"}, True),
        ({"type": "web_search_preview_2025_03_11"}, True),
        ({"type": "file_search"}, True),
        ({"type": "code_interpreter"}, True),
        ({"type": "image_generation"}, True),
        ({"type": "mcp"}, True),
        ({"type": "tool_search"}, True),
        ({"type": "tool_search", "execution": "server"}, True),
        ({"type": "tool_search", "execution": "client"}, False),
        ({"type": "function", "name": "f"}, False),
        ({"type": "custom", "name": "f"}, False),
        ({"type": "namespace", "name": "n"}, False),
        ({"type": "local_shell"}, False),
        ({"type": "shell"}, False),
        ({"type": "apply_patch"}, False),
        ({"type": "computer_use_preview"}, False),
        ({"type": "a_type_from_the_future"}, False),
    ],
)
def test_hosted_types_are_the_ones_openai_runs(tool: JsonObject, hosted: bool) -> None:
    assert is_hosted(tool) is hosted


# ----------------------------------------------------------------------------- drop


async def test_drop_leaves_the_hosted_tools_out_and_keeps_the_clients() -> None:
    kit = toolkit()
    body = request([*CODEX_TOOLS, CODE])
    assert kit.involves_gateway(body, [])
    prepared = await kit.prepare(body, [], [])
    assert prepared.upstream_tools == [EXEC, NAMESPACE, CUSTOM, CLIENT_SEARCH]
    assert dict(prepared.executors) == {}


async def test_drop_warns_once_per_tool_type(caplog: pytest.LogCaptureFixture) -> None:
    kit = toolkit()
    with caplog.at_level(logging.WARNING, logger="app.tools.hosted"):
        for _ in range(3):
            await kit.prepare(request([WEB_SEARCH, CODE, {"type": "web_search"}]), [], [])
    warnings = [r.getMessage() for r in caplog.records]
    assert len(warnings) == 2, warnings
    assert "web_search" in warnings[0] and "web_search_provider" in warnings[0]
    assert "code_interpreter" in warnings[1]
    assert all("hosted_tools" in w and "RESPGATE_HOSTED_TOOLS" in w for w in warnings)


async def test_a_dropped_request_completes_without_the_tool_and_its_include() -> None:
    kit = toolkit()
    svc, upstream = service([[message("hello")]], kit)
    body = request(
        [EXEC, WEB_SEARCH, CODE],
        include=[
            "reasoning.encrypted_content",
            "web_search_call.action.sources",
            "code_interpreter_call.outputs",
        ],
    )
    final = await svc.create(ParsedRequest.from_body(body, tenant=DEFAULT_TENANT), {})
    assert final["status"] == "completed"
    assert final["output"][0]["content"][0]["text"] == "hello"
    [sent] = upstream.requests
    assert sent["tools"] == [EXEC]
    assert sent["include"] == ["reasoning.encrypted_content"]
    # The response echoes the request's tools, as OpenAI's does.
    assert [t["type"] for t in final["tools"]] == ["function", "web_search", "code_interpreter"]


async def test_when_every_tool_is_dropped_the_upstream_gets_no_tools() -> None:
    svc, upstream = service([[message("hello")]], toolkit())
    await svc.create(
        ParsedRequest.from_body(request([WEB_SEARCH], tool_choice="auto"), tenant=DEFAULT_TENANT),
        {},
    )
    [sent] = upstream.requests
    assert "tools" not in sent and "tool_choice" not in sent


async def test_required_with_every_tool_dropped_is_a_400() -> None:
    svc, upstream = service([], toolkit())
    with pytest.raises(InvalidRequestError) as raised:
        await svc.create(
            ParsedRequest.from_body(
                request([WEB_SEARCH, CODE], tool_choice="required"), tenant=DEFAULT_TENANT
            ),
            {},
        )
    assert raised.value.param == "tool_choice"
    assert "code_interpreter, web_search" in raised.value.message
    assert upstream.requests == []


async def test_required_with_a_tool_left_is_sent_on() -> None:
    svc, upstream = service([[message("hello")]], toolkit())
    await svc.create(
        ParsedRequest.from_body(
            request([EXEC, WEB_SEARCH], tool_choice="required"), tenant=DEFAULT_TENANT
        ),
        {},
    )
    assert upstream.requests[0]["tool_choice"] == "required"


@pytest.mark.parametrize(
    "choice",
    [
        {"type": "web_search_preview"},
        {"type": "web_search"},
        {"type": "web_search_preview_2025_03_11"},
        {"type": "code_interpreter"},
    ],
)
async def test_a_tool_choice_naming_a_dropped_tool_is_a_400(choice: JsonObject) -> None:
    svc, upstream = service([], toolkit())
    with pytest.raises(InvalidRequestError) as raised:
        await svc.create(
            ParsedRequest.from_body(
                request([EXEC, WEB_SEARCH, CODE], tool_choice=choice), tenant=DEFAULT_TENANT
            ),
            {},
        )
    assert raised.value.param == "tool_choice"
    assert choice["type"] in raised.value.message
    assert upstream.requests == []


async def test_allowed_tools_naming_a_dropped_tool_keeps_the_others() -> None:
    svc, upstream = service([[message("hello")]], toolkit())
    choice = {
        "type": "allowed_tools",
        "mode": "auto",
        "tools": [{"type": "web_search"}, {"type": "function", "name": "exec_command"}],
    }
    other = {"type": "function", "name": "other", "parameters": {"type": "object"}}
    await svc.create(
        ParsedRequest.from_body(
            request([EXEC, other, WEB_SEARCH], tool_choice=choice), tenant=DEFAULT_TENANT
        ),
        {},
    )
    [sent] = upstream.requests
    assert sent["tools"] == [EXEC] and sent["tool_choice"] == "auto"


# ----------------------------------------------------------------------------- reject


async def test_reject_is_a_400_naming_the_tool() -> None:
    kit = toolkit("reject")
    for tools, index, text in [
        ([EXEC, NAMESPACE, WEB_SEARCH], 2, "Web search is not configured on this gateway"),
        ([EXEC, CODE], 1, "This gateway does not run the code_interpreter tool."),
        ([{"type": "tool_search"}], 0, "tool_search"),
    ]:
        with pytest.raises(InvalidRequestError) as raised:
            await kit.prepare(request(tools), [], [])
        assert raised.value.param == f"tools[{index}]"
        assert raised.value.status_code == 400
        assert text in raised.value.message
        assert 'hosted_tools = "drop"' in raised.value.message


async def test_reject_leaves_client_tools_alone() -> None:
    kit = toolkit("reject")
    body = request([EXEC, NAMESPACE, CUSTOM, CLIENT_SEARCH])
    assert not kit.involves_gateway(body, [])
    prepared = await kit.prepare(body, [], [])
    assert prepared.upstream_tools == [EXEC, NAMESPACE, CUSTOM, CLIENT_SEARCH]


# ----------------------------------------------------------------------------- forward


async def test_forward_sends_the_hosted_tools_unchanged() -> None:
    kit = toolkit("forward")
    body = request([*CODEX_TOOLS, CODE], include=["web_search_call.action.sources"])
    # Nothing for the gateway to do: the request takes the plain path, untouched.
    assert not kit.involves_gateway(body, [])
    prepared = await kit.prepare(body, [], [])
    assert prepared.upstream_tools == [*CODEX_TOOLS, CODE]
    assert prepared.upstream_include is None


async def test_forward_keeps_a_tool_choice_naming_a_forwarded_tool() -> None:
    svc, upstream = service([[message("hello")]], toolkit("forward"))
    choice = {"type": "web_search_preview"}
    await svc.create(
        ParsedRequest.from_body(
            request([EXEC, WEB_SEARCH], tool_choice=choice), tenant=DEFAULT_TENANT
        ),
        {},
    )
    [sent] = upstream.requests
    assert sent["tools"] == [EXEC, WEB_SEARCH] and sent["tool_choice"] == choice


@pytest.mark.parametrize("policy", ["drop", "reject", "forward"])
async def test_a_web_search_the_gateway_runs_is_never_subject_to_the_policy(
    policy: HostedToolPolicy,
) -> None:
    prepared = await toolkit(policy, search=FakeSearch()).prepare(
        request([EXEC, WEB_SEARCH]), [], []
    )
    assert [t["type"] for t in prepared.upstream_tools] == ["function", "function"]
    assert [t["name"] for t in prepared.upstream_tools] == ["exec_command", "web_search"]


# ----------------------------------------------------------------------------- settings


def test_the_setting_defaults_to_drop_and_reads_env_and_toml(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert Settings().hosted_tools == "drop"
    config = tmp_path / "respgate.toml"
    config.write_text('hosted_tools = "forward"\n')
    assert load_settings(config).hosted_tools == "forward"
    monkeypatch.setenv("RESPGATE_HOSTED_TOOLS", "reject")
    assert load_settings(config).hosted_tools == "reject"
    monkeypatch.setenv("RESPGATE_HOSTED_TOOLS", "ignore")
    with pytest.raises(ValueError, match="hosted_tools"):
        load_settings()


async def test_an_upstream_can_override_the_policy() -> None:
    settings = Settings(
        hosted_tools="drop",
        upstreams=[
            {"name": "vllm", "url": "http://127.0.0.1:1", "models": ["qwen*"], "default": True},
            {"name": "openai", "url": "http://127.0.0.1:2", "models": ["gpt-*"]}
            | {"hosted_tools": "forward"},
        ],
    )
    router = build_upstream(settings)
    try:
        hosted = hosted_tools(settings, router)
        assert hosted.policy({"model": "gpt-5.5"}) == "forward"
        assert hosted.policy({"model": "qwen3"}) == "drop"
        assert hosted.policy({}) == "drop"
        assert hosted_tools(settings, None).policy({"model": "gpt-5.5"}) == "drop"
    finally:
        await router.aclose()
