"""``GET /v1/responses`` upgraded to a WebSocket: OpenAI's WebSocket mode.

The client sends ``{"type": "response.create", ...}`` text frames whose other fields are a
``POST /v1/responses`` body (``stream`` is implicit and ignored; ``background`` is refused;
``generate: false`` is a warm-up). Each server event is one text frame holding the JSON an SSE
``data:`` line would hold. One response runs at a time; a frame that arrives meanwhile waits
its turn. Each turn goes through the HTTP route's checks and ``ResponsesService.open_stream``,
so the store, conversations, the tool loop and mid-stream failures (``error`` then
``response.failed``) are the HTTP route's own. A request refused before its stream starts is
one ``error`` frame, ``{"type": "error", "status": <HTTP status>, "error": {message, type,
param, code}}``, and the socket stays open for the next request.

The connection keeps its most recent response in memory (``app.api.ws_connection``): a
``previous_response_id`` naming it continues without the store, even with ``store: false``; a
failed or refused turn forgets it; another connection sees only what was stored. A client that
disconnects mid-response closes the response's event stream, which cancels the upstream request;
one that disconnects while its stream opens cancels the opening.
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
import logging
from collections.abc import AsyncIterator

import orjson
from starlette.routing import WebSocketRoute
from starlette.websockets import WebSocket

from app.api.body import DEFAULT_MAX_JSON_DEPTH, parse_json_object, validate
from app.api.disconnect import OPENING_STREAM
from app.api.rate_limit import admit_turn, charge_usage
from app.api.routes.responses import client_headers
from app.api.state import GatewayState, gateway_state
from app.api.tenancy import principal_of
from app.api.ws_connection import ConnectionStore, WarmupUpstream
from app.core.history import rehydrate
from app.errors import GatewayError, InvalidRequestError, RequestTooLargeError
from app.protocol.json_types import JsonObject
from app.protocol.metadata import check_metadata
from app.protocol.requests import CreateResponseRequest, ParsedRequest, check_create_request

logger = logging.getLogger(__name__)

_TERMINAL = frozenset({"response.completed", "response.incomplete", "response.failed"})
_CONTINUABLE = frozenset({"completed", "incomplete"})


class _Disconnected(Exception):
    """The client went away."""


def parse_frame(
    raw: str | bytes, limit: int, tenant: str, max_depth: int = DEFAULT_MAX_JSON_DEPTH
) -> tuple[ParsedRequest, bool]:
    """A ``response.create`` frame as the HTTP route's ``ParsedRequest`` (for ``tenant``),
    and ``generate``."""
    data = raw.encode() if isinstance(raw, str) else raw
    if len(data) > limit:
        raise RequestTooLargeError(f"The request body exceeds the limit of {limit} bytes.")
    body = parse_json_object(data, max_depth)
    kind = body.pop("type", None)
    if kind != "response.create":
        raise InvalidRequestError(
            f"Invalid value for 'type': {kind!r}. Expected 'response.create'.",
            param="type",
            code="invalid_value",
        )
    nested = body.pop("response", None)
    if isinstance(nested, dict):  # an earlier shape: the body under "response"
        body = {**nested, **body}
    generate = body.pop("generate", True)
    if not isinstance(generate, bool):
        raise InvalidRequestError(
            "Invalid value for 'generate': expected a boolean.", param="generate"
        )
    if body.get("background"):
        raise InvalidRequestError(
            "'background' is not supported in WebSocket mode.", param="background"
        )
    body["stream"] = True  # implicit over a WebSocket, whatever the frame said
    parsed = validate(CreateResponseRequest, body)
    check_create_request(parsed)
    check_metadata(body.get("metadata"), "metadata")
    return ParsedRequest(parsed, body, tenant), generate


def error_frame(error: GatewayError) -> JsonObject:
    """A refusal before a response starts, as OpenAI's WebSocket mode sends it."""
    return {"type": "error", "status": error.status_code, "error": error.to_error()}


class ResponsesSocket:
    """One WebSocket connection: its frames, its turns and its most recent response."""

    def __init__(self, websocket: WebSocket, state: GatewayState) -> None:
        self._websocket = websocket
        self._limit = state.settings.max_body_bytes
        self._depth = state.settings.limits.max_json_depth
        self._headers = client_headers(websocket)
        # The principal of the WebSocket's handshake: every turn runs for its tenant.
        self._tenant = principal_of(websocket).tenant
        self.store = ConnectionStore(state.store, self._tenant)
        # Around the path the rounds take (``ResponsesService.inference``: traced or not).
        self._upstream = WarmupUpstream(state.service.inference)
        # The application's service with this connection's store and upstream (its toolkit,
        # limits and hooks are shared): ``app.core`` stays unaware of connections.
        self._service = copy.copy(state.service)
        self._service.store = self.store
        self._service.upstream = self._service.inference = self._upstream
        self._inbox: asyncio.Queue[str | bytes | None] = asyncio.Queue()
        self._gone = asyncio.Event()

    async def run(self) -> None:
        reader = asyncio.create_task(self._read())
        try:
            while True:
                frame = await self._inbox.get()
                if frame is None:
                    return
                await self.turn(frame)
        except _Disconnected:
            return
        finally:
            reader.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await reader

    async def _read(self) -> None:
        """Frames into the inbox; ``None`` (and ``_gone``) once the client disconnects."""
        try:
            while True:
                message = await self._websocket.receive()
                if message["type"] == "websocket.disconnect":
                    return
                frame = message.get("text")
                if frame is None:
                    frame = message.get("bytes") or b""
                self._inbox.put_nowait(frame)
        finally:
            self._gone.set()
            self._inbox.put_nowait(None)

    async def turn(self, frame: str | bytes) -> None:
        """One ``response.create``: refused (one ``error`` frame) or streamed to its end."""
        store = self.store
        store.begin_turn()
        try:
            await admit_turn(self._websocket)  # the caller's rate limits (app.api.rate_limit)
            request, generate = parse_frame(frame, self._limit, self._tenant, self._depth)
            self._upstream.warmup = not generate
            events = await self._open(request)
        except _Disconnected:
            raise
        except GatewayError as exc:
            await self._refuse(exc)
            return
        except Exception:
            logger.exception("websocket turn failed before its stream started")
            await self._refuse(GatewayError("The server had an error processing your request."))
            return
        try:
            final = await self._stream(events)
        finally:
            self._upstream.warmup = False
        await charge_usage(self._websocket, final)
        if final is None or final.get("status") not in _CONTINUABLE:
            store.evict()
        elif request.params.store is False:
            try:
                history = await rehydrate(store, request.params, tenant=request.tenant)
            except GatewayError:
                store.evict()
                return
            store.remember(history, final)

    async def _open(self, request: ParsedRequest) -> AsyncIterator[JsonObject]:
        """The turn's stream; a client that goes while it opens (before the upstream's first
        bytes) cancels it, as on the HTTP route (``app.api.disconnect``)."""
        opening = asyncio.ensure_future(self._service.open_stream(request, self._headers))
        gone = asyncio.ensure_future(self._gone.wait())
        try:
            await asyncio.wait({opening, gone}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            gone.cancel()
            if not opening.done():
                opening.cancel()
                with contextlib.suppress(BaseException):
                    await opening
        if opening.cancelled():
            logger.info(
                "websocket %s: the client closed the connection while %s; its work was cancelled",
                self._websocket.url.path,
                OPENING_STREAM,
            )
            raise _Disconnected
        return opening.result()

    async def _refuse(self, error: GatewayError) -> None:
        self.store.evict()
        _log_refusal(error)
        await self._send(error_frame(error))

    async def _stream(self, events: AsyncIterator[JsonObject]) -> JsonObject | None:
        """Send every event; the final response, or ``None`` when the stream did not finish.
        A disconnect stops the stream (closing it cancels the upstream request)."""
        final: list[JsonObject] = []

        async def pump() -> None:
            try:
                async for event in events:
                    await self._send(event)
                    if event.get("type") in _TERMINAL and isinstance(event.get("response"), dict):
                        final.append(event["response"])
            finally:
                aclose = getattr(events, "aclose", None)
                if aclose is not None:
                    await aclose()

        sending = asyncio.create_task(pump())
        gone = asyncio.create_task(self._gone.wait())
        try:
            await asyncio.wait({sending, gone}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            gone.cancel()
            if not sending.done():
                sending.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await sending
        if sending.cancelled() or self._gone.is_set():
            raise _Disconnected
        sending.result()
        return final[-1] if final else None

    async def _send(self, event: JsonObject) -> None:
        try:
            await self._websocket.send_text(orjson.dumps(event).decode())
        except Exception as exc:  # the client is gone (the server's own exception type)
            self._gone.set()
            raise _Disconnected from exc


def _log_refusal(error: GatewayError) -> None:
    """The one line a refused WebSocket request leaves (as ``app.api.errors`` logs HTTP's)."""
    level = logging.WARNING if error.status_code >= 500 else logging.INFO
    logger.log(
        level,
        "WS /v1/responses -> %d %s code=%s param=%s: %s",
        error.status_code,
        error.type,
        error.code,
        error.param,
        error.message[:500],
    )


async def responses_socket(websocket: WebSocket) -> None:
    """``GET /v1/responses`` with ``Upgrade: websocket``."""
    state = gateway_state(websocket)
    await websocket.accept()
    await ResponsesSocket(websocket, state).run()


ROUTES = [WebSocketRoute("/v1/responses", responses_socket)]
