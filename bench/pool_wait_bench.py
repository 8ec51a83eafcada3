"""What watching the upstream pool's waits costs a request (``app.upstream.pool``, issue 19).

One process drives ``HttpUpstream`` against the shared mock upstream (a subprocess) with
concurrent requests, in blocks that alternate between variants, so that all of them see the
same machine noise; per block, the CPU time of this process (aiohttp's client side: what the
gateway's upstream calls cost) per request. Variants:

- ``none``: the session without any trace config (the code before issue 19);
- ``session-trace``: ``PoolWatch``'s TraceConfig (its two queued hooks alone) on the session
  (``trace_configs``), aiohttp's own connector;
- ``watch``: ``HttpUpstream`` as it is: the same TraceConfig given to the connection step
  alone (``pool.WatchedConnector``);
- ``none2``: ``none`` again, the A/A noise floor.

With ``--full`` the pool is smaller than the concurrency (``--limit``), so every request past
it waits and the hooks fire (and the metrics observer appends): their cost when they run.

``--connect``: the connection step alone, ``connector.connect`` + ``release`` of a kept-alive
connection, 20,000 at a time, in turns: aiohttp's ``TCPConnector``, ``WatchedConnector`` as it
is (no trace while the pool has a free slot) and ``WatchedConnector`` tracing every step (what
it would cost without the free-slot test).

    PYTHONPATH=. .venv/bin/python bench/pool_wait_bench.py [--requests 400] [--blocks 15]
        [--concurrency 32] [--stream] [--full] [--shared-bench DIR]

Prints the median CPU µs per request of each variant over the blocks, its difference to
``none``'s and the median of the blockwise differences to ``none`` (the steadier figure on a
shared machine); nothing asserts.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import time
from pathlib import Path

import aiohttp
import orjson
import yarl

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _harness import DEFAULT_SHARED_BENCH, free_port, mock_server, running

from app.api.metrics import GatewayMetrics, ModelLabels
from app.upstream.http import KEEPALIVE_SECONDS, HttpUpstream
from app.upstream.pool import PoolWatch, WatchedConnector

BODY = {"model": "mock", "input": "hi", "store": False}


def plain(upstream: HttpUpstream, trace: bool = False) -> HttpUpstream:
    """``upstream`` with aiohttp's own connector (as before issue 19); ``trace``: with the pool
    watch's TraceConfig (the queued hooks alone) on the session, not on the connector."""
    connector = aiohttp.TCPConnector(
        limit=upstream.pool.limit,
        ttl_dns_cache=300,
        enable_cleanup_closed=False,
        keepalive_timeout=KEEPALIVE_SECONDS,
    )
    upstream._session = aiohttp.ClientSession(
        connector=connector,
        timeout=upstream._timeout,
        json_serialize=lambda obj: orjson.dumps(obj).decode(),
        trace_configs=[upstream.pool.trace_config] if trace else None,
    )
    return upstream


async def one(upstream: HttpUpstream, url: str, stream: bool) -> None:
    if not stream:
        await upstream.post_json(url, BODY, {})
        return
    resp = await upstream.post_stream(url, {**BODY, "stream": True}, {})
    assert isinstance(resp, aiohttp.ClientResponse)
    async with resp:
        async for _chunk in resp.content.iter_any():
            pass


async def block(upstream: HttpUpstream, url: str, n: int, concurrency: int, stream: bool) -> float:
    """CPU µs of this process per request, ``n`` requests ``concurrency`` at a time."""
    left = n

    async def worker() -> None:
        nonlocal left
        while left > 0:
            left -= 1
            await one(upstream, url, stream)

    started = time.process_time()
    await asyncio.gather(*(worker() for _ in range(concurrency)))
    return (time.process_time() - started) / n * 1e6


async def measure(args: argparse.Namespace, base: str) -> dict[str, list[float]]:
    limit = args.limit if args.full else 1024
    metrics = GatewayMetrics(ModelLabels([], 0), ["mock"])
    variants = {
        "none": plain(HttpUpstream(base, name="mock", max_connections=limit)),
        "session-trace": plain(HttpUpstream(base, name="mock", max_connections=limit), True),
        "watch": HttpUpstream(base, name="mock", max_connections=limit),
        "none2": plain(HttpUpstream(base, name="mock", max_connections=limit)),
    }
    for name in ("session-trace", "watch"):
        variants[name].pool.watch(metrics.record_pool_wait)
        variants[name].pool.warn_after = 3600.0  # measure the hooks, not the logging
    url = f"{base}/v1/responses"
    results: dict[str, list[float]] = {name: [] for name in variants}
    try:
        for upstream in variants.values():  # warm-up: connections opened, code paths hot
            await block(upstream, url, args.requests // 2, args.concurrency, args.stream)
        names = list(variants)
        for round_ in range(args.blocks):
            # Each round in another order: no variant always runs right after another.
            shift = round_ % len(names)
            for name in names[shift:] + names[:shift]:
                upstream = variants[name]
                cost = await block(upstream, url, args.requests, args.concurrency, args.stream)
                results[name].append(cost)
        metrics.flush()
    finally:
        for upstream in variants.values():
            await upstream.aclose()
    return results


async def measure_connect(args: argparse.Namespace, base: str) -> dict[str, list[float]]:
    """CPU µs of one ``connect`` + ``release`` of a kept-alive connection, per connector."""
    always = WatchedConnector(PoolWatch("mock", 1024, 3600.0))
    always._counted = False  # the free-slot test off: every step traced
    connectors = {
        "none": aiohttp.TCPConnector(limit=1024),
        "watch": WatchedConnector(PoolWatch("mock", 1024, 3600.0)),
        "traced-always": always,
    }
    for connector in connectors.values():  # one kept-alive connection in each pool
        session = aiohttp.ClientSession(connector=connector, connector_owner=False)
        async with session, session.get(f"{base}/health") as resp:
            await resp.read()
    loop = asyncio.get_running_loop()
    req = aiohttp.ClientRequest("GET", yarl.URL(f"{base}/health"), loop=loop)
    timeout = aiohttp.ClientTimeout(connect=10)
    results: dict[str, list[float]] = {name: [] for name in connectors}
    for _ in range(args.blocks):
        for name, connector in connectors.items():
            started = time.process_time()
            for _ in range(20_000):
                connection = await connector.connect(req, [], timeout)
                connection.release()
            results[name].append((time.process_time() - started) / 20_000 * 1e6)
    for connector in connectors.values():
        await connector.close()
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=400, help="requests per block")
    parser.add_argument("--blocks", type=int, default=15, help="blocks per variant")
    parser.add_argument("--concurrency", type=int, default=32)
    parser.add_argument("--stream", action="store_true", help="SSE streams, not JSON")
    parser.add_argument("--full", action="store_true", help="a pool smaller than concurrency")
    parser.add_argument("--limit", type=int, default=8, help="the pool's size with --full")
    parser.add_argument("--connect", action="store_true", help="the connection step alone")
    parser.add_argument("--shared-bench", type=Path, default=DEFAULT_SHARED_BENCH)
    args = parser.parse_args()
    mock = mock_server(args.shared_bench, free_port(), None)
    with running([mock]):
        run = measure_connect if args.connect else measure
        results = asyncio.run(run(args, mock.base))
    base = statistics.median(results["none"])
    what = "stream" if args.stream else "json"
    pool = f"pool {args.limit} (full)" if args.full else "pool 1024"
    if args.connect:
        print(f"connect + release, {args.blocks} blocks x 20,000")
    else:
        print(f"{what}, c={args.concurrency}, {pool}, {args.blocks} blocks x {args.requests}")
    print("| variant | CPU µs/request (median) | min..max | vs none | paired vs none (median) |")
    print("|---|---|---|---|---|")
    for name, costs in results.items():
        median = statistics.median(costs)
        # Each block's difference to the ``none`` block of its round: less drift.
        paired = statistics.median(c - n for c, n in zip(costs, results["none"], strict=True))
        print(
            f"| {name} | {median:.1f} | {min(costs):.1f}..{max(costs):.1f} "
            f"| {median - base:+.1f} ({(median - base) / base:+.1%}) | {paired:+.1f} |"
        )


if __name__ == "__main__":
    main()
