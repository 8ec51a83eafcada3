"""What client authentication and tenancy add to a request: the gateway with ``[auth]`` off
(every request the default tenant) vs on (a configured key, its own tenant), in one process.

Both apps run here (httpx's ASGI transport, no sockets) over the same in-memory upstream
(``messages_bench.InstantUpstream``), each on its own SQLite store, and the requests alternate
between them so both see the same machine noise. ``store`` is true, as the clients' default:
the keyed requests read and write as their tenant. The difference of the medians is what the
authentication middleware (a SHA-256 and a lookup) and a non-default tenant cost.

    .venv/bin/python bench/auth_bench.py [--requests 2000] [--warmup 200]

Prints the median and p90 per request (µs) of each app and the difference; nothing asserts.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent))

from messages_bench import InstantUpstream

from app.main import create_app
from app.settings import Settings

KEY = "sk-rg-bench-0123456789abcdefghijklmnopqrstuvwxyz"
BODY: dict[str, Any] = {"model": "m", "input": "What is the weather in Paris?"}


def settings(auth: bool) -> Settings:
    data_dir = Path(tempfile.mkdtemp(prefix="respgate-auth-bench-"))
    if not auth:
        return Settings(data_dir=data_dir)
    keys = [{"tenant": "bench", "key": KEY}]
    return Settings(data_dir=data_dir, auth={"mode": "on", "keys": keys})


async def once(client: httpx.AsyncClient, stream: bool) -> float:
    body = {**BODY, "stream": stream}
    started = time.perf_counter()
    if stream:
        async with client.stream("POST", "/v1/responses", json=body) as reply:
            async for _chunk in reply.aiter_bytes():
                pass
    else:
        reply = await client.post("/v1/responses", json=body)
    elapsed = time.perf_counter() - started
    if reply.status_code != 200:
        raise SystemExit(f"HTTP {reply.status_code}: {reply.read()[:300]!r}")
    return elapsed


async def timed(
    clients: dict[str, httpx.AsyncClient], stream: bool, n: int
) -> dict[str, list[float]]:
    out: dict[str, list[float]] = {name: [] for name in clients}
    for _ in range(n):
        for name, client in clients.items():
            out[name].append(await once(client, stream))
    return out


def summary(samples: list[float]) -> tuple[float, float]:
    ordered = sorted(samples)
    return statistics.median(ordered) * 1e6, ordered[int(len(ordered) * 0.9)] * 1e6


async def main(requests: int, warmup: int) -> None:
    async with contextlib.AsyncExitStack() as stack:
        clients: dict[str, httpx.AsyncClient] = {}
        for name, auth in (("auth off", False), ("auth on", True)):
            app = create_app(settings(auth), upstream=InstantUpstream())  # type: ignore[arg-type]
            await stack.enter_async_context(app.router.lifespan_context(app))
            headers = {"authorization": f"Bearer {KEY}"} if auth else {}
            clients[name] = await stack.enter_async_context(
                httpx.AsyncClient(
                    transport=httpx.ASGITransport(app=app), base_url="http://bench", headers=headers
                )
            )
        print(f"{requests} sequential requests per case (after {warmup} warm-up), µs")
        results: dict[str, Any] = {}
        for stream in (False, True):
            await timed(clients, stream, warmup)
            samples = await timed(clients, stream, requests)
            off50, off90 = summary(samples["auth off"])
            on50, on90 = summary(samples["auth on"])
            name = "stream" if stream else "json"
            results[name] = {"off_p50": off50, "on_p50": on50, "off_p90": off90, "on_p90": on90}
            print(
                f"{name:<7} auth off p50 {off50:7.0f}  auth on p50 {on50:7.0f}  "
                f"added {on50 - off50:+6.0f} ({on50 / off50:.3f}x)  "
                f"p90 {off90:7.0f} / {on90:7.0f}"
            )
        print(json.dumps(results))


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=2000)
    parser.add_argument("--warmup", type=int, default=200)
    args = parser.parse_args()
    asyncio.run(main(args.requests, args.warmup))
