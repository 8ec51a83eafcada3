"""``GET /health`` (the process is alive) and ``GET /ready`` (the upstreams answer, and none
has its circuit open: ``app.upstream.breaker``)."""

from __future__ import annotations

import math

from fastapi import APIRouter, Request
from starlette.responses import JSONResponse

from app.api.state import gateway_state
from app.core.ports import UpstreamCircuits, UpstreamReadiness
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
        raise NotReadyError(f"upstreams failing fast, their circuit open: {', '.join(tripped)}")
    if isinstance(upstream, UpstreamReadiness):
        answers = await upstream.readiness()
    else:
        answers = {configs[0].name: await upstream.check_ready()}
    urls = {config.name: config.url for config in configs}
    down = [name for name, ok in answers.items() if not ok]
    if down:
        named = ", ".join(f"{name} ({urls.get(name, '?')})" for name in down)
        if len(configs) == 1:
            raise NotReadyError(f"the upstream at {configs[0].url} is not answering")
        raise NotReadyError(f"upstreams not answering: {named}")
    return JSONResponse(
        {
            "status": "ready",
            "upstream": configs[0].url,
            "upstreams": {name: "ready" for name in answers},
            "circuits": {name: report.state for name, report in circuits.items()},
        }
    )
