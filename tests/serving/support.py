"""For the tests of real gateway processes stopped mid-request: a scripted upstream that holds
its answers until released, the gateway's configuration file, its job records."""

from __future__ import annotations

import asyncio
import json
import subprocess
import threading
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import openai
import orjson
from sqlalchemy import text
from sqlalchemy.ext.asyncio import create_async_engine
from sqlalchemy.pool import NullPool
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse

from tests.fakes import message, round_events, text_response
from tests.helpers import responses_app

# Generous: the tests prove the mechanism (the stream finished, the process exited), not a time.
DEADLINE = 60.0


class HeldUpstream:
    """A Responses server. A stream sends its first half of events, then waits for ``release``
    before the rest. A JSON request is answered at once, or, with ``hold_json``, after
    ``release``. ``held`` is set once a request waits; every request is counted."""

    def __init__(self, *, hold_json: bool = False) -> None:
        self.hold_json = hold_json
        self.requests = 0
        self.held = threading.Event()
        self.release = threading.Event()

    async def _wait_release(self) -> None:
        await asyncio.to_thread(self.release.wait, 120)

    def app(self) -> Starlette:
        async def infer(request: Request) -> Response:
            body = await request.json()
            self.requests += 1
            if body.get("stream"):
                return StreamingResponse(self._stream(), media_type="text/event-stream")
            if self.hold_json:
                self.held.set()
                await self._wait_release()
            return JSONResponse(text_response("done"))

        return responses_app(infer)

    async def _stream(self) -> AsyncIterator[bytes]:
        events = round_events([message("hello from a slow stream")])
        half = len(events) // 2
        for index, event in enumerate(events):
            if index == half:
                self.held.set()
                await self._wait_release()
            yield b"event: " + event["type"].encode() + b"\ndata: " + orjson.dumps(event) + b"\n\n"


def write_config(tmp_path: Path, upstream: str, **keys: Any) -> Path:
    """A TOML file with ``upstream_url``, ``data_dir`` and ``keys``."""
    keys = {"upstream_url": upstream, "data_dir": str(tmp_path / "data"), **keys}
    config = tmp_path / "gateway.toml"
    config.write_text("".join(f"{key} = {json.dumps(value)}\n" for key, value in keys.items()))
    return config


def exit_status(proc: subprocess.Popen[bytes]) -> int:
    return proc.wait(timeout=DEADLINE)


async def job_row(database_url: str, response_id: str) -> Any:
    """The status, owner and lease_until (ms) of a background job, read from the database."""
    engine = create_async_engine(database_url, poolclass=NullPool)
    try:
        async with engine.connect() as connection:
            result = await connection.execute(
                text(
                    "SELECT status, owner, lease_until FROM background_jobs WHERE response_id = :id"
                ),
                {"id": response_id},
            )
            return result.one()
    finally:
        await engine.dispose()


class StreamReader(threading.Thread):
    """Reads one streamed create through the openai SDK, keeping the event types."""

    def __init__(self, url: str) -> None:
        super().__init__(daemon=True)
        self.url = url
        self.types: list[str] = []
        self.events: list[Any] = []
        self.error: BaseException | None = None

    def run(self) -> None:
        client = openai.OpenAI(base_url=f"{self.url}/v1", api_key="sk-test", max_retries=0)
        try:
            with client.responses.create(model="m", input="hi", stream=True) as stream:
                for event in stream:
                    self.types.append(event.type)
                    self.events.append(event)
        except BaseException as exc:  # the test reports it
            self.error = exc


def open_streams(url: str, count: int) -> list[StreamReader]:
    """``count`` streams, each started (its first event read) and waiting for the upstream."""
    readers = [StreamReader(url) for _ in range(count)]
    for reader in readers:
        reader.start()
    deadline = time.monotonic() + DEADLINE
    while not all(reader.types for reader in readers) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert all(reader.types for reader in readers)
    return readers
