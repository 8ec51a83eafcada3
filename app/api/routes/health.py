"""``GET /health`` (the process is alive) and ``GET /ready`` (the upstream answers)."""

from __future__ import annotations

from fastapi import APIRouter, Request
from starlette.responses import JSONResponse

from app.api.state import gateway_state
from app.errors import NotReadyError

router = APIRouter()


@router.get("/health")
async def health() -> JSONResponse:
    return JSONResponse({"status": "ok"})


@router.get("/ready")
async def ready(request: Request) -> JSONResponse:
    state = gateway_state(request)
    if not await state.upstream.check_ready():
        raise NotReadyError(f"the upstream at {state.settings.upstream_url} is not answering")
    return JSONResponse({"status": "ready", "upstream": state.settings.upstream_url})
