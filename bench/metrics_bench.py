"""What the Prometheus metrics add to a request: the gateway with ``[metrics] enabled`` false vs
true, in one process.

Both apps run here (httpx's ASGI transport, no sockets) over the same in-memory upstream
(``messages_bench.InstantUpstream``: its stream has 16 text deltas; ``long`` streams 400), each
on its own SQLite store, ``store: false``, and the requests alternate between them so both see
the same machine noise. The difference of the medians is what the metrics middleware (a
count and a duration per request), the responses route's report (status, tokens) and the SSE
writer's watch (one check per event, the first delta's time) cost.

    .venv/bin/python bench/metrics_bench.py [--requests 2000] [--warmup 200]

Prints the median and p90 CPU time per request (µs: client and gateway together, in this one
process) of each app and the difference; nothing asserts.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import copy
import json
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Mapping
from pathlib import Path
from typing import Any

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _ab import asgi_client, compare, each_client
from messages_bench import EVENTS, InstantUpstream

from app.main import create_app
from app.settings import Settings

BODY: dict[str, Any] = {"model": "m", "input": "What is the weather in Paris?", "store": False}
DELTA = next(e for e in EVENTS if e["type"] == "response.output_text.delta")
FIRST_DELTA = EVENTS.index(DELTA)
LONG_EVENTS = [*EVENTS[:FIRST_DELTA], *([DELTA] * 400), *EVENTS[FIRST_DELTA + 16 :]]


class _LongEvents:
    def __aiter__(self) -> AsyncIterator[dict[str, Any]]:
        return self._iter()

    async def _iter(self) -> AsyncIterator[dict[str, Any]]:
        for event in copy.deepcopy(LONG_EVENTS):
            yield event

    async def aclose(self) -> None:
        return None


class BenchUpstream(InstantUpstream):
    """``InstantUpstream``; the model ``long`` streams 400 deltas."""

    async def stream_response(self, body: Any, headers: Mapping[str, str]) -> Any:
        if body.get("model") == "long":
            return _LongEvents()
        return await super().stream_response(body, headers)


def settings(metrics: bool) -> Settings:
    data_dir = Path(tempfile.mkdtemp(prefix="respgate-metrics-bench-"))
    return Settings(data_dir=data_dir, metrics={"enabled": metrics, "models": ["m", "long"]})


CASES = {
    "json": BODY,
    "stream": {**BODY, "stream": True},
    "long": {**BODY, "model": "long", "stream": True},
}


async def main(requests: int, warmup: int, same: bool) -> None:
    async with contextlib.AsyncExitStack() as stack:
        clients: dict[str, httpx.AsyncClient] = {}
        for name, metrics in (("off", False), ("on", not same)):
            app = create_app(settings(metrics), upstream=BenchUpstream())  # type: ignore[arg-type]
            clients[name] = await asgi_client(stack, app)
        print(f"{requests} sequential requests per case (after {warmup} warm-up), CPU µs")
        results: dict[str, Any] = {}
        cpu = time.process_time  # the machine may be shared: CPU time is not inflated by it
        for case, body in CASES.items():
            count = requests if case != "long" else max(requests // 5, 50)
            await each_client(clients, body, warmup, cpu)
            samples = await each_client(clients, body, count, cpu)
            results[case] = compare(case, ("metrics off", "on"), samples["off"], samples["on"])
        print(json.dumps(results))


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=2000)
    parser.add_argument("--warmup", type=int, default=200)
    parser.add_argument(
        "--same", action="store_true", help="metrics off in both apps: the noise floor (A/A)"
    )
    args = parser.parse_args()
    asyncio.run(main(args.requests, args.warmup, args.same))
