"""The tool loop through ResponsesService, with a scripted upstream and hand-written tools."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable, Mapping
from typing import Any

import pytest

from app.core.loop import LoopLimits
from app.core.observe import ToolCallEvent, ToolEvents
from app.core.service import ResponsesService
from app.core.tenancy import DEFAULT_TENANT
from app.core.tools import GatewayCall, PreparedTools, ToolContext, ToolExecutor, ToolResult
from app.errors import UpstreamTimeoutError, UpstreamUnreachableError
from app.protocol.json_types import JsonObject
from app.protocol.requests import ParsedRequest
from app.tools.mcp.executor import PRESENTATION
from app.tools.mcp.lowering import lower_mcp_items
from app.tools.toolkit import NameTable
from tests.fakes import MemoryResponseStore, ScriptedUpstream, function_call, message
from tests.lifecycle import assert_lifecycle


class FakeTool:
    """A gateway tool presented as an ``mcp_call`` on server ``fake``."""

    presentation = PRESENTATION

    def __init__(self, tool: str, answer: Callable[[JsonObject], Any]) -> None:
        self.tool = tool
        self.answer = answer
        self.running = 0
        self.max_running = 0

    def _item(self, call: GatewayCall, **fields: Any) -> JsonObject:
        base = {
            "id": call.item_id or f"mcp_{call.call_id}",
            "type": "mcp_call",
            "server_label": "fake",
            "name": self.tool,
            "arguments": call.arguments,
            "approval_request_id": call.approval_request_id,
            "output": None,
            "error": None,
            "status": "in_progress",
        }
        return base | fields

    def open_item(self, call: GatewayCall) -> JsonObject:
        return self._item(call, arguments="")

    def approval_item(self, call: GatewayCall) -> JsonObject | None:
        return None

    async def run(self, call: GatewayCall, *, timeout: float) -> ToolResult:  # noqa: ASYNC109
        self.running += 1
        self.max_running = max(self.max_running, self.running)
        try:
            result = self.answer(json.loads(call.arguments or "{}"))
            if asyncio.iscoroutine(result):
                result = await result
        finally:
            self.running -= 1
        return ToolResult(
            self._item(call, output=str(result), status="completed"), str(result), True
        )

    def error_result(self, call: GatewayCall, message: str, *, status: str) -> ToolResult:
        error = {"type": "mcp_tool_execution_error", "content": [{"type": "text", "text": message}]}
        return ToolResult(self._item(call, error=error, status=status), f"Error: {message}", False)


class FakeToolKit:
    # The include values about the gateway's items: answered by the gateway, never forwarded.
    include_values = frozenset({"web_search_call.action.sources", "file_search_call.results"})

    def __init__(self, tools: list[FakeTool]) -> None:
        self.tools = {f"mcp__fake__{t.tool}": t for t in tools}

    def secret_fields(self, tool_type: str) -> frozenset[str]:
        return frozenset({"token"}) if tool_type == "fake" else frozenset()

    def involves_gateway(self, body: JsonObject, items: list[JsonObject]) -> bool:
        return any(t.get("type") == "fake" for t in body.get("tools") or []) or any(
            i.get("type") == "mcp_call" for i in items
        )

    async def prepare(
        self,
        body: JsonObject,
        history: list[JsonObject],
        new_input: list[JsonObject],
        context: ToolContext | None = None,
    ) -> PreparedTools:
        client = [t for t in body.get("tools") or [] if t.get("type") == "function"]
        functions = [
            {"type": "function", "name": name, "parameters": {"type": "object"}}
            for name in self.tools
        ]
        executors: Mapping[str, ToolExecutor] = dict(self.tools)
        return PreparedTools(
            executors=executors,
            upstream_tools=[*client, *functions],
            tool_choice=body.get("tool_choice"),
            upstream_input=lower_mcp_items([*history, *new_input], NameTable()),
            prelude=[],
            approved=[],
        )


def make_service(
    rounds: list[list[JsonObject]], tools: list[FakeTool], **limits: Any
) -> tuple[ResponsesService, ScriptedUpstream, MemoryResponseStore]:
    upstream = ScriptedUpstream(rounds)
    store = MemoryResponseStore()
    service = ResponsesService(
        upstream, store, toolkit=FakeToolKit(tools), limits=LoopLimits(**limits)
    )
    return service, upstream, store


async def run_stream(service: ResponsesService, body: JsonObject) -> list[JsonObject]:
    return [
        e
        async for e in await service.open_stream(
            ParsedRequest.from_body({**body, "stream": True}, tenant=DEFAULT_TENANT), {}
        )
    ]


BODY: JsonObject = {"model": "m", "input": "add 2 and 3", "tools": [{"type": "fake"}]}


def add_tool() -> FakeTool:
    return FakeTool("add", lambda a: a["a"] + a["b"])


async def test_two_rounds_stream_one_lifecycle_and_feed_the_model_its_call() -> None:
    call = function_call("mcp__fake__add", '{"a": 2, "b": 3}', call_id="call_model_1")
    service, upstream, _ = make_service([[call], [message("5")]], [add_tool()])
    events = await run_stream(service, BODY)
    final = assert_lifecycle(events)
    types = [e["type"] for e in events]
    assert "response.function_call_arguments.delta" not in types
    assert types.count("response.mcp_call.in_progress") == 1
    assert types.count("response.mcp_call_arguments.done") == 1
    assert types.count("response.mcp_call.completed") == 1
    assert [i["type"] for i in final["output"]] == ["mcp_call", "message"]
    assert final["output"][0]["output"] == "5" and final["output"][0]["status"] == "completed"
    assert final["output"][0]["arguments"] == '{"a": 2, "b": 3}'
    assert final["usage"]["total_tokens"] == 30
    second = upstream.requests[1]["input"]
    assert [i["type"] for i in second[-2:]] == ["function_call", "function_call_output"]
    assert second[-2]["call_id"] == second[-1]["call_id"] == "call_model_1"
    assert second[-1]["output"] == "5"
    assert upstream.requests[0]["tools"][0]["name"] == "mcp__fake__add"
    stored = await service.get(final["id"], tenant=DEFAULT_TENANT)
    assert stored == final


async def test_json_and_stream_give_the_same_output() -> None:
    def script() -> list[list[JsonObject]]:
        return [[function_call("mcp__fake__add", '{"a": 1, "b": 1}')], [message("2")]]

    service, _, _ = make_service(script(), [add_tool()])
    streamed = assert_lifecycle(await run_stream(service, BODY))
    service, upstream, _ = make_service(script(), [add_tool()])
    plain = await service.create(ParsedRequest.from_body(BODY, tenant=DEFAULT_TENANT), {})
    assert upstream.requests[0]["stream"] is False

    def strip(r: JsonObject) -> list[JsonObject]:
        return [{k: v for k, v in i.items() if k != "id"} for i in r["output"]]

    assert strip(plain) == strip(streamed)


async def test_parallel_calls_run_concurrently_and_report_in_call_order() -> None:
    async def slow(args: JsonObject) -> str:
        await asyncio.sleep(0.05 if args["n"] == 1 else 0.0)
        return f"r{args['n']}"

    tool = FakeTool("slow", slow)
    calls = [function_call("mcp__fake__slow", json.dumps({"n": n})) for n in (1, 2, 3)]
    service, upstream, _ = make_service([calls, [message("ok")]], [tool])
    final = assert_lifecycle(await run_stream(service, BODY))
    assert [i.get("output") for i in final["output"][:3]] == ["r1", "r2", "r3"]
    assert tool.max_running == 3
    outputs = [i for i in upstream.requests[1]["input"] if i["type"] == "function_call_output"]
    assert [o["output"] for o in outputs] == ["r1", "r2", "r3"]


async def test_concurrency_is_bounded() -> None:
    async def slow(args: JsonObject) -> str:
        await asyncio.sleep(0.01)
        return "x"

    tool = FakeTool("slow", slow)
    calls = [function_call("mcp__fake__slow", "{}") for _ in range(6)]
    service, _, _ = make_service([calls, [message("ok")]], [tool], max_concurrency=2)
    assert_lifecycle(await run_stream(service, BODY))
    assert tool.max_running == 2


async def test_failing_tool_is_data_for_the_model_and_the_loop_goes_on() -> None:
    def boom(args: JsonObject) -> str:
        raise RuntimeError("disk on fire")

    service, upstream, _ = make_service(
        [[function_call("mcp__fake__boom", "{}")], [message("sorry")]], [FakeTool("boom", boom)]
    )
    events = await run_stream(service, BODY)
    final = assert_lifecycle(events)
    assert final["status"] == "completed"
    assert final["output"][0]["status"] == "failed"
    assert "disk on fire" in json.dumps(final["output"][0]["error"])
    assert "response.mcp_call.failed" in [e["type"] for e in events]
    fed = upstream.requests[1]["input"][-1]
    assert fed["type"] == "function_call_output" and "disk on fire" in fed["output"]


async def test_slow_tool_hits_its_timeout() -> None:
    async def hang(args: JsonObject) -> str:
        await asyncio.sleep(30)
        return "never"

    service, upstream, _ = make_service(
        [[function_call("mcp__fake__hang", "{}")], [message("gave up")]],
        [FakeTool("hang", hang)],
        call_timeout=0.05,
    )
    # The loop's backstop is the call timeout plus a second; a well-behaved executor applies
    # ``timeout`` itself, this one does not.
    final = assert_lifecycle(await run_stream(service, BODY))
    assert final["output"][0]["status"] == "failed"
    assert "timed out" in upstream.requests[1]["input"][-1]["output"]


async def test_round_cap_gives_incomplete_and_does_not_run_the_last_calls() -> None:
    tool = FakeTool("add", lambda a: 1)
    rounds = [[function_call("mcp__fake__add", "{}")] for _ in range(3)]
    service, upstream, _ = make_service(rounds, [tool], max_rounds=2)
    events = await run_stream(service, BODY)
    final = assert_lifecycle(events)
    assert events[-1]["type"] == "response.incomplete"
    assert final["status"] == "incomplete"
    assert final["incomplete_details"] == {"reason": "max_tool_rounds"}
    assert len(upstream.requests) == 2
    assert [i["status"] for i in final["output"]] == ["completed", "incomplete"]
    assert await service.get(final["id"], tenant=DEFAULT_TENANT) == final


async def test_mixed_round_runs_gateway_calls_then_returns_the_client_calls() -> None:
    body = {**BODY, "tools": [{"type": "fake"}, {"type": "function", "name": "get_weather"}]}
    rounds = [
        [
            function_call("mcp__fake__add", '{"a": 1, "b": 2}'),
            function_call("get_weather", '{"city": "Paris"}', call_id="call_w"),
        ]
    ]
    service, upstream, _ = make_service(rounds, [add_tool()])
    final = assert_lifecycle(await run_stream(service, body))
    assert [i["type"] for i in final["output"]] == ["mcp_call", "function_call"]
    assert final["output"][0]["output"] == "3"
    assert final["output"][1]["call_id"] == "call_w"
    assert len(upstream.requests) == 1
    # The client answers its call; the continuation carries the MCP call lowered.
    upstream.rounds.append([message("sunny, and 3")])
    follow = await service.create(
        ParsedRequest.from_body(
            {
                "model": "m",
                "previous_response_id": final["id"],
                "tools": body["tools"],
                "input": [{"type": "function_call_output", "call_id": "call_w", "output": "sunny"}],
            },
            tenant=DEFAULT_TENANT,
        ),
        {},
    )
    assert follow["status"] == "completed"
    sent = upstream.requests[1]["input"]
    kinds = [i["type"] for i in sent]
    assert kinds == [
        "message",
        "function_call",
        "function_call_output",
        "function_call",
        "function_call_output",
    ]
    assert sent[1]["name"] == "mcp__fake__add" and sent[2]["output"] == "3"


async def test_max_tool_calls_stops_further_calls_and_tells_the_model() -> None:
    calls = [function_call("mcp__fake__add", '{"a": 1, "b": 1}') for _ in range(2)]
    service, upstream, _ = make_service([calls, [message("done")]], [add_tool()])
    final = assert_lifecycle(await run_stream(service, {**BODY, "max_tool_calls": 1}))
    assert [i["status"] for i in final["output"][:2]] == ["completed", "incomplete"]
    assert "max_tool_calls" in upstream.requests[1]["input"][-1]["output"]
    assert "max_tool_calls" not in upstream.requests[0]
    assert final["max_tool_calls"] == 1


async def test_tool_events_reach_the_hook() -> None:
    seen: list[ToolCallEvent] = []
    events = ToolEvents()
    events.subscribe(seen.append)
    upstream = ScriptedUpstream(
        [[function_call("mcp__fake__add", '{"a":1,"b":1}')], [message("2")]]
    )
    service = ResponsesService(
        upstream, MemoryResponseStore(), toolkit=FakeToolKit([add_tool()]), tool_events=events
    )
    await service.create(ParsedRequest.from_body(BODY, tenant=DEFAULT_TENANT), {})
    await events.drain()
    assert [e.type for e in seen] == ["tool_call.started", "tool_call.completed"]
    assert seen[1].ok is True and seen[1].preview == "2" and seen[1].duration_ms is not None
    assert seen[0].tool == "mcp__fake__add" and seen[0].round == 1
    assert seen[0].item_id == seen[1].item_id and seen[0].response_id == seen[1].response_id


class FailingSecondRound(ScriptedUpstream):
    async def stream_response(self, body: JsonObject, headers: Mapping[str, str]) -> Any:
        if self.requests:
            self.requests.append(body)
            raise UpstreamUnreachableError("upstream went away")
        return await super().stream_response(body, headers)


async def test_upstream_failure_in_a_later_round_fails_the_stream_cleanly() -> None:
    upstream = FailingSecondRound([[function_call("mcp__fake__add", '{"a":1,"b":1}')]])
    store = MemoryResponseStore()
    service = ResponsesService(upstream, store, toolkit=FakeToolKit([add_tool()]))
    events = await run_stream(service, BODY)
    final = assert_lifecycle(events)
    assert [e["type"] for e in events[-2:]] == ["error", "response.failed"]
    assert final["output"][0]["status"] == "completed"
    assert store.responses == {}


async def test_requests_without_gateway_tools_keep_the_plain_path() -> None:
    service, upstream, _ = make_service([[message("hi")]], [add_tool()])
    upstream.events = []
    body = {"model": "m", "input": "hi", "tools": [{"type": "function", "name": "f"}]}
    upstream.body = {"status": "completed", "output": [message("hi")]}
    response = await service.create(ParsedRequest.from_body(body, tenant=DEFAULT_TENANT), {})
    assert upstream.requests == [body]
    assert response["output"][0]["type"] == "message"


async def test_a_round_that_takes_too_long_times_out() -> None:
    upstream = ScriptedUpstream([[message("late")]], delay=0.5)
    service = ResponsesService(
        upstream,
        MemoryResponseStore(),
        toolkit=FakeToolKit([add_tool()]),
        limits=LoopLimits(round_timeout=0.05),
    )
    with pytest.raises(UpstreamTimeoutError):
        await service.create(ParsedRequest.from_body(BODY, tenant=DEFAULT_TENANT), {})
    with pytest.raises(UpstreamTimeoutError):  # before the stream starts: an HTTP 504
        await run_stream(service, BODY)


class SlowSecondRound(ScriptedUpstream):
    async def stream_response(self, body: JsonObject, headers: Mapping[str, str]) -> Any:
        self.delay = 0.5 if self.requests else 0.0
        return await super().stream_response(body, headers)


async def test_a_later_round_that_takes_too_long_fails_the_stream() -> None:
    upstream = SlowSecondRound([[function_call("mcp__fake__add", '{"a":1,"b":1}')], [message("x")]])
    service = ResponsesService(
        upstream,
        MemoryResponseStore(),
        toolkit=FakeToolKit([add_tool()]),
        limits=LoopLimits(round_timeout=0.1),
    )
    events = await run_stream(service, BODY)
    assert_lifecycle(events)
    assert events[-2]["type"] == "error" and events[-2]["code"] == "upstream_timeout"


async def test_a_forced_tool_choice_is_relaxed_once_the_forced_call_ran() -> None:
    call = function_call("mcp__fake__add", '{"a": 1, "b": 1}')
    service, upstream, _ = make_service([[call], [message("2")]], [add_tool()])
    await service.create(
        ParsedRequest.from_body({**BODY, "tool_choice": "required"}, tenant=DEFAULT_TENANT), {}
    )
    assert [r["tool_choice"] for r in upstream.requests] == ["required", "auto"]


@pytest.mark.parametrize("stream", [True, False])
async def test_annotators_add_citations_to_the_answer(stream: bool) -> None:
    class CitingKit(FakeToolKit):
        async def prepare(self, *args: Any) -> PreparedTools:
            prepared = await super().prepare(*args)

            def cite(text: str) -> list[JsonObject]:
                at = text.find("example.com")
                if at < 0:
                    return []
                end = at + len("example.com")
                return [
                    {
                        "type": "url_citation",
                        "start_index": at,
                        "end_index": end,
                        "url": "https://example.com",
                        "title": "Example",
                    }
                ]

            prepared.annotators.append(cite)
            return prepared

    upstream = ScriptedUpstream(
        [[function_call("mcp__fake__add", '{"a":1,"b":1}')], [message("See example.com for 2.")]]
    )
    service = ResponsesService(upstream, MemoryResponseStore(), toolkit=CitingKit([add_tool()]))
    if stream:
        events = await run_stream(service, BODY)
        final = assert_lifecycle(events)
        added = [e for e in events if e["type"] == "response.output_text.annotation.added"]
        assert len(added) == 1 and added[0]["annotation_index"] == 0
        done = [e for e in events if e["type"] == "response.content_part.done"][-1]
        assert done["part"]["annotations"][0]["url"] == "https://example.com"
    else:
        final = await service.create(ParsedRequest.from_body(BODY, tenant=DEFAULT_TENANT), {})
    [annotation] = final["output"][-1]["content"][0]["annotations"]
    assert annotation["start_index"] == 4 and annotation["end_index"] == 15
    assert await service.get(final["id"], tenant=DEFAULT_TENANT) == final


async def test_include_values_the_toolkit_answers_are_not_forwarded() -> None:
    call = function_call("mcp__fake__add", '{"a": 1, "b": 1}')
    service, upstream, _ = make_service([[call], [message("2")]], [add_tool()])
    include = ["web_search_call.action.sources", "reasoning.encrypted_content"]
    await service.create(
        ParsedRequest.from_body({**BODY, "include": include}, tenant=DEFAULT_TENANT), {}
    )
    assert [r["include"] for r in upstream.requests] == [["reasoning.encrypted_content"]] * 2
    service, upstream, _ = make_service([[message("x")]], [add_tool()])
    await service.create(
        ParsedRequest.from_body(
            {**BODY, "include": ["file_search_call.results"]}, tenant=DEFAULT_TENANT
        ),
        {},
    )
    assert "include" not in upstream.requests[0]


@pytest.mark.parametrize("stream", [False, True])
async def test_the_tool_fields_the_toolkit_calls_secret_are_never_echoed_nor_stored(
    stream: bool,
) -> None:
    call = function_call("mcp__fake__add", '{"a": 1, "b": 1}')
    service, _, store = make_service([[call], [message("2")]], [add_tool()])
    body = {**BODY, "tools": [{"type": "fake", "token": "s3cret", "label": "x"}]}
    final = assert_lifecycle(await run_stream(service, body)) if stream else None
    if final is None:
        final = await service.create(ParsedRequest.from_body(body, tenant=DEFAULT_TENANT), {})
    assert final["tools"] == [{"type": "fake", "label": "x"}]
    assert await service.get(final["id"], tenant=DEFAULT_TENANT) == final
    assert "s3cret" not in repr(store.responses) + repr(store.items)
    assert body["tools"][0]["token"] == "s3cret"  # the request itself is not changed
