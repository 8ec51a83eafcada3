"""The long soak: tests/serving/soak.py's workload at any size, with figures.

    python bench/soak.py                                   # 150,000 requests, c=64, SQLite
    python bench/soak.py --requests 20000 --backend postgres
    python bench/soak.py --requests 5000 --concurrency 32 --workers 2 --backend postgres

A real ``respgate serve`` (``--workers N``: N processes) on SQLite in a temporary directory or on
a throwaway PostgreSQL database (``RESPGATE_TEST_POSTGRES_URL``, the tests' default otherwise),
in front of the soak's upstream run as a process of its own (uvicorn, ``--factory
tests.serving.soak:upstream_app``), so that the load generator (httpx, this process) shares no
interpreter with either. Mixed requests: JSON and streamed responses, continuations through
``previous_response_id`` and conversations, retrievals, deletes. Printed: throughput, latency,
the gateway's CPU per request, errors, what the upstream saw (continuations and wrong
histories), how many stored responses were retrieved whole afterwards, and whether the database
holds exactly those with none half-written. Exits 1 if anything that must hold did not.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from _harness import Server, running

from app.store.migrate import upgrade_to_head
from tests.helpers import free_port
from tests.postgres import run_in_thread, throwaway_database
from tests.serving.soak import soak
from tests.serving.support import write_config


@contextlib.contextmanager
def database(backend: str, directory: Path) -> Iterator[str]:
    if backend == "sqlite":
        yield f"sqlite+aiosqlite:///{directory / 'soak.db'}"
        return
    with throwaway_database("respgate_soak") as url:
        run_in_thread(lambda: upgrade_to_head(url))
        yield url


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--requests", type=int, default=150_000)
    parser.add_argument("--concurrency", type=int, default=64)
    parser.add_argument("--backend", choices=["sqlite", "postgres"], default="sqlite")
    parser.add_argument("--workers", type=int, default=1, help="respgate serve --workers")
    args = parser.parse_args()

    directory = Path(tempfile.mkdtemp(prefix="respgate-soak-"))
    upstream_port, gateway_port = free_port(), free_port()
    upstream = Server(
        "upstream",
        [
            sys.executable, "-m", "uvicorn", "--factory", "tests.serving.soak:upstream_app",
            "--port", str(upstream_port), "--log-level", "warning", "--no-access-log",
        ],
        upstream_port,
    )  # fmt: skip
    with database(args.backend, directory) as database_url:
        config = write_config(directory, upstream.base, database_url=database_url)
        gateway = Server(
            "gateway",
            [
                sys.executable, "-m", "app.cli", "serve", "--config", str(config),
                "--port", str(gateway_port), "--workers", str(args.workers),
            ],
            gateway_port,
        )  # fmt: skip
        with running([upstream, gateway]):
            cpu_before = gateway.cpu()
            report = asyncio.run(
                soak(gateway.base, upstream.base, database_url, args.requests, args.concurrency)
            )
            cpu = gateway.cpu() - cpu_before
    print(
        f"backend {args.backend}, concurrency {args.concurrency}, workers {args.workers}: "
        f"{report.figures()}; gateway CPU {cpu / max(report.requests, 1) * 1e6:.0f} us/request "
        f"(load and verification)"
    )
    for example in report.examples + list(report.upstream["examples"]):
        print(f"  e.g. {example}")
    intact = not report.errors and not report.upstream["bad_history"] and not report.database
    return 0 if intact else 1


if __name__ == "__main__":
    sys.exit(main())
