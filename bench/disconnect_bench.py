"""What watching for a client gone costs a request (``app.api.disconnect.unless_gone``: one task
waiting on ``receive()`` while the service works), in one process.

One app (httpx's ASGI transport, no sockets) over the in-memory upstream
(``messages_bench.InstantUpstream``); the requests alternate between the route as it is and
the route with ``unless_gone`` replaced by a plain ``await`` (patched in the route module
between two requests), so both see the same machine noise. ``store`` is true, as the
clients' default. The difference of the medians is the watcher's cost.

    .venv/bin/python bench/disconnect_bench.py [--requests 2000] [--warmup 200]

Prints the median and p90 per request (µs) of each case and the difference, then the helper
alone (``unless_gone`` around an instant coroutine vs the bare ``await``, in alternating
batches: the median per call); nothing asserts.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import tempfile
import time
from collections.abc import Awaitable
from pathlib import Path
from typing import Any, TypeVar

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _ab import alternate, compare, once
from auth_bench import BODY
from messages_bench import InstantUpstream
from starlette.requests import Request

from app.api.routes import responses
from app.main import create_app
from app.settings import Settings

T = TypeVar("T")
WATCHED = responses.unless_gone


async def unwatched(request: Request, work: Awaitable[T], stage: str) -> T:
    return await work


async def timed(client: httpx.AsyncClient, stream: bool, n: int) -> dict[str, list[float]]:
    body = {**BODY, "stream": stream}

    async def plain() -> float:
        responses.unless_gone = unwatched  # type: ignore[assignment]
        return await once(client, body)

    async def watched() -> float:
        responses.unless_gone = WATCHED
        return await once(client, body)

    return await alternate({"plain await": plain, "unless_gone": watched}, n)


async def instant() -> int:
    return 1


async def micro(batches: int = 40, size: int = 2000) -> tuple[float, float]:
    """Median µs per call of a bare ``await`` and of ``unless_gone`` (its watcher started on a
    ``receive`` that waits, then cancelled), measured in alternating batches."""
    never = asyncio.Event()

    async def receive() -> dict[str, Any]:
        await never.wait()
        return {"type": "http.disconnect"}

    request = Request({"type": "http", "method": "POST", "path": "/", "headers": []}, receive)
    bare: list[float] = []
    watched: list[float] = []
    for _ in range(batches):
        started = time.perf_counter()
        for _ in range(size):
            await instant()
        bare.append((time.perf_counter() - started) / size)
        started = time.perf_counter()
        for _ in range(size):
            await WATCHED(request, instant(), "bench")
        watched.append((time.perf_counter() - started) / size)
        await asyncio.sleep(0)  # let the cancelled watchers finish
    return statistics.median(bare) * 1e6, statistics.median(watched) * 1e6


async def main(requests: int, warmup: int) -> None:
    data_dir = Path(tempfile.mkdtemp(prefix="respgate-disconnect-bench-"))
    app = create_app(Settings(data_dir=data_dir), upstream=InstantUpstream())  # type: ignore[arg-type]
    async with (
        app.router.lifespan_context(app),
        httpx.AsyncClient(
            transport=httpx.ASGITransport(app=app), base_url="http://bench"
        ) as client,
    ):
        print(f"{requests} sequential requests per case (after {warmup} warm-up), µs")
        results: dict[str, Any] = {}
        for stream in (False, True):
            await timed(client, stream, warmup)
            samples = await timed(client, stream, requests)
            name = "stream" if stream else "json"
            results[name] = compare(
                name,
                ("plain", "unless_gone"),
                samples["plain await"],
                samples["unless_gone"],
                digits=1,
            )
        responses.unless_gone = WATCHED
        bare, watched = await micro()
        results["helper"] = {"bare_us": bare, "unless_gone_us": watched}
        added = watched - bare
        print(f"helper  bare await {bare:6.2f}  unless_gone {watched:6.2f}  added {added:+6.2f}")
        print(json.dumps(results))


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=2000)
    parser.add_argument("--warmup", type=int, default=200)
    args = parser.parse_args()
    asyncio.run(main(args.requests, args.warmup))
