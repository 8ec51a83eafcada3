"""Tool types an upstream cannot take, lowered to functions and raised back (tool_lowering)."""

from __future__ import annotations

import copy
import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import orjson
from openai.types.responses import (
    ResponseCustomToolCall,
    ResponseFunctionToolCall,
    ResponseToolSearchCall,
)

from app.protocol.json_types import JsonObject
from app.upstream.chat_request import ChatOptions, to_chat_request
from app.upstream.chat_response import ChatStreamTranslator, to_response
from app.upstream.tool_lowering import (
    DEFAULT_NATIVE_TOOL_TYPES,
    MAX_NAME_LENGTH,
    lower_tools,
)
from app.upstream.tool_raising import EventRaiser, RaisedEvents, RaisingTranslator
from tests.upstream.test_chat_translate_stream import chunk, completion, fold, tool

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "codex"
CHAT = DEFAULT_NATIVE_TOOL_TYPES["chat"]
FUNCTION = {"type": "function", "name": "exec_command", "parameters": {"type": "object"}}
PATCH = {
    "type": "custom",
    "name": "apply_patch",
    "description": "Edit files.",
    "format": {"type": "grammar", "syntax": "lark", "definition": 'start: "*** Begin Patch"'},
}
AGENTS = {
    "type": "namespace",
    "name": "multi_agent",
    "description": "Sub-agents.",
    "tools": [
        {"type": "function", "name": "spawn_agent", "parameters": {"type": "object"}},
        {"type": "custom", "name": "script", "description": "Free text."},
    ],
}
SEARCH = {
    "type": "tool_search",
    "execution": "client",
    "description": "Find tools.",
    "parameters": {"type": "object", "properties": {"query": {"type": "string"}}},
}


def codex_body(name: str) -> JsonObject:
    body: JsonObject = json.loads((FIXTURES / name).read_text())
    # The core leaves out the hosted web_search tool before the upstream sees the body.
    body["tools"] = [t for t in body["tools"] if t["type"] != "web_search"]
    return body


def names(body: JsonObject) -> list[str]:
    return [t["name"] for t in body["tools"]]


# =========================================================================== request


def test_nothing_to_lower_leaves_the_body_alone() -> None:
    body = {"model": "m", "input": "hi", "tools": [FUNCTION]}
    assert lower_tools(body, CHAT) == (body, None)
    assert lower_tools({"tools": [PATCH, AGENTS]}, None)[1] is None  # every type native
    lowered, lowering = lower_tools({"tools": [PATCH]}, frozenset({"function", "custom"}))
    assert lowering is None and lowered["tools"] == [PATCH]


def test_codex_requests_become_chat_requests() -> None:
    for fixture, expected in [
        ("codex-0.169.0-qwen-qwen3-8b-turn1.json", "multi_agent_v1__spawn_agent"),
        ("codex-0.169.0-gpt-5.5-turn1.json", "apply_patch"),
    ]:
        body = codex_body(fixture)
        original = copy.deepcopy(body)
        lowered, lowering = lower_tools(body, CHAT)
        assert body == original  # not changed in place
        assert lowering is not None
        assert {t["type"] for t in lowered["tools"]} == {"function"}
        assert expected in names(lowered)
        chat = to_chat_request(lowered, ChatOptions(), stream=True)  # no 400 any more
        assert expected in [t["function"]["name"] for t in chat["tools"]]


def test_custom_tool_is_a_function_with_one_string_and_the_grammar() -> None:
    lowered, _ = lower_tools({"tools": [PATCH]}, CHAT)
    [function] = lowered["tools"]
    assert function["name"] == "apply_patch"
    assert function["parameters"]["required"] == ["input"]
    assert function["parameters"]["properties"]["input"]["type"] == "string"
    assert "Edit files." in function["description"]
    assert 'start: "*** Begin Patch"' in function["description"]
    assert "lark" in function["description"]


def test_namespace_tools_are_flattened_under_reversible_names() -> None:
    lowered, lowering = lower_tools({"tools": [AGENTS, SEARCH]}, CHAT)
    assert lowering is not None
    assert names(lowered) == ["multi_agent__spawn_agent", "multi_agent__script", "tool_search"]
    assert "Sub-agents." in lowered["tools"][0]["description"]
    call = {"type": "function_call", "id": "fc_1", "call_id": "c1", "arguments": "{}"}
    raised = lowering.raise_item({**call, "name": "multi_agent__spawn_agent"})
    checked = ResponseFunctionToolCall.model_validate(raised)
    assert (checked.name, checked.namespace, checked.call_id) == (
        "spawn_agent",
        "multi_agent",
        "c1",
    )
    custom = lowering.raise_item(
        {**call, "name": "multi_agent__script", "arguments": '{"input":"x"}'}
    )
    assert ResponseCustomToolCall.model_validate(custom).namespace == "multi_agent"
    assert lowering.raise_item({**call, "name": "exec_command"}) == {**call, "name": "exec_command"}


def test_lowered_names_do_not_collide_and_stay_short() -> None:
    long_ns = {**AGENTS, "name": "n" * 70}
    taken = {"type": "function", "name": "multi_agent__spawn_agent"}
    odd = {
        "type": "namespace",
        "name": "multi.agent",
        "tools": [{"type": "function", "name": "spawn_agent"}],
    }
    lowered, lowering = lower_tools(
        {"tools": [taken, AGENTS, odd, long_ns, {**PATCH, "name": "multi_agent__script"}]}, CHAT
    )
    assert lowering is not None
    all_names = names(lowered)
    assert len(all_names) == len(set(all_names)) == 7
    assert all(len(n) <= MAX_NAME_LENGTH for n in all_names)
    assert all(n.replace("_", "").replace("-", "").isalnum() for n in all_names)
    # The client's own function and custom tool keep their names.
    assert all_names[0] == "multi_agent__spawn_agent"
    assert all_names[-1] == "multi_agent__script"
    raised = {
        (t.namespace, t.name, t.kind) for name, t in lowering.targets.items() if name in all_names
    }
    assert raised == {
        ("multi_agent", "spawn_agent", "function"),
        ("multi_agent", "script", "custom"),
        ("multi.agent", "spawn_agent", "function"),
        ("n" * 70, "spawn_agent", "function"),
        ("n" * 70, "script", "custom"),
        (None, "multi_agent__script", "custom"),
    }


def test_history_goes_up_as_function_calls_and_outputs() -> None:
    history: list[Any] = [
        {"type": "message", "role": "user", "content": "patch it"},
        {
            "type": "custom_tool_call",
            "id": "ctc_1",
            "call_id": "c1",
            "name": "apply_patch",
            "input": 'a "b"\n',
        },
        {"type": "custom_tool_call_output", "call_id": "c1", "output": "Done."},
        {
            "type": "function_call",
            "id": "fc_2",
            "call_id": "c2",
            "namespace": "multi_agent",
            "name": "spawn_agent",
            "arguments": "{}",
        },
        {"type": "function_call_output", "call_id": "c2", "output": "ok"},
        {
            "type": "tool_search_call",
            "id": "tsc_3",
            "call_id": "c3",
            "execution": "client",
            "arguments": {"query": "x"},
            "status": "completed",
        },
        {
            "type": "tool_search_output",
            "call_id": "c3",
            "execution": "client",
            "status": "completed",
            "tools": [FUNCTION],
        },
        {"type": "additional_tools", "tools": [AGENTS, {"type": "web_search"}]},
    ]
    lowered, lowering = lower_tools({"input": history, "tools": [PATCH, SEARCH]}, CHAT)
    assert lowering is not None
    calls = [i for i in lowered["input"] if i["type"] == "function_call"]
    outputs = [i for i in lowered["input"] if i["type"] == "function_call_output"]
    assert [c["name"] for c in calls] == ["apply_patch", "multi_agent__spawn_agent", "tool_search"]
    assert json.loads(calls[0]["arguments"]) == {"input": 'a "b"\n'}
    assert json.loads(calls[2]["arguments"]) == {"query": "x"}
    assert [o["call_id"] for o in outputs] == ["c1", "c2", "c3"]
    assert "exec_command" in outputs[2]["output"]
    assert not any(i["type"] == "additional_tools" for i in lowered["input"])
    # The client's tools of additional_tools and of the search's output are offered.
    assert {"multi_agent__spawn_agent", "exec_command"} <= set(names(lowered))
    assert {t["type"] for t in lowered["tools"]} == {"function"}  # no hosted web_search
    # Round trip: the lowered calls raise back to the items the history held.
    assert lowering.raise_item({**calls[0], "id": "fc_1"}) == {
        "id": "ctc_1",
        "type": "custom_tool_call",
        "call_id": "c1",
        "name": "apply_patch",
        "input": 'a "b"\n',
    }
    assert lowering.raise_item(calls[1])["namespace"] == "multi_agent"
    search = lowering.raise_item({**calls[2], "id": "fc_3"})
    assert ResponseToolSearchCall.model_validate(search).arguments == {"query": "x"}
    assert to_chat_request(lowered, ChatOptions(), stream=False)["messages"][1]["tool_calls"]


def test_tool_choice_names_the_lowered_function() -> None:
    body = {"tools": [PATCH, AGENTS], "tool_choice": {"type": "custom", "name": "apply_patch"}}
    assert lower_tools(body, CHAT)[0]["tool_choice"] == {"type": "function", "name": "apply_patch"}
    body["tool_choice"] = {"type": "function", "namespace": "multi_agent", "name": "spawn_agent"}
    choice = lower_tools(body, CHAT)[0]["tool_choice"]
    assert choice == {"type": "function", "name": "multi_agent__spawn_agent"}


# =========================================================================== answers


def test_non_streaming_answer_raises_the_calls() -> None:
    lowered, lowering = lower_tools({"model": "m", "tools": [PATCH, AGENTS]}, CHAT)
    assert lowering is not None
    message = {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {
                "id": "c1",
                "type": "function",
                "function": {"name": "apply_patch", "arguments": '{"input": "*** Begin Patch"}'},
            },
            {
                "id": "c2",
                "type": "function",
                "function": {"name": "multi_agent__spawn_agent", "arguments": "{}"},
            },
        ],
    }
    response = lowering.raise_response(to_response(completion(message, "tool_calls"), lowered))
    custom, function = response["output"]
    assert ResponseCustomToolCall.model_validate(custom).input == "*** Begin Patch"
    assert custom["id"].startswith("ctc_") and custom["call_id"] == "c1"
    assert (function["name"], function["namespace"]) == ("spawn_agent", "multi_agent")


def stream(lowered: JsonObject, lowering: Any, chunks: list[JsonObject]) -> list[JsonObject]:
    translator = RaisingTranslator(ChatStreamTranslator(lowered), EventRaiser(lowering))
    events = [e for c in chunks for e in translator.feed(c)]
    return events + translator.finish()


def test_streamed_custom_call_becomes_custom_tool_call_input_events() -> None:
    lowered, lowering = lower_tools({"model": "m", "tools": [PATCH, SEARCH]}, CHAT)
    text = 'line "one"\n\u00e9 \U0001f600 end'
    arguments = orjson.dumps({"input": text}).decode().replace("é", "\\u00e9")
    arguments = arguments.replace("\U0001f600", "\\ud83d\\ude00")
    pieces = [arguments[i : i + 3] for i in range(0, len(arguments), 3)]  # splits escapes
    chunks = [
        chunk({"role": "assistant"}),
        chunk({"tool_calls": [tool(0, id="c1", name="apply_patch")]}),
    ]
    chunks += [chunk({"tool_calls": [tool(0, arguments=p)]}) for p in pieces]
    chunks.append(chunk(finish="tool_calls"))
    events = stream(lowered, lowering, chunks)
    kinds = [e["type"] for e in events]
    assert "response.function_call_arguments.delta" not in kinds
    deltas = [e["delta"] for e in events if e["type"] == "response.custom_tool_call_input.delta"]
    assert "".join(deltas) == text
    [done] = [e for e in events if e["type"] == "response.custom_tool_call_input.done"]
    assert done["input"] == text
    added = next(e for e in events if e["type"] == "response.output_item.added")
    assert added["item"]["type"] == "custom_tool_call" and added["item"]["input"] == ""
    assert {e["item_id"] for e in events if "item_id" in e} == {added["item"]["id"]}
    accumulator, out = fold(events)
    [item] = accumulator.output
    assert ResponseCustomToolCall.model_validate(item).input == text
    assert out[-1]["response"]["output"][0]["type"] == "custom_tool_call"
    assert [e for e in out if e["type"] == "response.custom_tool_call_input.done"]


def test_streamed_namespaced_call_and_tool_search() -> None:
    lowered, lowering = lower_tools({"model": "m", "tools": [AGENTS, SEARCH]}, CHAT)
    chunks = [
        chunk({"tool_calls": [tool(0, id="c1", name="multi_agent__spawn_agent", arguments="{}")]}),
        chunk({"tool_calls": [tool(1, id="c2", name="tool_search", arguments='{"query"')]}),
        chunk({"tool_calls": [tool(1, arguments=': "git"}')]}),
        chunk(finish="tool_calls"),
    ]
    events = stream(lowered, lowering, chunks)
    accumulator, _ = fold(events)
    function, search = accumulator.output
    assert (function["name"], function["namespace"]) == ("spawn_agent", "multi_agent")
    checked = ResponseToolSearchCall.model_validate(search)
    assert (checked.call_id, checked.arguments, checked.execution) == (
        "c2",
        {"query": "git"},
        "client",
    )
    done = [e for e in events if e["type"] == "response.function_call_arguments.done"]
    assert [e["name"] for e in done] == ["spawn_agent"]  # the search's arguments are not streamed
    terminal = events[-1]["response"]["output"]
    assert [i["type"] for i in terminal] == ["function_call", "tool_search_call"]


class ListStream:
    """An ``UpstreamEventStream`` over a list of events."""

    def __init__(self, events: list[JsonObject]) -> None:
        self.events = events
        self.closed = False

    async def _events(self) -> AsyncIterator[JsonObject]:
        for event in self.events:
            yield event

    def __aiter__(self) -> AsyncIterator[JsonObject]:
        return self._events()

    async def aclose(self) -> None:
        self.closed = True


async def test_a_responses_stream_is_raised_and_closed() -> None:
    _, lowering = lower_tools({"tools": [PATCH]}, CHAT)
    assert lowering is not None
    call = {
        "type": "function_call",
        "id": "fc_1",
        "call_id": "c1",
        "name": "apply_patch",
        "arguments": '{"input": "x"}',
    }
    upstream = ListStream(
        [
            {"type": "response.output_item.done", "output_index": 0, "item": call},
            {"type": "response.completed", "response": {"status": "completed", "output": [call]}},
        ]
    )
    stream = RaisedEvents(upstream, EventRaiser(lowering))
    events = [event async for event in stream]
    await stream.aclose()
    assert upstream.closed
    assert events[0]["item"]["type"] == "custom_tool_call"
    assert events[1]["response"]["output"][0]["input"] == "x"


def test_history_of_a_native_type_stays_as_it_is() -> None:
    native = frozenset({"function", "custom", "tool_search"})
    history: list[Any] = [
        {"type": "custom_tool_call", "call_id": "c1", "name": "apply_patch", "input": "x"},
        {"type": "custom_tool_call_output", "call_id": "c1", "output": "Done."},
        {"type": "tool_search_output", "call_id": "c3", "tools": [FUNCTION]},
    ]
    body = {"input": history, "tools": [PATCH, SEARCH, AGENTS]}
    lowered, lowering = lower_tools(body, native)  # only the namespace is lowered
    assert lowering is not None
    assert lowered["input"] == history
    offered = [t.get("name") for t in lowered["tools"]]
    assert offered == ["apply_patch", None, "multi_agent__spawn_agent", "multi_agent__script"]
    assert lower_tools({"input": history, "tools": [PATCH, SEARCH]}, native) == (
        {"input": history, "tools": [PATCH, SEARCH]},
        None,
    )
