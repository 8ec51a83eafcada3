"""A real ``respgate serve`` stopped with SIGTERM: it refuses new connections at once, lets an
open stream finish within the drain timeout (or ends it with ``response.failed`` when the
timeout lapses), hands its background jobs back (lease released: another gateway on the same
PostgreSQL takes them over at its next sweep) and exits 0."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest

from app.main import create_app
from app.settings import Settings
from tests.background.test_background_api import wait_for_status
from tests.helpers import gateway_process, in_process, openai_client, serve_in_thread
from tests.postgres import run_in_thread
from tests.serving.support import (
    DEADLINE,
    HeldUpstream,
    StreamReader,
    exit_status,
    job_row,
    open_streams,
    write_config,
)


def refuses_connections(url: str) -> bool:
    """Whether a new connection to ``url`` is refused, waiting up to DEADLINE for it."""
    deadline = time.monotonic() + DEADLINE
    while time.monotonic() < deadline:
        try:
            httpx.get(f"{url}/health", timeout=2)
        except httpx.ConnectError:
            return True
        except httpx.TransportError:
            pass
        time.sleep(0.05)
    return False


@pytest.mark.parametrize("workers", [1, 2])
def test_sigterm_lets_an_open_stream_finish_and_refuses_new_connections(
    tmp_path: Path, workers: int, request: pytest.FixtureRequest
) -> None:
    """With ``--workers 2`` the supervisor gets the SIGTERM and forwards it to its workers."""
    upstream = HeldUpstream()
    keys: dict[str, Any] = {"drain_timeout_seconds": DEADLINE}
    if workers > 1:
        keys["database_url"] = request.getfixturevalue("postgres_url")
    with serve_in_thread(upstream.app()) as upstream_url:
        config = write_config(tmp_path, upstream_url, **keys)
        with gateway_process(config, "--workers", str(workers)) as (url, proc):
            reader = StreamReader(url)
            reader.start()
            assert upstream.held.wait(DEADLINE)
            os.kill(proc.pid, signal.SIGTERM)
            assert refuses_connections(url)  # while the stream is still open
            assert proc.poll() is None and reader.is_alive()
            upstream.release.set()
            reader.join(DEADLINE)
            assert exit_status(proc) == 0
    assert reader.error is None, reader.error
    assert reader.types[0] == "response.created"
    assert reader.types[-1] == "response.completed"
    assert reader.events[-1].response.output_text == "hello from a slow stream"


def test_a_stream_still_open_when_the_drain_lapses_ends_failed(tmp_path: Path) -> None:
    upstream = HeldUpstream()
    with serve_in_thread(upstream.app()) as upstream_url:
        config = write_config(tmp_path, upstream_url, drain_timeout_seconds=1)
        with gateway_process(config) as (url, proc):
            reader = StreamReader(url)
            reader.start()
            assert upstream.held.wait(DEADLINE)
            os.kill(proc.pid, signal.SIGTERM)
            reader.join(DEADLINE)  # the upstream is never released: the drain timeout cuts
            assert exit_status(proc) == 0
        upstream.release.set()
    assert reader.error is None, reader.error
    assert reader.types[-2:] == ["error", "response.failed"]
    assert reader.events[-2].code == "server_shutting_down"
    assert reader.events[-1].response.status == "failed"


def test_a_second_signal_cuts_open_streams_at_once(tmp_path: Path) -> None:
    upstream = HeldUpstream()
    with serve_in_thread(upstream.app()) as upstream_url:
        config = write_config(tmp_path, upstream_url, drain_timeout_seconds=3600)
        with gateway_process(config) as (url, proc):
            reader = StreamReader(url)
            reader.start()
            assert upstream.held.wait(DEADLINE)
            os.kill(proc.pid, signal.SIGTERM)
            assert refuses_connections(url)
            os.kill(proc.pid, signal.SIGINT)  # the drain of an hour is not waited for
            reader.join(DEADLINE)
            assert exit_status(proc) == 0
        upstream.release.set()
    assert reader.types[-2:] == ["error", "response.failed"]


def test_sigterm_hands_a_running_background_job_to_another_gateway(
    postgres_url: str, tmp_path: Path
) -> None:
    upstream = HeldUpstream(hold_json=True)
    lease = 120.0  # long: only the release on shutdown lets the other gateway take it early
    with serve_in_thread(upstream.app()) as upstream_url:
        config = write_config(
            tmp_path,
            upstream_url,
            database_url=postgres_url,
            background_lease_seconds=lease,
            drain_timeout_seconds=DEADLINE,
        )
        with gateway_process(config) as (url, proc):
            client = openai.OpenAI(base_url=f"{url}/v1", api_key="sk-test", max_retries=0)
            queued = client.responses.create(model="m", input="hi", background=True)
            assert upstream.held.wait(DEADLINE)  # the job runs in the process
            running = run_in_thread(lambda: job_row(postgres_url, queued.id))
            assert running.lease_until / 1000 > time.time() + lease / 2
            os.kill(proc.pid, signal.SIGTERM)
            assert exit_status(proc) == 0
        released = run_in_thread(lambda: job_row(postgres_url, queued.id))
        assert released.status in ("queued", "in_progress")
        assert released.owner == running.owner
        assert released.lease_until / 1000 < time.time()  # handed back, not held for 120 s
        upstream.release.set()
        settings = Settings(
            upstream_url=upstream_url,
            database_url=postgres_url,
            data_dir=tmp_path / "data",
            background_lease_seconds=lease,
        )
        with in_process(create_app(settings)) as http:  # its start-up sweep takes the job
            done = wait_for_status(openai_client(http), queued.id, {"completed", "failed"})
        final = run_in_thread(lambda: job_row(postgres_url, queued.id))
    assert done.status == "completed", done
    assert final.owner != running.owner
    assert upstream.requests == 2  # the stopped run's request, then the takeover's


@pytest.mark.parametrize("workers", [1, 2])
def test_sigterm_lets_32_open_streams_finish(
    tmp_path: Path, workers: int, request: pytest.FixtureRequest
) -> None:
    """Issue 18's trial: SIGTERM with 32 open streams cut all of them at once. Each finishes."""
    upstream = HeldUpstream()
    keys: dict[str, Any] = {"drain_timeout_seconds": DEADLINE}
    if workers > 1:
        keys["database_url"] = request.getfixturevalue("postgres_url")
    with serve_in_thread(upstream.app()) as upstream_url:
        config = write_config(tmp_path, upstream_url, **keys)
        with gateway_process(config, "--workers", str(workers)) as (url, proc):
            readers = open_streams(url, 32)
            os.kill(proc.pid, signal.SIGTERM)
            assert refuses_connections(url)
            assert proc.poll() is None and all(reader.is_alive() for reader in readers)
            upstream.release.set()
            for reader in readers:
                reader.join(DEADLINE)
            assert exit_status(proc) == 0
    assert [reader.error for reader in readers] == [None] * 32
    assert all(reader.types[-1] == "response.completed" for reader in readers)
    assert all(r.events[-1].response.output_text == "hello from a slow stream" for r in readers)


def test_32_streams_still_open_when_the_drain_lapses_all_end_failed(tmp_path: Path) -> None:
    upstream = HeldUpstream()
    with serve_in_thread(upstream.app()) as upstream_url:
        config = write_config(tmp_path, upstream_url, drain_timeout_seconds=1)
        with gateway_process(config) as (url, proc):
            readers = open_streams(url, 32)
            os.kill(proc.pid, signal.SIGTERM)
            for reader in readers:
                reader.join(DEADLINE)  # the upstream is never released: the drain timeout cuts
            assert exit_status(proc) == 0
        upstream.release.set()
    assert [reader.error for reader in readers] == [None] * 32
    assert all(reader.types[-2:] == ["error", "response.failed"] for reader in readers)
    assert all(reader.events[-2].code == "server_shutting_down" for reader in readers)
