"""A gateway process killed with SIGKILL in the middle of a background job: another gateway on
the same database takes the job over once the lease lapses and finishes it, once. The killed
gateway is a real ``respgate serve`` process; the upstream a real socket that holds the first
answer until the kill."""

from __future__ import annotations

import asyncio
import os
import signal
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import openai
import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from app.main import create_app
from app.settings import Settings
from app.store.migrate import upgrade_to_head
from tests.background.test_background_api import wait_for_status
from tests.fakes import message
from tests.helpers import gateway_process, in_process, openai_client, responses_app, serve_in_thread
from tests.postgres import run_in_thread, throwaway_database

ROOT = Path(__file__).resolve().parents[2]
LEASE = 1.0


class HeldUpstream:
    """A Responses server whose first inference request waits until ``release``; every
    request is counted."""

    def __init__(self) -> None:
        self.requests = 0
        self.first_arrived = threading.Event()
        self.released = threading.Event()

    def app(self) -> Starlette:
        async def infer(request: Request) -> Response:
            await request.json()
            self.requests += 1
            if self.requests == 1:
                self.first_arrived.set()
                await asyncio.to_thread(self.released.wait, 60)
            return JSONResponse(
                {"object": "response", "status": "completed", "output": [message("done")]}
            )

        return responses_app(infer)


def killable_config(tmp_path: Path, upstream: str, database: str) -> Path:
    config = tmp_path / "killed.toml"
    config.write_text(
        f'upstream_url = "{upstream}"\ndatabase_url = "{database}"\n'
        f'data_dir = "{tmp_path / "data"}"\nbackground_lease_seconds = {LEASE}\n'
    )
    return config


@pytest.fixture
def postgres_url() -> Iterator[str]:
    """A throwaway PostgreSQL database at the head revision (skips without PostgreSQL): two
    gateway processes share a PostgreSQL database, not an SQLite file."""
    with throwaway_database("respgate_kill") as url:
        run_in_thread(lambda: upgrade_to_head(url))
        yield url


def test_a_job_of_a_killed_gateway_is_finished_by_another(
    postgres_url: str, tmp_path: Path
) -> None:
    database_url = postgres_url
    held = HeldUpstream()
    with serve_in_thread(held.app()) as upstream_url:
        config = killable_config(tmp_path, upstream_url, database_url)
        with gateway_process(config) as (url, proc):
            client = openai.OpenAI(base_url=f"{url}/v1", api_key="sk-test", max_retries=0)
            queued = client.responses.create(model="m", input="hi", background=True)
            assert queued.status == "queued"
            assert held.first_arrived.wait(30)  # the job is running in the process
            os.kill(proc.pid, signal.SIGKILL)
        held.released.set()
        time.sleep(LEASE * 1.5)  # the dead owner's lease lapses
        settings = Settings(
            upstream_url=upstream_url,
            database_url=database_url,
            data_dir=tmp_path / "data",
            background_lease_seconds=LEASE,
        )
        with in_process(create_app(settings)) as http:
            survivor = openai_client(http)
            done = wait_for_status(survivor, queued.id, {"completed", "failed"})
    assert done.status == "completed", done
    assert [item.type for item in done.output] == ["message"]
    assert held.requests == 2  # the killed run's request, then the takeover's: no more
