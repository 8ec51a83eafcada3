"""Wires the Prometheus metrics into the app (``install_metrics``, one call in ``create_app``).
Under ``respgate serve --workers N`` the workers share one metrics directory
(``app.workers.metrics_directory``), so ``/metrics`` sums them.

``[metrics]`` (``app.options.metrics``) decides whether ``/metrics`` exists and who may read
it; the metrics themselves are ``app.api.metrics``, measured by
``app.api.metrics_middleware`` (outermost: it counts the requests authentication refuses
too). While the app runs (its lifespan) the metrics hear the tool-call event bus
(``ToolEvents.subscribe``) and the upstreams' waits for a pool connection
(``core.ports.UpstreamPools``), and every ``FLUSH_SECONDS`` move what the requests reported into
the metrics and sample the gauges (with several workers: what a scrape answered by one worker
sees of the others).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Callable
from typing import Any

from fastapi import FastAPI

from app.api.metrics import GatewayMetrics, ModelLabels
from app.api.metrics_middleware import MetricsAccess, MetricsMiddleware
from app.api.state import GatewayState
from app.core.background import running_count
from app.core.ports import Upstream, UpstreamPools
from app.settings import Settings

logger = logging.getLogger(__name__)

FLUSH_SECONDS = 1.0


def known_models(settings: Settings) -> set[str]:
    """The model names labelled as they are: the upstreams' ``models`` and ``model_map`` names,
    and ``[metrics] models``."""
    names = set(settings.metrics.models)
    for upstream in settings.resolved_upstreams():
        names.update(upstream.models)
        names.update(upstream.model_map)
    return names


def install_metrics(app: FastAPI, settings: Settings) -> GatewayMetrics | None:
    """Add the metrics middleware to ``app`` (call it last: it must run outermost) and their
    sampling to its lifespan; None when ``[metrics] enabled`` is false."""
    options = settings.metrics
    if not options.enabled:
        return None
    models = ModelLabels(known_models(settings), options.max_learned_models)
    metrics = GatewayMetrics(models, [upstream.name for upstream in settings.resolved_upstreams()])
    auth_on, _ = settings.auth.enabled_for(settings.host)
    token = options.token.get_secret_value() if options.token is not None else None
    app.add_middleware(
        MetricsMiddleware, metrics=metrics, access=MetricsAccess(token, open=not auth_on)
    )
    inner = app.router.lifespan_context

    @contextlib.asynccontextmanager
    async def lifespan(application: Any) -> AsyncIterator[Any]:
        async with inner(application) as state:
            gateway: GatewayState = application.state.gateway
            unsubscribe = gateway.service.tool_events.subscribe(metrics.on_tool_event)
            unwatch = watch_pools(metrics, gateway.upstream)
            background = gateway.background
            if background is not None:
                metrics.background_count = lambda: running_count(background)
            if token is None and auth_on:
                logger.info(
                    "metrics: /metrics answers 403 (authentication is on, no [metrics] token)"
                )
            flusher = asyncio.create_task(_flush_often(metrics), name="metrics flush")
            try:
                yield state
            finally:
                flusher.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await flusher
                unsubscribe()
                unwatch()

    app.router.lifespan_context = lifespan
    return metrics


def watch_pools(metrics: GatewayMetrics, upstream: Upstream) -> Callable[[], None]:
    """The upstreams' waits for a pool connection into ``metrics`` (their histogram, and
    the gauge of requests waiting, sampled at each flush); returns what stops it."""
    if not isinstance(upstream, UpstreamPools):
        return lambda: None
    pools = upstream

    def waiting() -> dict[str, int]:
        return {name: report.waiting for name, report in pools.pools().items()}

    metrics.pool_waiting_counts = waiting
    return pools.watch_pool_waits(metrics.record_pool_wait)


async def _flush_often(metrics: GatewayMetrics) -> None:
    """Move what the requests reported into the metrics every ``FLUSH_SECONDS`` (a scrape
    flushes too; with several workers, the others' values are at most this old)."""
    while True:
        await asyncio.sleep(FLUSH_SECONDS)
        try:
            metrics.flush()
        except Exception:  # a broken flush must not stop the next ones
            logger.exception("metrics: flush failed")
