"""The server-side tool loop end to end: the official ``openai`` SDK -> the gateway -> a replayed
upstream (the scripted vLLM recordings of ``cassettes/tool-loop/``), with the gateway running
the model's calls on a real MCP server (the counter server of ``tests/mcp_servers/counter.py``
over streamable HTTP and SSE, and ``@modelcontextprotocol/server-everything`` from npm: the
``counter_url``, ``counter_sse_url`` and ``everything_url`` fixtures of ``tests/conftest.py``).

Every test checks both sides of the gateway. The client's: the items, their fields and
statuses, the stream contract (``tests/lifecycle.py``), the SDK's accumulator accepting the
stream, and ``GET /v1/responses/{id}`` equal to the final response. The upstream's: each
request body equals the recorded one once the ids the gateway generates are numbered by first
appearance, so the tools offered, the ``function_call``/``function_call_output`` pairs fed back
with the model's own call ids, and the lowered history of continuations are all compared.
"""

from __future__ import annotations

import json
import re
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any

import openai
import pytest

from app.protocol.json_types import JsonObject
from app.recording.cassette import Turn, sse_data_events
from tests.e2e import tool_loop_cases as cases
from tests.e2e.conftest import Stack, gateway_stack
from tests.helpers import local_egress, without_parsed
from tests.lifecycle import assert_lifecycle

# Ids the gateway generates: a prefix and a UUIDv7 as 32 hex digits.
_GATEWAY_ID = re.compile(r"^([a-z]+)_[0-9a-f]{32}$")


def cassette(name: str) -> Path:
    return cases.CASSETTES / f"{name}.yaml"


def mcp_gateway(path: Path, **settings: object) -> AbstractContextManager[Stack]:
    """The recorded gateway, its egress policy allowing the local MCP servers (loopback)."""
    return gateway_stack(path, egress=local_egress(), **settings)


# ----------------------------------------------------------------------------- helpers


def dump(model: Any) -> JsonObject:
    data: JsonObject = model.model_dump(mode="json", warnings=False)
    return data


def number_ids(value: Any) -> Any:
    """``value`` with every gateway-generated id replaced by ``<prefix>_<n>``, ``n`` counting
    distinct ids by first appearance (so equal ids stay equal and distinct ones distinct)."""
    seen: dict[str, str] = {}

    def walk(node: Any) -> Any:
        if isinstance(node, dict):
            return {key: walk(item) for key, item in node.items()}
        if isinstance(node, list):
            return [walk(item) for item in node]
        if isinstance(node, str):
            match = _GATEWAY_ID.match(node)
            if match is not None:
                if node not in seen:
                    seen[node] = f"{match.group(1)}_<{len(seen) + 1}>"
                return seen[node]
        return node

    return walk(value)


def stream(client: openai.OpenAI, **kwargs: Any) -> tuple[list[JsonObject], JsonObject]:
    """One streamed response through the SDK: its events (as dicts) and the final response.

    Checks the stream contract, that the SDK's accumulator accepts the stream, and that the
    stored response equals what the client received."""
    with client.responses.stream(model=cases.MODEL, **kwargs) as response_stream:
        events = [dump(event) for event in response_stream]
        if events and events[-1]["type"] == "response.completed":
            final = without_parsed(dump(response_stream.get_final_response()))
        else:  # the SDK only accumulates completed responses
            final = without_parsed(events[-1]["response"])
    terminal = assert_lifecycle(events)
    assert without_parsed(terminal) == final
    assert dump(client.responses.retrieve(final["id"])) == final
    return events, final


def create(client: openai.OpenAI, **kwargs: Any) -> JsonObject:
    final = dump(client.responses.create(model=cases.MODEL, **kwargs))
    assert dump(client.responses.retrieve(final["id"])) == final
    return final


def respond(
    client: openai.OpenAI, streamed: bool, **kwargs: Any
) -> tuple[list[JsonObject], JsonObject]:
    """``stream`` or ``create`` (no events)."""
    if streamed:
        return stream(client, **kwargs)
    return [], create(client, **kwargs)


both_modes = pytest.mark.parametrize("streamed", [True, False], ids=["stream", "json"])


def recorded_turns(stack: Stack, *, streamed: bool) -> list[Turn]:
    return [t for t in stack.cassette.turns if bool(t.request.body.get("stream")) == streamed]


def assert_sent_as_recorded(stack: Stack, *, streamed: bool) -> list[JsonObject]:
    """The bodies the gateway sent upstream equal the recorded ones (gateway ids numbered)."""
    received = stack.received()
    assert all(r["path"] == "/v1/responses" for r in received)
    sent = [r["body"] for r in received]
    recorded = [t.request.body for t in recorded_turns(stack, streamed=streamed)]
    assert len(sent) == len(recorded)
    for number, (got, expected) in enumerate(zip(sent, recorded, strict=True), start=1):
        assert number_ids(got) == number_ids(expected), f"upstream request {number}"
    return sent


def model_calls(turn: Turn) -> list[JsonObject]:
    """The model's function calls in one recorded answer, as the gateway saw them first: the
    streamed items (vLLM renames them in its final object), or the JSON body's."""
    if turn.response.sse is None:
        return [i for i in turn.response.body["output"] if i["type"] == "function_call"]
    return [
        e["item"]
        for e in sse_data_events(turn)
        if e["type"] == "response.output_item.done" and e["item"]["type"] == "function_call"
    ]


def types(output: list[JsonObject]) -> list[str]:
    return [item["type"] for item in output]


def item_events(events: list[JsonObject], item_id: str) -> list[str]:
    """The event types of one item, deltas of a kind collapsed."""
    out: list[str] = []
    for event in events:
        mine = event.get("item_id") == item_id or (event.get("item") or {}).get("id") == item_id
        if mine and (not out or out[-1] != event["type"] or not event["type"].endswith("delta")):
            out.append(event["type"])
    return out


def outputs_fed_back(body: JsonObject) -> dict[str, str]:
    return {
        item["call_id"]: item["output"]
        for item in body["input"]
        if item["type"] == "function_call_output"
    }


def calls_fed_back(body: JsonObject) -> list[JsonObject]:
    return [item for item in body["input"] if item["type"] == "function_call"]


def assert_listing(item: JsonObject, label: str, names: list[str]) -> None:
    assert item["type"] == "mcp_list_tools"
    assert item["server_label"] == label
    assert [tool["name"] for tool in item["tools"]] == names
    assert item.get("error") is None
    for tool in item["tools"]:
        assert tool["input_schema"]["type"] == "object"


def assert_mcp_call(
    item: JsonObject,
    name: str,
    arguments: JsonObject,
    *,
    output: str | None,
    status: str = "completed",
    approval_request_id: str | None = None,
) -> None:
    assert item["type"] == "mcp_call"
    assert item["server_label"] == cases.COUNTER
    assert item["name"] == name
    assert json.loads(item["arguments"]) == arguments
    assert item["status"] == status
    assert item["output"] == output
    assert item["approval_request_id"] == approval_request_id
    if status == "completed":
        assert item["error"] is None
    else:
        assert item["error"] is not None


def message_text(item: JsonObject) -> str:
    assert item["type"] == "message"
    return "".join(part["text"] for part in item["content"])


def counter_tools(scenario: str) -> list[str]:
    """The upstream names of the counter tools a scenario allows."""
    return [f"mcp__counter__{name}" for name in cases.ALLOWED[scenario]]


# ----------------------------------------------------------------------------- several rounds


def check_multi_round(stack: Stack, final: JsonObject, *, streamed: bool) -> None:
    output = final["output"]
    assert final["status"] == "completed"
    assert types(output) == [
        "mcp_list_tools",
        "reasoning",
        "mcp_call",
        "reasoning",
        "mcp_call",
        "reasoning",
        "message",
    ]
    assert_listing(output[0], cases.COUNTER, ["sum", "echo"])
    assert_mcp_call(output[2], "sum", {"a": 20, "b": 22}, output="42")
    assert_mcp_call(output[4], "echo", {"message": "42"}, output="42")
    assert message_text(output[6]).strip() == "The sum of 20 and 22 is 42, and echo returned 42."
    # Usage is summed over the three rounds.
    recorded = recorded_turns(stack, streamed=streamed)
    finals = [
        t.response.body if t.response.sse is None else sse_data_events(t)[-1]["response"]
        for t in recorded
    ]
    assert final["usage"]["input_tokens"] == sum(f["usage"]["input_tokens"] for f in finals)
    assert final["usage"]["output_tokens"] == sum(f["usage"]["output_tokens"] for f in finals)

    sent = assert_sent_as_recorded(stack, streamed=streamed)
    assert len(sent) == 3
    for body in sent:
        assert [t["name"] for t in body["tools"]] == counter_tools("multi-round")
        assert all(t["type"] == "function" for t in body["tools"])
        assert body["stream"] is streamed
    (add,) = model_calls(recorded[0])
    (echo,) = model_calls(recorded[1])
    assert [c["call_id"] for c in calls_fed_back(sent[1])] == [add["call_id"]]
    assert outputs_fed_back(sent[1]) == {add["call_id"]: "42"}
    assert [c["call_id"] for c in calls_fed_back(sent[2])] == [add["call_id"], echo["call_id"]]
    assert outputs_fed_back(sent[2]) == {add["call_id"]: "42", echo["call_id"]: "42"}


def test_several_rounds_streaming(counter_url: str) -> None:
    with mcp_gateway(cassette("multi-round")) as stack:
        tools = [cases.counter_tool(counter_url, "multi-round")]
        events, final = stream(stack.client, input=cases.PROMPTS["multi-round"], tools=tools)
        check_multi_round(stack, final, streamed=True)
    add = final["output"][2]
    assert item_events(events, add["id"]) == [
        "response.output_item.added",
        "response.mcp_call.in_progress",
        "response.mcp_call_arguments.delta",
        "response.mcp_call_arguments.done",
        "response.mcp_call.completed",
        "response.output_item.done",
    ]
    listing = final["output"][0]
    assert item_events(events, listing["id"]) == [
        "response.output_item.added",
        "response.mcp_list_tools.in_progress",
        "response.mcp_list_tools.completed",
        "response.output_item.done",
    ]
    # The model's text streams live, round after round.
    deltas = "".join(e["delta"] for e in events if e["type"] == "response.output_text.delta")
    assert deltas == message_text(final["output"][6])
    reasoning = [e for e in events if e["type"] == "response.reasoning_text.delta"]
    assert {e["output_index"] for e in reasoning} == {1, 3, 5}


def test_several_rounds_json(counter_url: str) -> None:
    with mcp_gateway(cassette("multi-round")) as stack:
        tools = [cases.counter_tool(counter_url, "multi-round")]
        final = create(stack.client, input=cases.PROMPTS["multi-round"], tools=tools)
        check_multi_round(stack, final, streamed=False)


# ----------------------------------------------------------------------------- parallel calls


def check_parallel(stack: Stack, final: JsonObject, *, streamed: bool) -> None:
    output = final["output"]
    assert final["status"] == "completed"
    assert types(output) == [
        "mcp_list_tools",
        "reasoning",
        "mcp_call",
        "mcp_call",
        "reasoning",
        "message",
    ]
    assert_mcp_call(output[2], "sum", {"a": 20, "b": 22}, output="42")
    assert_mcp_call(output[3], "echo", {"message": "hello"}, output="hello")
    assert message_text(output[5]).strip() == "sum returned 42 and echo returned hello."
    sent = assert_sent_as_recorded(stack, streamed=streamed)
    assert len(sent) == 2
    add, echo = model_calls(recorded_turns(stack, streamed=streamed)[0])
    # Both calls, then both results, in call order.
    assert [i["type"] for i in sent[1]["input"]][-4:] == [
        "function_call",
        "function_call",
        "function_call_output",
        "function_call_output",
    ]
    assert [c["call_id"] for c in calls_fed_back(sent[1])] == [add["call_id"], echo["call_id"]]
    assert outputs_fed_back(sent[1]) == {add["call_id"]: "42", echo["call_id"]: "hello"}


def test_parallel_calls_streaming(counter_url: str) -> None:
    with mcp_gateway(cassette("parallel")) as stack:
        tools = [cases.counter_tool(counter_url, "parallel")]
        events, final = stream(stack.client, input=cases.PROMPTS["parallel"], tools=tools)
        check_parallel(stack, final, streamed=True)
    # Both calls are opened (with their arguments) before either completes.
    add, echo = final["output"][2]["id"], final["output"][3]["id"]
    kinds = [(e["type"], e.get("item_id")) for e in events]
    assert kinds.index(("response.mcp_call_arguments.done", echo)) < kinds.index(
        ("response.mcp_call.completed", add)
    )
    assert kinds.index(("response.mcp_call.completed", add)) < kinds.index(
        ("response.mcp_call.completed", echo)
    )


def test_parallel_calls_json(counter_url: str) -> None:
    with mcp_gateway(cassette("parallel")) as stack:
        tools = [cases.counter_tool(counter_url, "parallel")]
        final = create(stack.client, input=cases.PROMPTS["parallel"], tools=tools)
        check_parallel(stack, final, streamed=False)


def test_parallel_calls_over_sse_transport(counter_sse_url: str) -> None:
    assert counter_sse_url.endswith("/sse")
    with mcp_gateway(cassette("parallel")) as stack:
        tools = [cases.counter_tool(counter_sse_url, "parallel")]
        _, final = stream(stack.client, input=cases.PROMPTS["parallel"], tools=tools)
        check_parallel(stack, final, streamed=True)


# ----------------------------------------------------------------------------- failures and limits


def test_failing_tool_is_data_for_the_model(counter_url: str) -> None:
    with mcp_gateway(cassette("failing-tool")) as stack:
        tools = [cases.counter_tool(counter_url, "failing-tool")]
        events, final = stream(stack.client, input=cases.PROMPTS["failing-tool"], tools=tools)
        output = final["output"]
        assert final["status"] == "completed"
        assert types(output) == ["mcp_list_tools", "reasoning", "mcp_call", "reasoning", "message"]
        call = output[2]
        assert_mcp_call(call, "fail", {"message": "boom"}, output=None, status="failed")
        assert call["error"] == {
            "type": "mcp_tool_execution_error",
            "content": [{"type": "text", "text": "Error executing tool fail: boom"}],
        }
        assert item_events(events, call["id"])[-2:] == [
            "response.mcp_call.failed",
            "response.output_item.done",
        ]
        sent = assert_sent_as_recorded(stack, streamed=True)
        (fail,) = model_calls(recorded_turns(stack, streamed=True)[0])
        assert outputs_fed_back(sent[1]) == {fail["call_id"]: cases.FAIL_OUTPUT}


def test_slow_tool_hits_the_call_timeout(counter_url: str) -> None:
    with mcp_gateway(cassette("timeout"), tool_call_timeout=cases.TIMEOUT_SECONDS) as stack:
        tools = [cases.counter_tool(counter_url, "timeout")]
        events, final = stream(stack.client, input=cases.PROMPTS["timeout"], tools=tools)
        output = final["output"]
        assert final["status"] == "completed"
        assert types(output) == ["mcp_list_tools", "reasoning", "mcp_call", "reasoning", "message"]
        call = output[2]
        assert_mcp_call(call, "sleep", {"seconds": 5}, output=None, status="failed")
        assert call["error"]["type"] == "mcp_protocol_error"
        assert call["error"]["code"] == -32001  # the SDK's REQUEST_TIMEOUT
        assert "timed out" in call["error"]["message"]
        assert "response.mcp_call.failed" in item_events(events, call["id"])
        sent = assert_sent_as_recorded(stack, streamed=True)
        (sleep,) = model_calls(recorded_turns(stack, streamed=True)[0])
        assert outputs_fed_back(sent[1]) == {sleep["call_id"]: cases.TIMEOUT_OUTPUT}


@both_modes
def test_round_cap_ends_incomplete(counter_url: str, streamed: bool) -> None:
    with mcp_gateway(cassette("round-cap"), tool_max_rounds=cases.MAX_ROUNDS) as stack:
        tools = [cases.counter_tool(counter_url, "round-cap")]
        events, final = respond(
            stack.client, streamed, input=cases.PROMPTS["round-cap"], tools=tools
        )
        if streamed:
            assert events[-1]["type"] == "response.incomplete"
        assert final["status"] == "incomplete"
        assert final["incomplete_details"] == {"reason": "max_tool_rounds"}
        output = final["output"]
        assert types(output) == ["mcp_list_tools", "reasoning", "mcp_call", "reasoning", "mcp_call"]
        assert_mcp_call(output[2], "sum", {"a": 1, "b": 1}, output="2")
        # The last round's call is not run.
        assert_mcp_call(output[4], "sum", {"a": 2, "b": 1}, output=None, status="incomplete")
        assert "2 rounds" in json.dumps(output[4]["error"])
        # Exactly the two capped rounds went upstream.
        sent = assert_sent_as_recorded(stack, streamed=streamed)
        assert len(sent) == cases.MAX_ROUNDS


def test_max_tool_calls_leaves_further_calls_unrun(counter_url: str) -> None:
    with mcp_gateway(cassette("max-tool-calls")) as stack:
        tools = [cases.counter_tool(counter_url, "max-tool-calls")]
        _, final = stream(
            stack.client, input=cases.PROMPTS["max-tool-calls"], tools=tools, max_tool_calls=1
        )
        output = final["output"]
        assert final["status"] == "completed"
        assert final["max_tool_calls"] == 1
        assert types(output) == [
            "mcp_list_tools",
            "reasoning",
            "mcp_call",
            "mcp_call",
            "reasoning",
            "message",
        ]
        assert_mcp_call(output[2], "sum", {"a": 1, "b": 2}, output="3")
        assert_mcp_call(output[3], "sum", {"a": 3, "b": 4}, output=None, status="incomplete")
        sent = assert_sent_as_recorded(stack, streamed=True)
        assert "max_tool_calls" not in sent[0]
        first, second = model_calls(recorded_turns(stack, streamed=True)[0])
        fed_back = outputs_fed_back(sent[1])
        assert fed_back[first["call_id"]] == "3"
        assert "max_tool_calls" in fed_back[second["call_id"]]


# ----------------------------------------------------------------------------- client actions


@both_modes
def test_mixed_round_returns_the_client_call(counter_url: str, streamed: bool) -> None:
    with mcp_gateway(cassette("mixed-round")) as stack:
        tools = [cases.counter_tool(counter_url, "mixed-round"), cases.GET_WEATHER]
        _, first = respond(stack.client, streamed, input=cases.PROMPTS["mixed-round"], tools=tools)
        output = first["output"]
        assert first["status"] == "completed"
        assert types(output) == ["mcp_list_tools", "reasoning", "mcp_call", "function_call"]
        assert_mcp_call(output[2], "sum", {"a": 20, "b": 22}, output="42")
        weather = output[3]
        assert weather["name"] == "get_weather"
        assert json.loads(weather["arguments"]) == {"location": "Paris"}
        assert weather["status"] == "completed"
        (_, recorded_weather) = model_calls(recorded_turns(stack, streamed=streamed)[0])
        assert weather["call_id"] == recorded_weather["call_id"]

        _, second = respond(
            stack.client,
            streamed,
            previous_response_id=first["id"],
            input=[
                {
                    "type": "function_call_output",
                    "call_id": weather["call_id"],
                    "output": cases.WEATHER_OUTPUT,
                }
            ],
            tools=tools,
        )
        assert second["status"] == "completed"
        assert second["previous_response_id"] == first["id"]
        assert types(second["output"]) == ["reasoning", "message"]
        assert "sunny in Paris" in message_text(second["output"][1])

        sent = assert_sent_as_recorded(stack, streamed=streamed)
        assert [t["name"] for t in sent[0]["tools"]] == ["get_weather", "mcp__counter__sum"]
        # The continuation: sum lowered (its call id is the mcp_call item's id), then the
        # client's own call and output.
        calls = calls_fed_back(sent[1])
        assert [c["call_id"] for c in calls] == [output[2]["id"], weather["call_id"]]
        assert outputs_fed_back(sent[1]) == {
            output[2]["id"]: "42",
            weather["call_id"]: cases.WEATHER_OUTPUT,
        }
        assert "mcp_list_tools" not in json.dumps(sent[1]["input"])


def approval_request(
    client: openai.OpenAI, counter_url: str, scenario: str, streamed: bool
) -> JsonObject:
    tools = [cases.counter_tool(counter_url, scenario, require_approval=None)]  # default: always
    events, first = respond(client, streamed, input=cases.PROMPTS[scenario], tools=tools)
    assert first["status"] == "completed"
    output = first["output"]
    assert types(output) == ["mcp_list_tools", "reasoning", "mcp_approval_request"]
    request = output[2]
    assert request["server_label"] == cases.COUNTER
    assert request["name"] == "sum"
    assert json.loads(request["arguments"]) == {"a": 20, "b": 22}
    assert request["id"].startswith("mcpr_")
    if streamed:
        assert item_events(events, request["id"]) == [
            "response.output_item.added",
            "response.output_item.done",
        ]
        assert not [e for e in events if e["type"].startswith("response.mcp_call")]
    return first


def answer_approval(
    stack: Stack,
    counter_url: str,
    scenario: str,
    first: JsonObject,
    streamed: bool,
    approve: bool,
    *,
    reason: str | None = None,
) -> tuple[list[JsonObject], JsonObject]:
    """The client's ``mcp_approval_response`` to ``first``'s approval request, continuing it."""
    answer: JsonObject = {
        "type": "mcp_approval_response",
        "approval_request_id": first["output"][2]["id"],
        "approve": approve,
    }
    if reason is not None:
        answer["reason"] = reason
    return respond(
        stack.client,
        streamed,
        previous_response_id=first["id"],
        input=[answer],
        tools=[cases.counter_tool(counter_url, scenario, require_approval=None)],
    )


@both_modes
def test_approval_approved_runs_the_call_first(counter_url: str, streamed: bool) -> None:
    scenario = "approval-approve"
    with mcp_gateway(cassette(scenario)) as stack:
        first = approval_request(stack.client, counter_url, scenario, streamed)
        request = first["output"][2]
        events, second = answer_approval(stack, counter_url, scenario, first, streamed, True)
        assert second["status"] == "completed"
        output = second["output"]
        assert types(output) == ["mcp_call", "reasoning", "message"]
        assert_mcp_call(
            output[0], "sum", {"a": 20, "b": 22}, output="42", approval_request_id=request["id"]
        )
        if streamed:
            assert item_events(events, output[0]["id"]) == [
                "response.output_item.added",
                "response.mcp_call.in_progress",
                "response.mcp_call_arguments.delta",
                "response.mcp_call_arguments.done",
                "response.mcp_call.completed",
                "response.output_item.done",
            ]
        assert message_text(output[2]).strip() == "20 + 22 = 42."

        sent = assert_sent_as_recorded(stack, streamed=streamed)
        assert len(sent) == 2
        (call,) = calls_fed_back(sent[1])
        assert call["call_id"] == request["id"]
        assert call["name"] == "mcp__counter__sum"
        assert outputs_fed_back(sent[1]) == {request["id"]: "42"}


@both_modes
def test_approval_declined_tells_the_model(counter_url: str, streamed: bool) -> None:
    scenario = "approval-decline"
    with mcp_gateway(cassette(scenario)) as stack:
        first = approval_request(stack.client, counter_url, scenario, streamed)
        request = first["output"][2]
        _, second = answer_approval(
            stack, counter_url, scenario, first, streamed, False, reason=cases.DECLINE_REASON
        )
        assert second["status"] == "completed"
        assert types(second["output"]) == ["reasoning", "message"]
        assert "declined" in message_text(second["output"][1])

        sent = assert_sent_as_recorded(stack, streamed=streamed)
        assert len(sent) == 2
        assert outputs_fed_back(sent[1]) == {request["id"]: cases.DECLINED_TEXT}
        assert cases.DECLINED_TEXT.startswith("The user declined this tool call.")


@both_modes
def test_continuation_sends_lowered_history_and_does_not_relist(
    counter_url: str, streamed: bool
) -> None:
    with mcp_gateway(cassette("continuation")) as stack:
        tools = [cases.counter_tool(counter_url, "continuation")]
        _, first = respond(stack.client, streamed, input=cases.PROMPTS["continuation"], tools=tools)
        assert types(first["output"]) == [
            "mcp_list_tools",
            "reasoning",
            "mcp_call",
            "reasoning",
            "message",
        ]
        add = first["output"][2]
        assert_mcp_call(add, "sum", {"a": 20, "b": 22}, output="42")

        events, second = respond(
            stack.client,
            streamed,
            previous_response_id=first["id"],
            input=cases.PROMPTS["continuation-2"],
            tools=tools,
        )
        assert second["status"] == "completed"
        assert types(second["output"]) == ["reasoning", "mcp_call", "reasoning", "message"]
        assert "mcp_list_tools" not in {e.get("item", {}).get("type") for e in events}
        assert not [e for e in events if e["type"].startswith("response.mcp_list_tools")]
        assert_mcp_call(second["output"][1], "echo", {"message": "42"}, output="42")

        sent = assert_sent_as_recorded(stack, streamed=streamed)
        assert len(sent) == 4
        history = sent[2]["input"]
        # The first response's MCP call, lowered: a function_call and its output under the
        # mcp_call item's id; no listing.
        assert "mcp_list_tools" not in types(history)
        (lowered,) = calls_fed_back(sent[2])
        assert lowered == {
            "type": "function_call",
            "call_id": add["id"],
            "name": "mcp__counter__sum",
            "arguments": add["arguments"],
            "status": "completed",
        }
        assert outputs_fed_back(sent[2]) == {add["id"]: "42"}
        assert history[-1]["role"] == "user"
        assert [t["name"] for t in sent[2]["tools"]] == counter_tools("continuation")


# ----------------------------------------------------------------------------- forced tool_choice


@pytest.mark.parametrize("scenario", sorted(cases.TOOL_CHOICES))
def test_forced_tool_choice_applies_to_the_first_round_only(
    counter_url: str, scenario: str
) -> None:
    choice, upstream_choice = cases.TOOL_CHOICES[scenario]
    with mcp_gateway(cassette(scenario)) as stack:
        tools = [cases.counter_tool(counter_url, scenario)]
        _, final = stream(
            stack.client, input=cases.PROMPTS[scenario], tools=tools, tool_choice=choice
        )
        output = final["output"]
        assert types(output) == ["mcp_list_tools", "mcp_call", "reasoning", "message"]
        assert_mcp_call(output[1], "sum", {"a": 20, "b": 22}, output="42")
        sent = [r["body"] for r in stack.received()]
        assert [body["tool_choice"] for body in sent] == [upstream_choice, "auto"]
        assert_sent_as_recorded(stack, streamed=True)


# ----------------------------------------------------------------------------- server-everything


def test_server_everything_lists_and_echoes(everything_url: str) -> None:
    with mcp_gateway(cassette("everything-echo")) as stack:
        tools = [cases.everything_tool(everything_url)]
        _, final = stream(stack.client, input=cases.PROMPTS["everything-echo"], tools=tools)
        output = final["output"]
        assert final["status"] == "completed"
        assert types(output) == ["mcp_list_tools", "reasoning", "mcp_call", "reasoning", "message"]
        listing = output[0]
        assert listing["server_label"] == cases.EVERYTHING
        names = [tool["name"] for tool in listing["tools"]]
        assert "echo" in names
        assert len(names) == len(set(names)) > 1
        call = output[2]
        assert call["server_label"] == cases.EVERYTHING
        assert call["name"] == "echo"
        assert call["status"] == "completed"
        assert call["output"] == "Echo: hello from respgate"

        sent = assert_sent_as_recorded(stack, streamed=True)
        # Every listed tool is offered to the model, under its upstream name.
        assert [t["name"] for t in sent[0]["tools"]] == [f"mcp__everything__{n}" for n in names]
        (echo,) = model_calls(stack.cassette.turns[0])
        assert outputs_fed_back(sent[1]) == {echo["call_id"]: "Echo: hello from respgate"}


# ----------------------------------------------------------------------------- MCP credentials


def test_mcp_headers_reach_the_server_and_are_not_stored(counter_url: str) -> None:
    with mcp_gateway(cassette("mcp-headers")) as stack:
        tool = cases.counter_tool(
            counter_url,
            "mcp-headers",
            headers=cases.MCP_HEADERS,
            authorization=cases.MCP_AUTHORIZATION,
        )
        _, final = stream(stack.client, input=cases.PROMPTS["mcp-headers"], tools=[tool])
        output = final["output"]
        assert types(output) == ["mcp_list_tools", "reasoning", "mcp_call", "reasoning", "message"]
        call = output[2]
        assert call["name"] == "whoami" and call["status"] == "completed"
        assert json.loads(call["output"]) == json.loads(cases.WHOAMI_OUTPUT)
        # The response (as returned and as stored) keeps the tool without its credentials.
        (returned,) = final["tools"]
        assert returned["type"] == "mcp" and returned["server_label"] == cases.COUNTER
        assert returned["server_url"] == counter_url
        assert returned.get("headers") is None and returned.get("authorization") is None

        sent = assert_sent_as_recorded(stack, streamed=True)
        (whoami,) = model_calls(stack.cassette.turns[0])
        assert outputs_fed_back(sent[1]) == {whoami["call_id"]: cases.WHOAMI_OUTPUT}
        for request in stack.received():
            headers = {k.lower(): v for k, v in request["headers"].items()}
            # Neither the MCP's credential nor the client's key: no upstream key is configured
            # (the client's own goes only to an upstream with forward_client_key).
            assert "authorization" not in headers
            assert "x-test" not in headers
            assert all(t["type"] == "function" for t in request["body"]["tools"])
