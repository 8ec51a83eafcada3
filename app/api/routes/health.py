"""``GET /health`` (the process is alive: always 200 while it serves) and ``GET /ready`` (the
upstreams answer, none has its circuit open (``app.upstream.breaker``), and the store can
serve: 503 in the error envelope naming what is down; a 200 shows each upstream's circuit and
its connection pool: the limit and the requests waiting for a connection)."""

from __future__ import annotations

import asyncio
import math
from collections.abc import Awaitable

from fastapi import APIRouter, Request
from starlette.responses import JSONResponse

from app.api.state import gateway_state
from app.core.ports import (
    ResponseStore,
    StoreReadiness,
    UpstreamCircuits,
    UpstreamPools,
    UpstreamReadiness,
)
from app.errors import NotReadyError

router = APIRouter()


@router.get("/health")
async def health() -> JSONResponse:
    return JSONResponse({"status": "ok"})


@router.get("/ready")
async def ready(request: Request) -> JSONResponse:
    state = gateway_state(request)
    upstream = state.upstream
    configs = state.settings.resolved_upstreams()
    circuits = upstream.circuits() if isinstance(upstream, UpstreamCircuits) else {}
    tripped = [
        f"{name} (retry in {max(1, math.ceil(report.retry_after))} s)"
        for name, report in circuits.items()
        if report.state == "open"
    ]
    if tripped:
        upstreams: Awaitable[dict[str, bool]] = _none()
    elif isinstance(upstream, UpstreamReadiness):
        upstreams = upstream.readiness()
    else:
        upstreams = _one(configs[0].name, upstream.check_ready())
    answers, store_problem = await asyncio.gather(upstreams, _store_problem(state.store))
    urls = {config.name: config.url for config in configs}
    down = [name for name, ok in answers.items() if not ok]
    problems = [] if store_problem is None else [f"the store is unavailable ({store_problem})"]
    if tripped:
        problems.append(f"upstreams failing fast, their circuit open: {', '.join(tripped)}")
    elif down:
        named = ", ".join(f"{name} ({urls.get(name, '?')})" for name in down)
        if len(configs) == 1:
            problems.append(f"the upstream at {configs[0].url} is not answering")
        else:
            problems.append(f"upstreams not answering: {named}")
    if problems:
        upstream_down = bool(tripped or down)
        if store_problem is None:
            raise NotReadyError("; ".join(problems))
        raise NotReadyError(
            "; ".join(problems), code="not_ready" if upstream_down else "storage_unavailable"
        )
    pools = upstream.pools() if isinstance(upstream, UpstreamPools) else {}
    return JSONResponse(
        {
            "status": "ready",
            "upstream": configs[0].url,
            "upstreams": {name: "ready" for name in answers},
            "circuits": {name: report.state for name, report in circuits.items()},
            # Each upstream's connection pool: max_connections (0: no limit), requests waiting.
            "pools": {
                name: {"limit": pool.limit, "waiting": pool.waiting} for name, pool in pools.items()
            },
            "store": "ready",
        }
    )


async def _none() -> dict[str, bool]:
    return {}


async def _one(name: str, answer: Awaitable[bool]) -> dict[str, bool]:
    return {name: await answer}


async def _store_problem(store: ResponseStore) -> str | None:
    """Why the store cannot serve, or None (a store that cannot tell is taken as ready)."""
    if isinstance(store, StoreReadiness):
        return await store.readiness_problem()
    return None
