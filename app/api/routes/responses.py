"""``POST /v1/responses``: parse, hand to the service, serialize."""

from __future__ import annotations

import orjson
from fastapi import APIRouter, Request
from starlette.responses import Response

from app.api.body import read_json_object, validate
from app.api.sse import event_stream_response
from app.api.state import gateway_state
from app.protocol.requests import CreateResponseRequest

router = APIRouter()

_FORWARDED_HEADERS = ("authorization", "openai-organization", "openai-project", "x-request-id")


def client_headers(request: Request) -> dict[str, str]:
    """The client headers the upstream may need (credentials, tracing)."""
    headers = request.headers
    return {name: headers[name] for name in _FORWARDED_HEADERS if name in headers}


@router.post("/v1/responses")
async def create_response(request: Request) -> Response:
    state = gateway_state(request)
    body = await read_json_object(request, state.settings.max_body_bytes)
    parsed = validate(CreateResponseRequest, body)
    headers = client_headers(request)
    if parsed.stream:
        events = await state.service.open_stream(body, headers)
        return event_stream_response(events)
    response = await state.service.create(body, headers)
    return Response(orjson.dumps(response), media_type="application/json")
