"""``POST /v1/responses`` and the routes of stored responses (retrieve, delete, input items,
``POST /v1/responses/compact``): parse, hand to the service, serialize."""

from __future__ import annotations

import orjson
from fastapi import APIRouter, Request
from starlette.requests import HTTPConnection
from starlette.responses import Response
from starlette.routing import Route

from app.api.body import read_json_object, validate
from app.api.pagination import page_params
from app.api.replies import json_reply, list_reply
from app.api.sse import event_stream_response
from app.api.state import gateway_state
from app.protocol.compaction import CompactRequest
from app.protocol.metadata import check_metadata
from app.protocol.requests import CreateResponseRequest, ParsedRequest, check_create_request

router = APIRouter()

_FORWARDED_HEADERS = ("authorization", "openai-organization", "openai-project", "x-request-id")


def client_headers(request: HTTPConnection) -> dict[str, str]:
    """The client headers the upstream may need (credentials, tracing), from a request or a
    WebSocket's handshake."""
    headers = request.headers
    return {name: headers[name] for name in _FORWARDED_HEADERS if name in headers}


async def create_response(request: Request) -> Response:
    """``POST /v1/responses``: a plain Starlette endpoint (see ``HOT_ROUTES``)."""
    state = gateway_state(request)
    body = await read_json_object(request, state.settings.max_body_bytes)
    parsed = validate(CreateResponseRequest, body)
    check_create_request(parsed)
    check_metadata(body.get("metadata"), "metadata")
    headers = client_headers(request)
    create = ParsedRequest(parsed, body)
    if parsed.stream:
        events = await state.service.open_stream(create, headers)
        return event_stream_response(events)
    response = await state.service.create(create, headers)
    return Response(orjson.dumps(response), media_type="application/json")


@router.post("/v1/responses/compact")
async def compact_response(request: Request) -> Response:
    """OpenAI's ``responses.compact``: the compacted items of a conversation."""
    state = gateway_state(request)
    body = await read_json_object(request, state.settings.max_body_bytes)
    parsed = validate(CompactRequest, body)
    return json_reply(await state.service.compact(parsed, body, client_headers(request)))


@router.post("/v1/responses/input_tokens")
async def count_input_tokens(request: Request) -> Response:
    """``POST /v1/responses/input_tokens`` (``client.responses.input_tokens.count``): the
    request's input tokens, history included. An estimate (the upstream has no tokenizer
    endpoint) says so: ``"estimated": true`` in the body, and the ``respgate-token-count``
    header is ``estimate`` (``exact`` otherwise)."""
    state = gateway_state(request)
    body = await read_json_object(request, state.settings.max_body_bytes)
    parsed = validate(CreateResponseRequest, body)
    count = await state.service.input_tokens(ParsedRequest(parsed, body), client_headers(request))
    reply: dict[str, object] = {"object": "response.input_tokens", "input_tokens": count.tokens}
    if not count.exact:
        reply["estimated"] = True
    return Response(
        orjson.dumps(reply),
        media_type="application/json",
        headers={"respgate-token-count": "exact" if count.exact else "estimate"},
    )


@router.get("/v1/responses/{response_id}")
async def get_response(request: Request, response_id: str) -> Response:
    return json_reply(await gateway_state(request).service.get(response_id))


@router.delete("/v1/responses/{response_id}")
async def delete_response(request: Request, response_id: str) -> Response:
    return json_reply(await gateway_state(request).service.delete(response_id))


@router.get("/v1/responses/{response_id}/input_items")
async def list_input_items(request: Request, response_id: str) -> Response:
    params = page_params(request)
    page = await gateway_state(request).service.input_items(
        response_id, after=params.after, limit=params.limit, order=params.order
    )
    return list_reply(page)


# The hot path skips FastAPI's per-request dependency solving: it reads its own body and
# validates it itself. A plain Starlette route costs ~20 µs less per request (bench/README.md).
HOT_ROUTES = [Route("/v1/responses", create_response, methods=["POST"])]
