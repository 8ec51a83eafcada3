"""``GET /v1/models``, forwarded to the upstream."""

from __future__ import annotations

from fastapi import APIRouter, Request
from starlette.responses import Response

from app.api.routes.responses import client_headers
from app.api.state import gateway_state

router = APIRouter()


@router.get("/v1/models")
async def list_models(request: Request) -> Response:
    reply = await gateway_state(request).upstream.list_models(client_headers(request))
    return Response(reply.body, status_code=reply.status_code, media_type=reply.content_type)
