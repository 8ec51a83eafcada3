"""Nothing queues silently on an upstream's connection pool (``app.upstream.pool``): a real
aiohttp pool of one connection in front of a real local upstream that holds its answer, so the
second request waits for the first one's connection. The wait is logged (once past the
threshold, rate-limited), counted in the metrics and shown by ``/ready``; a short wait logs
nothing. No wall-clock time is asserted: the upstream holds the first answer until the test
has seen the second request waiting, and for at least ``HOLD`` seconds more when a wait must
pass the threshold."""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from app.api.metrics import GatewayMetrics, ModelLabels
from app.errors import UpstreamBusyError
from app.main import create_app
from app.monitoring import watch_pools
from app.protocol.json_types import JsonObject
from app.settings import Settings
from app.upstream.http import HttpUpstream
from app.upstream.retry import create_guard
from app.upstream.router import UpstreamRoute, UpstreamRouter
from tests.api.metrics_support import parse_samples, value
from tests.api.upstreams import build_upstream, ok
from tests.helpers import in_process, serve_in_thread

# How long the upstream holds its first answer after the second request started waiting: the
# second one's wait is longer than this, whatever the machine's speed.
HOLD = 0.2
POOL_LOGGER = "app.upstream.pool"


@dataclass
class Gate:
    """The upstream's answers wait until ``release`` is set; ``held`` counts those waiting."""

    release: threading.Event = field(default_factory=threading.Event)
    held: int = 0


def held_upstream(gate: Gate) -> Starlette:
    async def answer(request: Request) -> Response:
        gate.held += 1
        await asyncio.to_thread(gate.release.wait, 30)
        return JSONResponse({"ok": True})

    async def health(request: Request) -> Response:
        return JSONResponse({"ok": True})

    return Starlette(
        routes=[
            Route("/v1/responses", answer, methods=["POST"]),
            Route("/health", health),
        ]
    )


@pytest.fixture
def gate() -> Iterator[Gate]:
    gate = Gate()
    yield gate
    gate.release.set()


@pytest.fixture
def upstream_url(gate: Gate) -> Iterator[str]:
    with serve_in_thread(held_upstream(gate)) as url:
        yield url


async def until(condition: Callable[[], bool], what: str) -> None:
    for _ in range(2000):
        if condition():
            return
        await asyncio.sleep(0.005)
    raise AssertionError(f"never happened: {what}")


async def holding_the_only_connection(
    upstream: HttpUpstream, gate: Gate
) -> asyncio.Task[JsonObject]:
    """A request that holds the pool's one connection until ``gate`` is released."""
    url = f"{upstream.base_url}/v1/responses"
    first = asyncio.create_task(upstream.post_json(url, {"n": 1}, {}))
    await until(lambda: gate.held == 1, "the first request reached the upstream")
    return first


async def second_waits(upstream: HttpUpstream, gate: Gate, hold: float) -> list[object]:
    """Two requests on a pool of one: the second waits until the first is answered, ``hold``
    seconds after the second was seen waiting."""
    url = f"{upstream.base_url}/v1/responses"
    first = await holding_the_only_connection(upstream, gate)
    second = asyncio.create_task(upstream.post_json(url, {"n": 2}, {}))
    await until(lambda: upstream.pool.waiting == 1, "the second request waits")
    await asyncio.sleep(hold)
    gate.release.set()
    return list(await asyncio.gather(first, second, return_exceptions=True))


def pool_lines(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == POOL_LOGGER]


async def test_a_wait_past_the_threshold_logs_one_line_naming_the_pool(
    upstream_url: str, gate: Gate, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, POOL_LOGGER)
    upstream = HttpUpstream(
        upstream_url, name="gpu-a", max_connections=1, pool_wait_warn_seconds=HOLD / 2
    )
    try:
        answers = await second_waits(upstream, gate, HOLD)
    finally:
        await upstream.aclose()
    assert answers == [{"ok": True}, {"ok": True}]
    [line] = pool_lines(caplog)
    assert line.startswith("upstream gpu-a: a request waited ")
    assert "the pool's 1 connections were all in use (max_connections)" in line
    assert "0 requests wait now" in line
    assert upstream.pool.waiting == 0


async def test_a_wait_under_the_threshold_logs_nothing_but_is_observed(
    upstream_url: str, gate: Gate, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG, POOL_LOGGER)
    upstream = HttpUpstream(upstream_url, name="gpu-a", max_connections=1)  # warns past 1 s
    upstream.pool.warn_after = 60.0
    waits: list[tuple[str, float]] = []
    upstream.pool.watch(lambda name, seconds: waits.append((name, seconds)))
    try:
        await second_waits(upstream, gate, 0.0)
    finally:
        await upstream.aclose()
    assert pool_lines(caplog) == []
    assert [name for name, _ in waits] == ["gpu-a"]


async def test_a_request_that_finds_a_free_connection_is_not_timed(
    upstream_url: str, gate: Gate
) -> None:
    upstream = HttpUpstream(upstream_url, name="gpu-a", max_connections=2)
    waits: list[tuple[str, float]] = []
    upstream.pool.watch(lambda name, seconds: waits.append((name, seconds)))
    try:
        url = f"{upstream_url}/v1/responses"
        tasks = [asyncio.create_task(upstream.post_json(url, {"n": n}, {})) for n in range(2)]
        await until(lambda: gate.held == 2, "both requests reached the upstream")
        assert upstream.pool.waiting == 0
        gate.release.set()
        await asyncio.gather(*tasks)
    finally:
        await upstream.aclose()
    assert waits == []


async def test_more_waits_within_the_interval_make_one_summary_line(
    upstream_url: str, gate: Gate, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, POOL_LOGGER)
    upstream = HttpUpstream(upstream_url, name="gpu-a", max_connections=1)
    upstream.pool.warn_after = 0.0  # every wait
    try:
        url = f"{upstream_url}/v1/responses"
        tasks = [asyncio.create_task(upstream.post_json(url, {"n": n}, {})) for n in range(4)]
        await until(lambda: upstream.pool.waiting == 3, "three requests wait")
        gate.release.set()
        await asyncio.gather(*tasks)
        assert len(pool_lines(caplog)) == 1  # the first wait; the others wait for the interval
    finally:
        await upstream.aclose()  # says what the interval held
    first, summary = pool_lines(caplog)
    assert first.startswith("upstream gpu-a: a request waited")
    assert summary.startswith("upstream gpu-a: 2 more requests waited 0 s or more")
    assert "0 gave up" in summary


async def test_a_request_that_gives_up_waiting_is_counted_and_no_longer_waits(
    upstream_url: str, gate: Gate, caplog: pytest.LogCaptureFixture
) -> None:
    """The wait counts against connect_timeout: past it the request fails as busy (503)."""
    caplog.set_level(logging.WARNING, POOL_LOGGER)
    upstream = HttpUpstream(upstream_url, name="gpu-a", max_connections=1, connect_timeout=HOLD / 2)
    upstream.pool.warn_after = 0.0
    waits: list[float] = []
    upstream.pool.watch(lambda name, seconds: waits.append(seconds))
    try:
        url = f"{upstream_url}/v1/responses"
        first = await holding_the_only_connection(upstream, gate)
        with pytest.raises(UpstreamBusyError) as busy:
            await upstream.post_json(url, {"n": 2}, {})
        assert busy.value.status_code == 503 and busy.value.code == "upstream_busy"
        assert "'gpu-a' is busy: its 1 connections were all in use" in str(busy.value)
        assert busy.value.headers == {"retry-after": "1", "retry-after-ms": "1000"}
        assert upstream.pool.waiting == 0
        gate.release.set()
        assert await first == {"ok": True}
    finally:
        await upstream.aclose()
    assert len(waits) == 1
    [line] = pool_lines(caplog)
    assert "a request gave up after waiting" in line


async def test_a_busy_pool_is_neither_retried_nor_counted_by_the_circuit_breaker(
    upstream_url: str, gate: Gate
) -> None:
    """With a breaker that opens at the first failure and retries on, requests that give up
    waiting for a connection are answered busy at once: not sent again (the upstream is not
    failing), and the circuit stays closed for the requests that follow."""
    guard = create_guard("gpu-a", retries=2, backoff=0.01, max_wait=1, threshold=1, cooldown=60)
    upstream = HttpUpstream(
        upstream_url, name="gpu-a", max_connections=1, connect_timeout=HOLD / 2, guard=guard
    )
    waits: list[float] = []
    upstream.pool.watch(lambda name, seconds: waits.append(seconds))
    try:
        url = f"{upstream_url}/v1/responses"
        first = await holding_the_only_connection(upstream, gate)
        for n in (2, 3):
            with pytest.raises(UpstreamBusyError):
                await upstream.post_json(url, {"n": n}, {})
        assert len(waits) == 2  # one wait each: no retry waited again
        assert guard.breaker is not None and guard.breaker.state == "closed"
        gate.release.set()
        assert await first == {"ok": True}
        assert await upstream.post_json(url, {"n": 4}, {}) == {"ok": True}
    finally:
        await upstream.aclose()


async def test_a_full_pool_does_not_make_the_upstream_look_unready(
    upstream_url: str, gate: Gate
) -> None:
    """Readiness checks have their own connection: with every pooled connection carrying a
    request (and one more waiting), the upstream still answers its health check."""
    upstream = HttpUpstream(upstream_url, max_connections=1)
    try:
        url = f"{upstream_url}/v1/responses"
        first = await holding_the_only_connection(upstream, gate)
        second = asyncio.create_task(upstream.post_json(url, {"n": 2}, {}))
        await until(lambda: upstream.pool.waiting == 1, "the second request waits")
        assert await asyncio.wait_for(upstream.check_ready(), 4) is True
        assert upstream.pool.waiting == 1  # the check took no place in the pool's queue
        gate.release.set()
        assert await first == await second == {"ok": True}
    finally:
        await upstream.aclose()


async def test_the_metrics_count_the_wait_and_gauge_the_waiting(
    upstream_url: str, gate: Gate
) -> None:
    upstream = HttpUpstream(upstream_url, name="gpu-a", max_connections=1)
    router = UpstreamRouter([UpstreamRoute("gpu-a", upstream, upstream_url)])
    metrics = GatewayMetrics(ModelLabels([], 0), ["gpu-a"])
    stop = watch_pools(metrics, router)
    registry: CollectorRegistry = metrics.registry
    wait_count = "respgate_upstream_pool_wait_seconds_count"
    waiting = "respgate_upstream_pool_waiting"
    labels = {"upstream": "gpu-a"}
    assert registry.get_sample_value(wait_count, labels) == 0  # exported from the start
    try:
        url = f"{upstream_url}/v1/responses"
        first = await holding_the_only_connection(upstream, gate)
        second = asyncio.create_task(upstream.post_json(url, {"n": 2}, {}))
        await until(lambda: upstream.pool.waiting == 1, "the second request waits")
        metrics.flush()
        assert registry.get_sample_value(waiting, labels) == 1
        assert router.pools()["gpu-a"].waiting == 1 and router.pools()["gpu-a"].limit == 1
        gate.release.set()
        await asyncio.gather(first, second)
    finally:
        stop()
        await upstream.aclose()
    metrics.flush()
    assert registry.get_sample_value(wait_count, labels) == 1
    assert registry.get_sample_value(waiting, labels) == 0


def poll(check: Callable[[], bool], what: str) -> None:
    for _ in range(2000):
        if check():
            return
        time.sleep(0.005)
    raise AssertionError(f"never happened: {what}")


def test_through_the_gateway_ready_and_metrics_show_the_pool(tmp_path: Path) -> None:
    """The gateway built from its settings: the default upstream's pool of one, one request
    waiting behind a held one (the gauge says so), then counted by ``/metrics``."""
    gate = Gate()

    async def held(request: Request, body: JsonObject) -> Response:
        gate.held += 1
        await asyncio.to_thread(gate.release.wait, 30)
        return await ok(request, body)

    upstream, _ = build_upstream({"held": held})
    body = {"model": "held", "input": "hi", "store": False}
    waiting = "respgate_upstream_pool_waiting"

    def gauge() -> float:
        return value(parse_samples(http.get("/metrics").text), waiting, upstream="default")

    with serve_in_thread(upstream) as url:
        settings = Settings(upstream_url=url, upstream_max_connections=1, data_dir=tmp_path)
        with in_process(create_app(settings)) as http:
            assert http.get("/ready").json()["pools"] == {"default": {"limit": 1, "waiting": 0}}
            with concurrent.futures.ThreadPoolExecutor(2) as pool:
                replies = [pool.submit(http.post, "/v1/responses", json=body)]
                poll(lambda: gate.held == 1, "the first request reached the upstream")
                replies.append(pool.submit(http.post, "/v1/responses", json=body))
                poll(lambda: gauge() == 1, "the gauge shows the second request waiting")
                gate.release.set()
                assert [r.result(timeout=30).status_code for r in replies] == [200, 200]
            samples = parse_samples(http.get("/metrics").text)
    count = "respgate_upstream_pool_wait_seconds_count"
    assert value(samples, count, upstream="default") == 1
    assert value(samples, waiting, upstream="default") == 0
