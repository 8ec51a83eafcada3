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
import sys
import tempfile
from pathlib import Path
from typing import Any

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _ab import asgi_client, compare, each_client
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


async def main(requests: int, warmup: int) -> None:
    async with contextlib.AsyncExitStack() as stack:
        clients: dict[str, httpx.AsyncClient] = {}
        for name, auth in (("auth off", False), ("auth on", True)):
            app = create_app(settings(auth), upstream=InstantUpstream())  # type: ignore[arg-type]
            headers = {"authorization": f"Bearer {KEY}"} if auth else {}
            clients[name] = await asgi_client(stack, app, headers)
        print(f"{requests} sequential requests per case (after {warmup} warm-up), µs")
        results: dict[str, Any] = {}
        for stream in (False, True):
            body = {**BODY, "stream": stream}
            await each_client(clients, body, warmup)
            samples = await each_client(clients, body, requests)
            name = "stream" if stream else "json"
            results[name] = compare(
                name, ("auth off", "auth on"), samples["auth off"], samples["auth on"]
            )
        print(json.dumps(results))


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=2000)
    parser.add_argument("--warmup", type=int, default=200)
    args = parser.parse_args()
    asyncio.run(main(args.requests, args.warmup))
