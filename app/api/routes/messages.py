"""``POST /v1/messages`` and ``/v1/messages/count_tokens``: Anthropic's Messages API over the
same service as ``/v1/responses`` (the translation is ``app.frontends.anthropic``).

Claude Code adds ``?beta=true`` and ``anthropic-beta`` headers: both are accepted and ignored.
The credential is ``x-api-key`` or ``Authorization: Bearer`` (``app.api.auth``); a client's own
credential reaches only an upstream configured with ``forward_client_key``, as a bearer token.
Every error, the gateway's or the upstream's, is in Anthropic's envelope (``app.api.errors``
answers so for every ``/v1/messages`` path).
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator

import orjson
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from app.api.body import read_json_object, validate
from app.api.disconnect import OPENING_STREAM, WAITING_FOR_ANSWER, unless_gone
from app.api.rate_limit import Meter, charge_usage, meter_of
from app.api.routes.responses import client_headers
from app.api.sse import event_stream
from app.api.state import gateway_state
from app.api.tenancy import principal_of
from app.frontends.anthropic.errors import error_body
from app.frontends.anthropic.requests import to_responses
from app.frontends.anthropic.responses import to_message
from app.frontends.anthropic.stream import MessageStream
from app.frontends.anthropic.tokens import estimate_input_tokens
from app.protocol.json_types import JsonObject
from app.protocol.requests import CreateResponseRequest, ParsedRequest, check_create_request

logger = logging.getLogger(__name__)


async def _frames(
    events: AsyncIterator[JsonObject], translator: MessageStream, meter: Meter | None
) -> AsyncIterator[bytes]:
    try:
        async for event in events:
            for out in translator.feed(event):
                yield b"event: " + out["type"].encode() + b"\ndata: " + orjson.dumps(out) + b"\n\n"
            if translator.finished:
                if meter is not None:  # the rate limits count the response's tokens
                    await meter.charge(event.get("response"))
                break
    finally:
        aclose = getattr(events, "aclose", None)
        if aclose is not None:
            await aclose()


async def create_message(request: Request) -> Response:
    state = gateway_state(request)
    body = await read_json_object(request, state.settings.max_body_bytes)
    translated = to_responses(body)
    params = validate(CreateResponseRequest, translated.body)
    check_create_request(params)
    # Nothing is stored (``store`` is false); the tenant is whose tools run (tool engine sessions).
    parsed = ParsedRequest(params, translated.body, principal_of(request).tenant)
    headers = client_headers(request)
    # A client gone cancels its work (app.api.disconnect).
    if translated.stream:
        opening = state.service.open_stream(parsed, headers)
        events = await unless_gone(request, opening, OPENING_STREAM)
        translator = MessageStream(
            translated.model, translated.stop_sequences, translated.omit_thinking
        )
        frames = _frames(events, translator, meter_of(request))
        return event_stream(frames, state.settings.stream_send_timeout_seconds)
    answer = state.service.create(parsed, headers)
    response = await unless_gone(request, answer, WAITING_FOR_ANSWER)
    await charge_usage(request, response)
    if response.get("status") == "failed":
        error = response.get("error") or {}
        message = str(error.get("message") or "The upstream failed to produce a response.")
        logger.warning("%s %s -> 500 api_error: %s", request.method, request.url.path, message)
        return JSONResponse(error_body(500, message), status_code=500)
    message_body = to_message(
        response,
        translated.model,
        translated.stop_sequences,
        omit_thinking=translated.omit_thinking,
    )
    return Response(orjson.dumps(message_body), media_type="application/json")


async def count_tokens(request: Request) -> Response:
    state = gateway_state(request)
    body = await read_json_object(request, state.settings.max_body_bytes)
    translated = to_responses({"max_tokens": 1, **body, "stream": False})
    return JSONResponse({"input_tokens": estimate_input_tokens(translated.body)})


ROUTES = [
    Route("/v1/messages", create_message, methods=["POST"]),
    Route("/v1/messages/count_tokens", count_tokens, methods=["POST"]),
]
