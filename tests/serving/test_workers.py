"""``respgate serve --workers N``: N real processes on one port and one PostgreSQL database,
stopped together by one SIGTERM; refused on SQLite."""

from __future__ import annotations

import functools
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from tests.helpers import ROOT, gateway_process, serve_in_thread
from tests.postgres import run_in_thread
from tests.serving.support import DEADLINE, HeldUpstream, exit_status, job_row, write_config


def owner_pid(owner: str) -> int:
    """The pid in a job's owner (``host:pid:suffix``, core.background.process_owner)."""
    return int(owner.split(":")[-2])


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def test_two_workers_serve_one_port_and_stop_together(postgres_url: str, tmp_path: Path) -> None:
    upstream = HeldUpstream()
    upstream.release.set()  # nothing held: the jobs run through
    with serve_in_thread(upstream.app()) as upstream_url:
        config = write_config(tmp_path, upstream_url, database_url=postgres_url)
        with gateway_process(config, "--workers", "2") as (url, proc):
            pids: set[int] = set()
            for _ in range(200):  # a new connection each time: the kernel picks the worker
                with httpx.Client(timeout=DEADLINE) as http:
                    created = http.post(
                        f"{url}/v1/responses",
                        json={"model": "m", "input": "hi", "background": True},
                    )
                assert created.status_code == 200, created.text
                row = run_in_thread(functools.partial(job_row, postgres_url, created.json()["id"]))
                pids.add(owner_pid(row.owner))
                if len(pids) == 2:
                    break
            assert len(pids) == 2, pids
            assert proc.pid not in pids  # the supervisor serves nothing itself
            os.kill(proc.pid, signal.SIGTERM)
            assert exit_status(proc) == 0
        deadline = time.monotonic() + DEADLINE
        while any(alive(pid) for pid in pids) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not any(alive(pid) for pid in pids)


@pytest.mark.parametrize("how", ["flag", "env"])
def test_several_workers_on_sqlite_are_refused(tmp_path: Path, how: str) -> None:
    argv = [sys.executable, "-m", "app.cli", "serve", "--data-dir", str(tmp_path), "--port", "0"]
    env = {**os.environ, "RESPGATE_WORKERS": "2"}
    env.pop("RESPGATE_DATABASE_URL", None)
    if how == "flag":
        argv += ["--workers", "2"]
        env.pop("RESPGATE_WORKERS")
    done = subprocess.run(argv, cwd=ROOT, env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 2
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    assert lines[0].startswith("respgate: --workers 2 needs PostgreSQL")
    assert "--database-url" in lines[0]
    assert not (tmp_path / "respgate.db").exists()  # refused before anything was created
