"""What the in-process A/B benches share (``auth_bench``, ``metrics_bench``,
``disconnect_bench``, ``request_id_bench``): requests to apps built two (or more) ways, through
httpx's ASGI transport, alternating one request per case so that the machine's drift hits every
case alike; medians and p90s in µs; one comparison line per scenario."""

from __future__ import annotations

import contextlib
import statistics
import time
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

import httpx

Clock = Callable[[], float]


async def once(
    client: httpx.AsyncClient, body: Mapping[str, Any], clock: Clock = time.perf_counter
) -> float:
    """One ``POST /v1/responses`` (read to its end when ``body`` streams): the ``clock`` time it
    took. ``time.process_time`` gives this process's CPU, which other processes' load does not
    inflate."""
    started = clock()
    if body.get("stream"):
        async with client.stream("POST", "/v1/responses", json=body) as reply:
            async for _chunk in reply.aiter_bytes():
                pass
    else:
        reply = await client.post("/v1/responses", json=body)
    elapsed = clock() - started
    if reply.status_code != 200:
        raise SystemExit(f"HTTP {reply.status_code}: {reply.read()[:300]!r}")
    return elapsed


async def alternate(
    cases: Mapping[str, Callable[[], Awaitable[float]]], n: int
) -> dict[str, list[float]]:
    """``n`` rounds of one call per case, in order: each case's samples."""
    out: dict[str, list[float]] = {name: [] for name in cases}
    for _ in range(n):
        for name, call in cases.items():
            out[name].append(await call())
    return out


async def each_client(
    clients: Mapping[str, httpx.AsyncClient],
    body: Mapping[str, Any],
    n: int,
    clock: Clock = time.perf_counter,
) -> dict[str, list[float]]:
    """:func:`alternate` over one client per case, each sent ``body``."""

    def call(client: httpx.AsyncClient) -> Callable[[], Awaitable[float]]:
        return lambda: once(client, body, clock)

    return await alternate({name: call(client) for name, client in clients.items()}, n)


def summary(samples: list[float]) -> tuple[float, float]:
    """Median and p90, in µs."""
    ordered = sorted(samples)
    return statistics.median(ordered) * 1e6, ordered[int(len(ordered) * 0.9)] * 1e6


def compare(
    name: str, labels: tuple[str, str], off: list[float], on: list[float], digits: int = 0
) -> dict[str, float]:
    """Print one line comparing ``off`` and ``on`` (labels for each), return the figures."""
    off50, off90 = summary(off)
    on50, on90 = summary(on)
    print(
        f"{name:<7} {labels[0]} p50 {off50:7.0f}  {labels[1]} p50 {on50:7.0f}  "
        f"added {on50 - off50:+6.{digits}f} ({on50 / off50:.3f}x)  "
        f"p90 {off90:7.0f} / {on90:7.0f}"
    )
    return {"off_p50": off50, "on_p50": on50, "off_p90": off90, "on_p90": on90}


async def asgi_client(
    stack: contextlib.AsyncExitStack, app: Any, headers: Mapping[str, str] | None = None
) -> httpx.AsyncClient:
    """``app`` started (its lifespan) and a client on it, both closed with ``stack``."""
    await stack.enter_async_context(app.router.lifespan_context(app))
    transport = httpx.ASGITransport(app=app)
    client = httpx.AsyncClient(transport=transport, base_url="http://bench", headers=headers)
    return await stack.enter_async_context(client)
