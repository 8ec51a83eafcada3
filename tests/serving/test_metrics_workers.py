"""``respgate serve --workers 2``: ``GET /metrics``, whichever worker answers it, sums every
worker's counts (prometheus-client's multi-process mode in a directory the supervisor makes and
removes)."""

from __future__ import annotations

import functools
import os
import signal
import tempfile
import time
from pathlib import Path

import httpx

from tests.api.metrics_support import parse_samples, total
from tests.helpers import gateway_process, serve_in_thread
from tests.postgres import run_in_thread
from tests.serving.support import DEADLINE, HeldUpstream, exit_status, job_row, write_config
from tests.serving.test_workers import owner_pid


def metrics_dirs() -> set[Path]:
    """The supervisors' metrics directories (``app.workers.metrics_directory``)."""
    return set(Path(tempfile.gettempdir()).glob("respgate-metrics-*"))


def scraped_posts(url: str, labels: dict[str, str]) -> float:
    with httpx.Client(timeout=DEADLINE) as http:
        reply = http.get(f"{url}/metrics")
    assert reply.status_code == 200, reply.text
    return total(parse_samples(reply.text), "respgate_http_requests_total", **labels)


def test_metrics_sum_every_worker(postgres_url: str, tmp_path: Path) -> None:
    before = metrics_dirs()
    upstream = HeldUpstream()
    upstream.release.set()
    with serve_in_thread(upstream.app()) as upstream_url:
        config = write_config(tmp_path, upstream_url, database_url=postgres_url)
        with gateway_process(config, "--workers", "2") as (url, proc):
            pids: set[int] = set()
            posted = 0
            while len(pids) < 2 and posted < 200:  # a new connection each: the kernel picks
                with httpx.Client(timeout=DEADLINE) as http:
                    created = http.post(
                        f"{url}/v1/responses",
                        json={"model": "m", "input": "hi", "background": True},
                    )
                assert created.status_code == 200, created.text
                posted += 1
                row = run_in_thread(functools.partial(job_row, postgres_url, created.json()["id"]))
                pids.add(owner_pid(row.owner))
            assert len(pids) == 2, pids  # both workers answered some of the requests
            # Whichever worker answers a scrape sums both (the other's values are flushed to
            # the shared directory every second): scrape until the count is whole, then again
            # on new connections, which both workers answer.
            post = {"route": "/v1/responses", "method": "POST", "status": "200"}
            counted = [scraped_posts(url, post) for _ in range(3)]
            for _ in range(200):
                if counted[-1] == posted:
                    break
                time.sleep(0.05)
                counted.append(scraped_posts(url, post))
            assert counted[-1] == posted, counted
            assert [scraped_posts(url, post) for _ in range(6)] == [posted] * 6
            made = metrics_dirs() - before
            assert made, "the supervisor made a metrics directory"
            os.kill(proc.pid, signal.SIGTERM)
            assert exit_status(proc) == 0
        assert not made & metrics_dirs()  # and removed it
