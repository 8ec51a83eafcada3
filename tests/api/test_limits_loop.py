"""The ``[limits]`` of the tool loop, end to end: the official ``openai`` SDK -> the gateway (in
process) -> a scripted upstream that records what it was sent, with the gateway running the
model's calls on the real counter MCP server (``tests/mcp_servers/counter.py``).

- gateway calls per round: the extra calls are not run and the model is told;
- one tool result's size: cut with a note, for the model and in the item (stored the same);
- the whole-request deadline: a slow tool, a slow upstream (streamed and not), a background
  response under its own deadline; each ends ``incomplete`` with reason ``request_timeout``.
"""

from __future__ import annotations

import asyncio
import copy
import time
from collections.abc import AsyncIterator, Iterator, Mapping
from typing import Any

import openai
import pytest

from app.main import create_app
from app.protocol.json_types import JsonObject
from app.settings import Settings
from tests.fakes import FakeUpstream, ScriptedUpstream, function_call, message, round_events
from tests.helpers import in_process, local_egress, openai_client, without_parsed
from tests.lifecycle import assert_lifecycle


def mcp_tool(url: str) -> JsonObject:
    return {
        "type": "mcp",
        "server_label": "counter",
        "server_url": url,
        "require_approval": "never",
    }


@pytest.fixture
def gateway() -> Iterator[Any]:
    """``gateway(upstream, **limits)``: the openai SDK on an in-process gateway."""
    stack: list[Any] = []

    def start(upstream: Any, **limits: Any) -> openai.OpenAI:
        settings = Settings(limits=limits, egress=local_egress())
        context = in_process(create_app(settings, upstream=upstream))
        stack.append(context)
        return openai_client(context.__enter__())

    yield start
    for context in reversed(stack):
        context.__exit__(None, None, None)


def dump(model: Any) -> JsonObject:
    data: JsonObject = model.model_dump(mode="json", warnings=False)
    return data


def error_text(call: JsonObject) -> str:
    """The text of an ``mcp_call``'s error (OpenAI's ``mcp_tool_execution_error`` shape)."""
    assert call["error"]["type"] == "mcp_tool_execution_error"
    return str(call["error"]["content"][0]["text"])


def outputs_sent(request: JsonObject) -> list[str]:
    """The ``function_call_output`` texts of one upstream request, in order."""
    return [i["output"] for i in request["input"] if i.get("type") == "function_call_output"]


# ----------------------------------------------------------------------------- calls per round


@pytest.mark.parametrize("stream", [False, True])
def test_calls_over_the_per_round_limit_are_not_run_and_the_model_is_told(
    gateway: Any, counter_url: str, stream: bool
) -> None:
    calls = [function_call("mcp__counter__sum", f'{{"a": {n}, "b": 1}}') for n in range(3)]
    upstream = ScriptedUpstream([calls, [message("done")]])
    client = gateway(upstream, max_tool_calls_per_round=2)
    kwargs: Any = {"model": "m", "input": "add", "tools": [mcp_tool(counter_url)]}
    if stream:
        with client.responses.stream(**kwargs) as events:
            seen = [dump(e) for e in events]
        response = without_parsed(assert_lifecycle(seen))
    else:
        response = dump(client.responses.create(**kwargs))
    assert response["status"] == "completed"
    mcp_calls = [i for i in response["output"] if i["type"] == "mcp_call"]
    assert [c.get("output") for c in mcp_calls] == ["1", "2", None]
    assert [c["status"] for c in mcp_calls] == ["completed", "completed", "incomplete"]
    assert error_text(mcp_calls[2]) == "not run: the gateway runs at most 2 tool calls per round"
    # The model read the refusal in the next round; the server ran two calls.
    assert outputs_sent(upstream.requests[1]) == [
        "1",
        "2",
        "Error: not run: the gateway runs at most 2 tool calls per round",
    ]
    assert response["output"][-1]["content"][0]["text"] == "done"
    assert dump(client.responses.retrieve(response["id"])) == response


# ----------------------------------------------------------------------------- result size


@pytest.mark.parametrize("stream", [False, True])
def test_a_big_tool_result_is_cut_with_a_note_for_the_model_the_client_and_the_store(
    gateway: Any, counter_url: str, stream: bool
) -> None:
    big = "é" * 3000  # 6,000 bytes: cut at 1,024 bytes, on a character boundary
    arguments = f'{{"message": "{big}"}}'
    upstream = ScriptedUpstream([[function_call("mcp__counter__echo", arguments)], [message("ok")]])
    client = gateway(upstream, max_tool_result_bytes=1024)
    kwargs: Any = {"model": "m", "input": "echo", "tools": [mcp_tool(counter_url)]}
    if stream:
        with client.responses.stream(**kwargs) as events:
            seen = [dump(e) for e in events]
        response = without_parsed(assert_lifecycle(seen))
    else:
        response = dump(client.responses.create(**kwargs))
    note = (
        "\n\n[respgate: this tool result was 6000 bytes; only its first 1024 bytes are shown "
        "(the gateway's limit on one tool result).]"
    )
    [sent] = outputs_sent(upstream.requests[1])
    assert sent == "é" * 512 + note
    [call] = [i for i in response["output"] if i["type"] == "mcp_call"]
    assert call["output"] == "é" * 512 + note
    assert call["arguments"] == arguments  # what the model sent is never cut
    assert dump(client.responses.retrieve(response["id"])) == response


# ----------------------------------------------------------------------------- deadline


@pytest.mark.parametrize("stream", [False, True])
def test_a_slow_tool_ends_the_response_incomplete_at_the_deadline(
    gateway: Any, counter_url: str, stream: bool
) -> None:
    upstream = ScriptedUpstream(
        [[function_call("mcp__counter__sleep", '{"seconds": 30}')], [message("never")]]
    )
    client = gateway(upstream, request_timeout=1.0)
    kwargs: Any = {"model": "m", "input": "wait", "tools": [mcp_tool(counter_url)]}
    if stream:
        with client.responses.stream(**kwargs) as events:
            seen = [dump(e) for e in events]
        response = without_parsed(assert_lifecycle(seen))
        assert seen[-1]["type"] == "response.incomplete"
    else:
        response = dump(client.responses.create(**kwargs))
    assert response["status"] == "incomplete"
    assert response["incomplete_details"] == {"reason": "request_timeout"}
    [call] = [i for i in response["output"] if i["type"] == "mcp_call"]
    assert call["status"] == "incomplete"
    assert error_text(call) == "not finished: the request reached its time limit of 1 s"
    assert len(upstream.requests) == 1  # no round after the deadline
    stored = dump(client.responses.retrieve(response["id"]))
    assert stored == response


class StallingStream:
    """An upstream stream that sends the start of a message, then nothing for a long time."""

    def __init__(self, events: list[JsonObject]) -> None:
        self.events = events
        self.closed = False

    def __aiter__(self) -> AsyncIterator[JsonObject]:
        return self._events()

    async def _events(self) -> AsyncIterator[JsonObject]:
        for event in self.events:
            yield copy.deepcopy(event)
        await asyncio.sleep(60)

    async def aclose(self) -> None:
        self.closed = True


class StallingUpstream(FakeUpstream):
    """Streams half a message then stalls; a JSON answer never comes in time."""

    async def create_response(self, body: JsonObject, headers: Mapping[str, str]) -> JsonObject:
        self.requests.append(body)
        await asyncio.sleep(60)
        raise AssertionError("the deadline did not cut the round")

    async def stream_response(self, body: JsonObject, headers: Mapping[str, str]) -> Any:
        self.requests.append(body)
        head = [e for e in round_events([message("Hello world")]) if "delta" not in e][:3]
        delta = {**round_events([message("Hello world")])[3], "delta": "Hel"}
        stream = StallingStream([*head, delta])
        self.streams.append(stream)
        return stream


def test_a_slow_upstream_stream_ends_incomplete_with_what_it_sent(gateway: Any) -> None:
    upstream = StallingUpstream()
    client = gateway(upstream, request_timeout=0.5)
    with client.responses.stream(model="m", input="hi") as events:
        seen = [dump(e) for e in events]
    response = without_parsed(assert_lifecycle(seen))
    assert response["status"] == "incomplete"
    assert response["incomplete_details"] == {"reason": "request_timeout"}
    [item] = response["output"]
    assert item["status"] == "incomplete"
    assert item["content"][0]["text"] == "Hel"
    assert upstream.streams[0].closed
    assert dump(client.responses.retrieve(response["id"])) == response


def test_a_slow_upstream_json_answer_is_an_incomplete_response(gateway: Any) -> None:
    client = gateway(StallingUpstream(), request_timeout=0.5)
    response = client.responses.create(model="m", input="hi")
    assert response.status == "incomplete"
    assert dump(response)["incomplete_details"] == {"reason": "request_timeout"}
    assert response.output == []


def test_a_background_response_has_its_own_deadline(gateway: Any) -> None:
    upstream = StallingUpstream()
    # The foreground deadline is long; the background one cuts the stalled stream.
    client = gateway(upstream, request_timeout=600, background_timeout=0.5)
    queued = client.responses.create(model="m", input="hi", background=True)
    response = queued
    for _ in range(500):
        response = client.responses.retrieve(queued.id)
        if response.status not in ("queued", "in_progress"):
            break
        time.sleep(0.02)
    assert response.status == "incomplete"
    assert dump(response)["incomplete_details"] == {"reason": "request_timeout"}
    assert response.output[0].content[0].text == "Hel"  # type: ignore[union-attr]
