"""The Agents SDK's Responses WebSocket transport (``responses_websocket_session``) through the
gateway, on a real port, over a scripted upstream.

An agent with a function tool runs two model turns on one socket: the model calls the tool, the
SDK runs it and sends its output back, the model answers. With ``auto_previous_response_id`` and
``store: false`` the second turn continues from the connection's memory alone.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any

import pytest
from agents import (
    Agent,
    ModelSettings,
    function_tool,
    responses_websocket_session,
    set_tracing_disabled,
)

from app.main import create_app
from app.settings import Settings
from tests.fakes import MemoryResponseStore, ScriptedUpstream, function_call, message
from tests.helpers import serve_in_thread

MODEL = "test-model"

set_tracing_disabled(True)  # no trace export to api.openai.com


@function_tool
def weather(city: str) -> str:
    """The weather in a city."""
    return f"sunny in {city}"


@pytest.fixture
def gateway() -> Iterator[tuple[str, ScriptedUpstream, MemoryResponseStore]]:
    upstream = ScriptedUpstream(
        [
            [function_call("weather", '{"city": "Paris"}', call_id="call_w1")],
            [message("It is sunny in Paris.")],
        ]
    )
    store = MemoryResponseStore()
    app = create_app(Settings(), upstream=upstream, store=store)
    with serve_in_thread(app) as url:
        yield url, upstream, store


async def _run(url: str, **run_kwargs: Any) -> str:
    agent = Agent(
        name="forecaster",
        instructions="Answer with the tool.",
        model=MODEL,
        tools=[weather],
        model_settings=ModelSettings(store=False),
    )
    async with responses_websocket_session(
        api_key="sk-test", base_url=f"{url}/v1", unknown_prefix_mode="model_id"
    ) as session:
        result = await session.run(agent, "Weather in Paris?", **run_kwargs)
    return str(result.final_output)


@pytest.mark.parametrize("chained", [False, True], ids=["full-history", "previous-response-id"])
def test_agents_websocket_tool_round_trip(
    gateway: tuple[str, ScriptedUpstream, MemoryResponseStore], chained: bool
) -> None:
    url, upstream, store = gateway
    answer = asyncio.run(_run(url, auto_previous_response_id=chained))
    assert answer == "It is sunny in Paris."
    assert len(upstream.requests) == 2
    second = upstream.requests[1]["input"]
    # Either way the upstream sees the whole exchange: the SDK resent it, or the connection
    # remembered it (store is false: nothing was stored).
    assert [item.get("type") for item in second][-2:] == ["function_call", "function_call_output"]
    assert second[-1]["output"] == "sunny in Paris"
    first = second[0]["content"]
    assert (first if isinstance(first, str) else first[0]["text"]) == "Weather in Paris?"
    assert store.responses == {}
