"""How long a background job waits when the gateway process running it dies: two real
``respgate serve`` processes (A and B) on one PostgreSQL database; a background response is
started on A, whose upstream request is held; A is killed with SIGKILL; the figures are the
times from the kill until B's takeover request reaches the upstream and until the response
reads ``completed`` through B.

    python bench/takeover_bench.py                       # leases 2, 5 and 10 s, 3 kills each
    python bench/takeover_bench.py --leases 1,3 --kills 5

A takeover waits for the dead owner's lease to lapse (between 2/3 of a lease and a whole lease
after the kill: it is renewed every third of a lease, and here the kill comes right after the
job started, so about a whole lease) and for B's next sweep (every half lease): between one and
one and a half leases here. A process stopped with SIGTERM hands its jobs back at once instead.
Needs PostgreSQL (``RESPGATE_TEST_POSTGRES_URL``, the tests' default otherwise).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import signal
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import httpx
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from app.store.migrate import upgrade_to_head
from tests.fakes import message
from tests.helpers import gateway_process, responses_app, serve_in_thread
from tests.postgres import run_in_thread, throwaway_database


class HeldUpstream:
    """Holds every first request of a response until ``release``; notes when requests come."""

    def __init__(self) -> None:
        self.arrivals: list[float] = []
        self.first = threading.Event()
        self.second = threading.Event()
        self.released = threading.Event()

    def reset(self) -> None:
        self.arrivals.clear()
        self.first.clear()
        self.second.clear()
        self.released.clear()

    def app(self) -> Starlette:
        async def infer(request: Request) -> Response:
            await request.json()
            self.arrivals.append(time.monotonic())
            if len(self.arrivals) == 1:
                self.first.set()
                await asyncio.to_thread(self.released.wait, 120)
            else:
                self.second.set()
            return JSONResponse(
                {"object": "response", "status": "completed", "output": [message("done")]}
            )

        return responses_app(infer)


def config(folder: Path, name: str, upstream: str, database: str, lease: float) -> Path:
    path = folder / f"{name}.toml"
    path.write_text(
        f'upstream_url = "{upstream}"\ndatabase_url = "{database}"\n'
        f'data_dir = "{folder / name}"\nbackground_lease_seconds = {lease}\n'
    )
    return path


def one_kill(held: HeldUpstream, a_url: str, a_pid: int, b_url: str) -> tuple[float, float]:
    held.reset()
    queued = httpx.post(
        f"{a_url}/v1/responses", json={"model": "m", "input": "hi", "background": True}
    ).json()
    assert held.first.wait(30), "the job never reached the upstream"
    killed = time.monotonic()
    os.kill(a_pid, signal.SIGKILL)
    held.released.set()
    assert held.second.wait(120), "no takeover"
    taken = held.arrivals[1] - killed
    while True:
        status = httpx.get(f"{b_url}/v1/responses/{queued['id']}").json()["status"]
        if status not in {"queued", "in_progress"}:
            break
        time.sleep(0.02)
    assert status == "completed", status
    return taken, time.monotonic() - killed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--leases", default="2,5,10")
    parser.add_argument("--kills", type=int, default=3)
    args = parser.parse_args()
    held = HeldUpstream()
    rows = []
    with serve_in_thread(held.app()) as upstream, tempfile.TemporaryDirectory() as tmp:
        for lease in [float(v) for v in args.leases.split(",")]:
            with throwaway_database("respgate_takeover") as database:
                run_in_thread(lambda db=database: upgrade_to_head(db))
                folder = Path(tmp)
                b_conf = config(folder, "b", upstream, database, lease)
                taken, done = [], []
                with gateway_process(b_conf) as (b_url, _):
                    for _ in range(args.kills):
                        a_conf = config(folder, "a", upstream, database, lease)
                        with gateway_process(a_conf) as (a_url, a_proc):
                            t, d = one_kill(held, a_url, a_proc.pid, b_url)
                        taken.append(t)
                        done.append(d)
                rows.append((lease, taken, done))
    print("| lease (s) | kills | takeover after kill: median (min-max) s | completed after kill |")
    print("|---|---|---|---|")
    for lease, taken, done in rows:
        print(
            f"| {lease:g} | {len(taken)} | {statistics.median(taken):.2f} "
            f"({min(taken):.2f}-{max(taken):.2f}) | {statistics.median(done):.2f} |"
        )


if __name__ == "__main__":
    main()
