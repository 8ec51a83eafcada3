"""``POST /v1/responses`` and the routes of stored responses (retrieve, delete, input items,
``POST /v1/responses/compact``): parse, hand to the service, serialize. Each call runs for the
caller's tenant (``app.api.tenancy.principal_of``): another tenant's response is a 404."""

from __future__ import annotations

import orjson
from fastapi import APIRouter, Request
from starlette.requests import HTTPConnection
from starlette.responses import Response
from starlette.routing import Route

from app.api.body import read_json_object, validate
from app.api.disconnect import OPENING_STREAM, WAITING_FOR_ANSWER, unless_gone
from app.api.metrics import exchange_of, finishing
from app.api.pagination import page_params
from app.api.rate_limit import meter_of
from app.api.replies import json_reply, list_reply
from app.api.sse import event_stream_response
from app.api.state import gateway_state
from app.api.tenancy import principal_of
from app.core.background import NOT_BACKGROUND_CANCEL, NOT_BACKGROUND_STREAM
from app.core.request_id import current_request_id
from app.errors import InvalidRequestError
from app.protocol.compaction import CompactRequest
from app.protocol.metadata import check_metadata
from app.protocol.requests import CreateResponseRequest, ParsedRequest, check_create_request

router = APIRouter()

_FORWARDED_HEADERS = ("openai-organization", "openai-project")


def client_headers(request: HTTPConnection) -> dict[str, str]:
    """What the upstream may need from a request or a WebSocket's handshake: the request id
    (``app.api.request_id``: the client's ``x-request-id``, or the one the gateway gave it),
    OpenAI's organization and project, and the client's own credential as ``authorization``
    when the principal has one (a JWT, or with authentication off the client's bearer or
    ``x-api-key``; never a gateway key), which only an upstream configured with
    ``forward_client_key`` sends on."""
    headers = request.headers
    out = {name: headers[name] for name in _FORWARDED_HEADERS if name in headers}
    request_id = current_request_id()
    if request_id is not None:
        out["x-request-id"] = request_id
    credential = principal_of(request).client_credential
    if credential:
        out["authorization"] = f"Bearer {credential}"
    return out


async def create_response(request: Request) -> Response:
    """``POST /v1/responses``: a plain Starlette endpoint (see ``HOT_ROUTES``)."""
    state = gateway_state(request)
    body = await read_json_object(request, state.settings.max_body_bytes)
    parsed = validate(CreateResponseRequest, body)
    check_create_request(parsed)
    check_metadata(body.get("metadata"), "metadata")
    headers = client_headers(request)
    create = ParsedRequest(parsed, body, principal_of(request).tenant)
    background = state.background
    meter = meter_of(request)  # None unless the caller has a rate limit
    exchange = exchange_of(request)  # None unless metrics are on
    if exchange is not None:
        exchange.model = parsed.model
    on_final, watch = finishing(exchange, meter.charge if meter else None)
    send_timeout = state.settings.stream_send_timeout_seconds
    if parsed.background and background is not None:
        if parsed.stream:
            events = await background.open_stream(create, headers)
            return event_stream_response(events, on_final, send_timeout, watch)
        return json_reply(await background.create(create, headers))
    # A client gone cancels its work (app.api.disconnect); a background response's goes on.
    if parsed.stream:
        opening = state.service.open_stream(create, headers)
        events = await unless_gone(request, opening, OPENING_STREAM)
        return event_stream_response(events, on_final, send_timeout, watch)
    answer = state.service.create(create, headers)
    response = await unless_gone(request, answer, WAITING_FOR_ANSWER)
    if exchange is not None:
        exchange.finished(response, stream=False)
    if meter is not None:
        await meter.charge(response)
    return Response(orjson.dumps(response), media_type="application/json")


@router.post("/v1/responses/compact")
async def compact_response(request: Request) -> Response:
    """OpenAI's ``responses.compact``: the compacted items of a conversation."""
    state = gateway_state(request)
    body = await read_json_object(request, state.settings.max_body_bytes)
    parsed = validate(CompactRequest, body)
    tenant = principal_of(request).tenant
    compacting = state.service.compactor.compact(
        parsed, body, client_headers(request), tenant=tenant
    )
    return json_reply(await unless_gone(request, compacting, WAITING_FOR_ANSWER))


@router.post("/v1/responses/input_tokens")
async def count_input_tokens(request: Request) -> Response:
    """``POST /v1/responses/input_tokens`` (``client.responses.input_tokens.count``): the
    request's input tokens, history included. An estimate (the upstream has no tokenizer
    endpoint) says so: ``"estimated": true`` in the body, and the ``respgate-token-count``
    header is ``estimate`` (``exact`` otherwise)."""
    state = gateway_state(request)
    body = await read_json_object(request, state.settings.max_body_bytes)
    parsed = validate(CreateResponseRequest, body)
    tenant = principal_of(request).tenant
    count = await state.service.input_tokens(
        ParsedRequest(parsed, body, tenant), client_headers(request)
    )
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
    """The Response; with ``stream=true`` a background response's events after
    ``starting_after`` (``core.background``)."""
    state = gateway_state(request)
    tenant = principal_of(request).tenant
    background = state.background
    if _flag(request.query_params.get("stream")):
        after = _sequence_number(request.query_params.get("starting_after"))
        if background is None:
            await state.service.get(response_id, tenant=tenant)
            raise InvalidRequestError(NOT_BACKGROUND_STREAM, param="stream")
        events = await background.stream(response_id, after, tenant=tenant)
        return event_stream_response(events, None, state.settings.stream_send_timeout_seconds)
    if background is not None:
        return json_reply(await background.get(response_id, tenant=tenant))
    return json_reply(await state.service.get(response_id, tenant=tenant))


@router.post("/v1/responses/{response_id}/cancel")
async def cancel_response(request: Request, response_id: str) -> Response:
    state = gateway_state(request)
    tenant = principal_of(request).tenant
    if state.background is None:
        await state.service.get(response_id, tenant=tenant)
        raise InvalidRequestError(NOT_BACKGROUND_CANCEL, param="response_id")
    return json_reply(await state.background.cancel(response_id, tenant=tenant))


def _flag(value: str | None) -> bool:
    return value is not None and value.lower() in ("true", "1")


def _sequence_number(value: str | None) -> int:
    """``starting_after``: events numbered above it (-1, the default: from the first)."""
    if value is None:
        return -1
    try:
        return int(value)
    except ValueError:
        raise InvalidRequestError(
            f"Invalid 'starting_after': expected an integer, got {value!r}.",
            param="starting_after",
        ) from None


@router.delete("/v1/responses/{response_id}")
async def delete_response(request: Request, response_id: str) -> Response:
    state = gateway_state(request)
    tenant = principal_of(request).tenant
    if state.background is not None:
        return json_reply(await state.background.delete(response_id, tenant=tenant))
    return json_reply(await state.service.delete(response_id, tenant=tenant))


@router.get("/v1/responses/{response_id}/input_items")
async def list_input_items(request: Request, response_id: str) -> Response:
    params = page_params(request)
    page = await gateway_state(request).service.input_items(
        response_id,
        tenant=principal_of(request).tenant,
        after=params.after,
        limit=params.limit,
        order=params.order,
    )
    return list_reply(page)


# The hot path skips FastAPI's per-request dependency solving: it reads its own body and
# validates it itself. A plain Starlette route costs ~20 µs less per request (bench/README.md).
HOT_ROUTES = [Route("/v1/responses", create_response, methods=["POST"])]
