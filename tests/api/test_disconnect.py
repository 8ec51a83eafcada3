"""A client that leaves mid-stream makes the gateway drop its upstream request.

The upstream streams slowly and records when the gateway goes away; the test only bounds how
long it waits for that record (no wall-clock assertions).
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Iterator
from typing import Any

import httpx
import pytest
from starlette.requests import Request
from starlette.responses import Response

from app.protocol.json_types import JsonObject
from tests.api.upstreams import (
    UpstreamLog,
    build_upstream,
    closing_events,
    event_stream,
    opening_events,
    serve_gateway,
    sse_frame,
    stream_events,
    text_delta,
)
from tests.helpers import serve_in_thread
from tests.lifecycle import assert_lifecycle

DELTAS = 200
INTERVAL = 0.05


def _slow(log: UpstreamLog, *, silent_first: bool) -> Any:
    """Opening events, then one delta every ``INTERVAL`` s (or silence first, when asked)."""

    async def scenario(request: Request, body: JsonObject) -> Response:
        async def chunks() -> AsyncIterator[bytes]:
            try:
                if silent_first:
                    await asyncio.sleep(30)
                for event in opening_events("0"):
                    yield sse_frame(event)
                for number in range(1, DELTAS):
                    if await request.is_disconnected():
                        log.disconnected.set()
                        return
                    await asyncio.sleep(INTERVAL)
                    yield sse_frame(text_delta(f" {number}"))
                for event in closing_events(" ".join(str(n) for n in range(DELTAS))):
                    yield sse_frame(event)
                log.finished.set()
            except BaseException:  # CancelledError or GeneratorExit: the gateway went away
                log.disconnected.set()
                raise

        return event_stream(chunks())

    return scenario


@pytest.fixture
def upstream() -> Iterator[tuple[str, UpstreamLog]]:
    log = UpstreamLog()
    scenarios = {
        "slow": _slow(log, silent_first=False),
        "silent": _slow(log, silent_first=True),
    }
    app, _ = build_upstream(scenarios, log=log)
    with serve_in_thread(app) as url:
        yield url, log


@pytest.fixture
def gateway(upstream: tuple[str, UpstreamLog]) -> Iterator[str]:
    with serve_gateway(upstream[0]) as url:
        yield url


def _read_then_leave(gateway: str, model: str, stop_after: str, count: int) -> list[JsonObject]:
    """Stream from the gateway, close the connection after ``count`` events of a type."""
    seen: list[JsonObject] = []
    body = {"model": model, "input": "count slowly", "stream": True}
    with (
        httpx.Client(timeout=30) as client,
        client.stream("POST", f"{gateway}/v1/responses", json=body) as response,
    ):
        assert response.status_code == 200
        for line in response.iter_lines():
            if not line.startswith("data: "):
                continue
            seen.append(json.loads(line[len("data: ") :]))
            if sum(event["type"] == stop_after for event in seen) >= count:
                break
    return seen


def test_client_disconnect_mid_stream_cancels_upstream(
    gateway: str, upstream: tuple[str, UpstreamLog]
) -> None:
    log = upstream[1]
    seen = _read_then_leave(gateway, "slow", "response.output_text.delta", 3)
    assert [event["sequence_number"] for event in seen] == list(range(len(seen)))
    assert log.disconnected.wait(5), "the upstream never saw the gateway go away"
    assert not log.finished.is_set()
    assert len(log.posts()) == 1


def test_client_disconnect_while_upstream_is_silent_cancels_upstream(
    gateway: str, upstream: tuple[str, UpstreamLog]
) -> None:
    log = upstream[1]
    seen = _read_then_leave(gateway, "silent", "response.in_progress", 1)
    assert [event["type"] for event in seen] == ["response.created", "response.in_progress"]
    assert log.disconnected.wait(5), "the upstream never saw the gateway go away"
    assert not log.finished.is_set()


def test_gateway_serves_normally_after_a_client_left(
    gateway: str, upstream: tuple[str, UpstreamLog]
) -> None:
    log = upstream[1]
    _read_then_leave(gateway, "slow", "response.output_text.delta", 2)
    assert log.disconnected.wait(5)
    log.disconnected.clear()

    response = httpx.post(
        f"{gateway}/v1/responses", json={"model": "ok", "input": "hi", "stream": True}, timeout=30
    )
    assert response.status_code == 200
    final = assert_lifecycle(stream_events(response.text))
    assert final["status"] == "completed"
    assert final["output"][0]["content"][0]["text"] == "Hello"
    assert len(log.posts()) == 2
