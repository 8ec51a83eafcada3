"""Two real ``respgate serve`` processes on one PostgreSQL database, with a lease of 2 minutes:
a background response started on A is retrieved, stream-resumed (``starting_after``) and
cancelled through B. The job signals (PostgreSQL ``LISTEN/NOTIFY``, or Redis pub/sub) carry
A's logged events to B's follower and B's cancel to A, which closes its upstream request at
once: before its first lease renewal (40 s in) could have told it."""

from __future__ import annotations

import asyncio
import json
import queue
import threading
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import openai
import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response, StreamingResponse

from app.store.migrate import upgrade_to_head
from tests.background.signal_transports import REDIS_URL, require_redis_sync
from tests.fakes import message, round_events
from tests.helpers import gateway_process, responses_app, serve_in_thread
from tests.postgres import run_in_thread, throwaway_database

LEASE = 120.0
WAIT = 30.0  # a generous bound against hangs, below the first renewal (LEASE / 3)


class DrippingServer:
    """A Responses server whose stream sends the opening of a message, then one text delta per
    string put in ``drips``, and never ends by itself; ``closed`` once its client went away."""

    def __init__(self) -> None:
        self.requests = 0
        self.drips: queue.Queue[str] = queue.Queue()
        self.opened = threading.Event()
        self.closed = threading.Event()
        events = round_events([message("hello")])
        self.opening, self.delta = events[:3], events[3]

    def app(self) -> Starlette:
        async def infer(request: Request) -> Response:
            await request.json()
            self.requests += 1
            return StreamingResponse(self._events(), media_type="text/event-stream")

        return responses_app(infer)

    async def _events(self) -> AsyncIterator[str]:
        try:
            for event in self.opening:
                yield _sse(event)
            self.opened.set()
            while True:
                try:
                    text = self.drips.get_nowait()
                except queue.Empty:
                    await asyncio.sleep(0.01)
                    continue
                yield _sse({**self.delta, "delta": text})
        finally:
            self.closed.set()


def _sse(event: dict[str, Any]) -> str:
    return f"event: {event['type']}\ndata: {json.dumps(event)}\n\n"


@pytest.fixture
def postgres_url() -> Iterator[str]:
    with throwaway_database("respgate_replicas") as url:
        run_in_thread(lambda: upgrade_to_head(url))
        yield url


def config(tmp_path: Path, name: str, upstream: str, database: str, signals: str) -> Path:
    path = tmp_path / f"{name}.toml"
    lines = [
        f'upstream_url = "{upstream}"',
        f'database_url = "{database}"',
        f'data_dir = "{tmp_path / name}"',
        f"background_lease_seconds = {LEASE}",
        f'job_signals = "{signals}"',
    ]
    if signals == "redis":
        lines.append(f'redis_url = "{REDIS_URL}"')
    path.write_text("\n".join(lines) + "\n")
    return path


def until(condition: Any, seconds: float = WAIT) -> None:
    deadline = time.monotonic() + seconds
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.01)


@pytest.mark.parametrize("signals", ["postgres", "redis"])
def test_a_job_on_one_gateway_is_followed_and_cancelled_through_another(
    postgres_url: str, tmp_path: Path, signals: str
) -> None:
    if signals == "redis":
        require_redis_sync()
    server = DrippingServer()
    with serve_in_thread(server.app()) as upstream:
        config_a = config(tmp_path, "a", upstream, postgres_url, signals)
        config_b = config(tmp_path, "b", upstream, postgres_url, signals)
        with gateway_process(config_a) as (url_a, _), gateway_process(config_b) as (url_b, _):
            a = openai.OpenAI(base_url=f"{url_a}/v1", api_key="sk-test", max_retries=0)
            b = openai.OpenAI(base_url=f"{url_b}/v1", api_key="sk-test", max_retries=0)
            queued = a.responses.create(model="m", input="hi", background=True)
            started = time.monotonic()
            assert server.opened.wait(WAIT)  # A runs it: the opening is on its way to the log
            assert b.responses.retrieve(queued.id).status in {"queued", "in_progress"}

            seen: list[dict[str, Any]] = []

            def follow() -> None:  # B's stream from event 2 on: resumed, then live
                stream = b.responses.retrieve(queued.id, stream=True, starting_after=1)
                seen.extend(event.model_dump() for event in stream)

            follower = threading.Thread(target=follow, daemon=True)
            follower.start()
            server.drips.put("he")
            until(lambda: any(e.get("delta") == "he" for e in seen))

            cancelled = b.responses.cancel(queued.id)
            assert cancelled.status == "cancelled"
            # A closed its upstream request on B's signal, before any renewal could tell it.
            assert server.closed.wait(max(0.0, LEASE / 3 - (time.monotonic() - started) - 1))
            follower.join(WAIT)
            assert not follower.is_alive()
            assert a.responses.retrieve(queued.id).status == "cancelled"

    assert seen[0]["sequence_number"] == 2
    assert [e["sequence_number"] for e in seen] == list(range(2, 2 + len(seen)))
    assert seen[-1]["type"] == "response.failed"
    assert seen[-1]["response"]["status"] == "cancelled"
    assert server.requests == 1  # B never ran it
