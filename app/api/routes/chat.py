"""``POST /v1/chat/completions``: forwarded to the upstream serving the model, unchanged, so one
gateway URL serves both APIs. The answer (JSON, SSE or an error) streams back as it comes."""

from __future__ import annotations

import contextlib
import logging
from collections.abc import AsyncIterator

import orjson
from starlette.background import BackgroundTask
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from app.api.body import max_json_depth, parse_json_object, read_body
from app.api.disconnect import WAITING_FOR_ANSWER, unless_gone
from app.api.rate_limit import meter_of
from app.api.routes.responses import client_headers
from app.api.sse import PassthroughStream
from app.api.state import gateway_state
from app.core.ports import ChatCompletionsForwarder
from app.errors import NotFoundError, UpstreamEventTooLargeError
from app.options.limits import LimitsSettings
from app.protocol.json_types import JsonObject

logger = logging.getLogger(__name__)


async def chat_completions(request: Request) -> Response:
    state = gateway_state(request)
    body = await read_body(request, state.settings.max_body_bytes)
    upstream = state.upstream
    if not isinstance(upstream, ChatCompletionsForwarder):
        raise NotFoundError(
            "This gateway's upstream does not take chat completions.", code="unsupported_endpoint"
        )
    parsed = parse_json_object(body, max_json_depth(request))
    # A client gone cancels the upstream request (app.api.disconnect), until the answer (JSON)
    # or its stream's headers came; a stream then stops as its client goes (StreamingResponse).
    answer = _answer(request, upstream, body, parsed)
    return await unless_gone(request, answer, WAITING_FOR_ANSWER)


async def _answer(
    request: Request, upstream: ChatCompletionsForwarder, body: bytes, parsed: JsonObject
) -> Response:
    reply = await upstream.forward_chat_completions(body, parsed, client_headers(request))
    headers = {"content-type": reply.content_type}
    if not reply.content_type.startswith("text/event-stream"):
        # A JSON answer (or error) is small: read whole, it is cheaper than streaming it.
        try:
            content = await _read_at_most(reply.chunks, gateway_state(request).settings.limits)
        finally:
            await reply.close()
        if reply.status_code >= 400:
            # The upstream's own refusal, passed through: one line, as for the gateway's own.
            logger.info(
                "%s %s -> %d (the upstream's answer, passed through): %s",
                request.method,
                request.url.path,
                reply.status_code,
                content[:300].decode("utf-8", "replace"),
            )
        meter = meter_of(request)
        if meter is not None and reply.status_code < 400:  # count the completion's tokens
            with contextlib.suppress(orjson.JSONDecodeError):
                await meter.charge(orjson.loads(content))
        return Response(content, status_code=reply.status_code, headers=headers)
    headers["cache-control"] = "no-cache"
    headers["x-accel-buffering"] = "no"
    return PassthroughStream(
        reply.chunks,
        status_code=reply.status_code,
        headers=headers,
        background=BackgroundTask(reply.close),
        send_timeout=gateway_state(request).settings.stream_send_timeout_seconds,
    )


async def _read_at_most(chunks: AsyncIterator[bytes], limits: LimitsSettings) -> bytes:
    """The upstream's whole JSON answer, at most ``max_upstream_event_bytes`` of it (502)."""
    parts: list[bytes] = []
    size, limit = 0, limits.max_upstream_event_bytes
    async for chunk in chunks:
        size += len(chunk)
        if size > limit:
            raise UpstreamEventTooLargeError(limit)
        parts.append(chunk)
    return b"".join(parts)


ROUTES = [Route("/v1/chat/completions", chat_completions, methods=["POST"])]
