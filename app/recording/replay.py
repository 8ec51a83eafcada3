"""A replay upstream: an HTTP server that answers requests from a cassette.

Two matching modes choose the turn that answers a request.

``match="content"`` (what ``respgate replay`` and ``respgate demo`` use): a request is answered
by a turn with the same method and path whose recorded body asks the same thing: the same
``model``, ``instructions`` and ``input`` (or ``messages``/``prompt``), normalized as
:mod:`app.recording.matching` describes; other keys (``stream``, ``store``, ...) do not matter,
and a request without those fields matches every turn of its method and path. A stream request
(``"stream": true``) is answered with an SSE turn and any other request with a JSON turn; when
only the other form was recorded, a ``POST .../responses`` answer is converted
(:mod:`app.recording.convert`). Turns are never exhausted: repeated requests get the matching
turns in cassette order, then the first again. A request that no turn matches is answered 400
(``code: cassette_no_match``, ``param: input``) with an OpenAI error envelope naming what was
asked and what the cassette knows; a method and path the cassette never saw, 404 with the
same code.

``match="order"`` (the default of :func:`create_replay_app`, for tests that replay a recorded
session): each request is answered by the **first not-yet-used turn with the same method and
path** (query string ignored), in cassette order, whatever its body; among those, a turn whose
recorded body has the same ``stream`` flag as the request is preferred. Turns for paths the
client never requests (e.g. ``/v1/conversations`` calls a gateway handles itself) are simply
skipped over and stay unused. A used turn is never answered twice; when no unused turn matches,
the server answers 404 with an OpenAI error envelope (``code: cassette_exhausted``), or, with
``loop``, starts the cassette over.

``GET /v1/models`` is matched like any request while the cassette has an unused
``GET /v1/models`` turn (order mode). After that, and always in content mode (listing models is
idempotent and gateways poll it), the first recorded ``/v1/models`` turn is answered again, and
a cassette without one gets a list synthesized from the ``model`` values of its recorded
request bodies; neither is consumed nor logged. ``GET /health`` answers ``{"status": "ok"}``.
The control endpoints (never matched, never logged):

- ``GET /__replay/requests``: every request matched against the cassette, in arrival order
  (``method``, ``path``, ``query_params``, ``headers``, ``body`` parsed as JSON, ``turn``).
- ``POST /__replay/reset``: mark every turn unused again and clear the received requests.
- ``GET /__replay/status``: the cursor (position after the last answered turn), the number of
  answered and remaining turns and the remaining turns themselves.

In strict mode, a request whose JSON body differs from the matched turn's recorded body (in
content mode, apart from ``stream``) is answered 409 (``code: cassette_mismatch``) naming the
first differing key; the turn stays unused.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from app.recording.cassette import (
    Cassette,
    RecordedResponse,
    Turn,
    load_cassette,
    recorded_models,
)
from app.recording.convert import as_json, as_sse
from app.recording.matching import content_key, describe_request, first_difference

logger = logging.getLogger(__name__)

_ALL_METHODS = ["GET", "POST", "PUT", "PATCH", "DELETE", "HEAD", "OPTIONS"]

MatchMode = Literal["order", "content"]


def error_envelope(
    message: str,
    code: str,
    status_code: int,
    error_type: str = "invalid_request_error",
    param: str | None = None,
) -> JSONResponse:
    """An OpenAI-style error response."""
    error = {"message": message, "type": error_type, "param": param, "code": code}
    return JSONResponse({"error": error}, status_code=status_code)


def _normalize_body(body: Any) -> Any:
    return None if body in (None, {}, "") else body


@dataclass
class ReplayState:
    """Which turns were answered, and what was received."""

    cassette: Cassette
    used: list[bool] = field(default_factory=list)
    received: list[dict[str, Any]] = field(default_factory=list)
    cursor: int = 0

    def __post_init__(self) -> None:
        self.reset()

    def reset(self) -> None:
        self.used = [False] * len(self.cassette.turns)
        self.received = []
        self.cursor = 0

    def find(self, method: str, path: str, body: Any = None) -> int | None:
        """Index of the first unused turn with this method and path.

        Among those, a turn recorded with the same ``stream`` flag as ``body`` is preferred, so
        that a cassette holding a JSON and a streaming answer serves each to the right request.
        """
        candidates = [
            i
            for i, turn in enumerate(self.cassette.turns)
            if not self.used[i] and turn.request.method == method and turn.request.path == path
        ]
        if not candidates:
            return None
        if isinstance(body, dict):
            wanted = bool(body.get("stream"))
            for i in candidates:
                recorded = self.cassette.turns[i].request.body
                if isinstance(recorded, dict) and bool(recorded.get("stream")) == wanted:
                    return i
        return candidates[0]

    def route(self, method: str, path: str) -> list[int]:
        """Indexes of the turns recorded for ``method`` and ``path``."""
        return [
            i
            for i, turn in enumerate(self.cassette.turns)
            if (turn.request.method, turn.request.path) == (method, path)
        ]

    def choose(self, method: str, path: str, body: Any) -> tuple[int, RecordedResponse] | None:
        """Content mode: the turn that answers this request, and its answer in the form asked.

        ``None`` when no turn of this method and path asks the same thing.
        """
        key = content_key(body)
        turns = self.cassette.turns
        matching = [
            i
            for i in self.route(method, path)
            if key is None or content_key(turns[i].request.body) in (key, None)
        ]
        if not matching:
            return None
        wants_sse = isinstance(body, dict) and bool(body.get("stream"))
        same_form = [i for i in matching if turns[i].response.is_sse == wants_sse]
        if same_form:
            unused = [i for i in same_form if not self.used[i]]
            if not unused:  # every answer was given: start this request's turns over
                for i in same_form:
                    self.used[i] = False
                unused = same_form
            return unused[0], turns[unused[0]].response
        for i in matching:
            recorded = turns[i].response
            converted = as_sse(recorded) if wants_sse else as_json(recorded)
            if converted is not None:
                return i, converted
        return matching[0], turns[matching[0]].response

    def known_requests(self, method: str, path: str) -> list[str]:
        """What the cassette's turns for ``method`` and ``path`` ask, each described once."""
        described: list[str] = []
        for i in self.route(method, path):
            text = describe_request(self.cassette.turns[i].request.body)
            if text not in described:
                described.append(text)
        return described

    def rewind(self) -> None:
        """Mark every turn unused again, keeping what was received (``--loop``)."""
        self.used = [False] * len(self.cassette.turns)

    def take(self, index: int) -> Turn:
        self.used[index] = True
        self.cursor = max(self.cursor, index + 1)
        return self.cassette.turns[index]

    def status(self) -> dict[str, Any]:
        remaining = [
            {
                "index": i,
                "filename": t.filename,
                "method": t.request.method,
                "path": t.request.path,
            }
            for i, t in enumerate(self.cassette.turns)
            if not self.used[i]
        ]
        return {
            "cursor": self.cursor,
            "total": len(self.cassette.turns),
            "answered": sum(self.used),
            "remaining": len(remaining),
            "remaining_turns": remaining,
            "received": len(self.received),
        }


def turn_response(turn: Turn, recorded: RecordedResponse | None = None) -> Response:
    """Answer with a recorded response (``turn``'s own unless ``recorded`` is given): raw SSE
    lines streamed one by one, or the JSON body."""
    recorded = recorded if recorded is not None else turn.response
    headers = {"x-replay-turn": turn.filename}
    if recorded.sse is not None:
        lines = list(recorded.sse)

        async def stream() -> AsyncIterator[bytes]:
            for line in lines:
                yield line.encode("utf-8")
                await asyncio.sleep(0)

        return StreamingResponse(
            stream(),
            status_code=recorded.status_code,
            headers={**headers, "cache-control": "no-cache"},
            media_type=recorded.content_type,
        )
    body = recorded.body
    content_type = recorded.content_type
    if body is None:
        content = b""
    elif isinstance(body, str) and "json" not in content_type.lower():
        content = body.encode("utf-8")
    else:
        content = json.dumps(body, ensure_ascii=False).encode("utf-8")
    return Response(
        content, status_code=recorded.status_code, headers=headers, media_type=content_type
    )


def no_match_response(state: ReplayState, method: str, path: str, body: Any) -> Response:
    """Content mode: the error for a request no turn answers, naming what the cassette knows."""
    known = state.known_requests(method, path)
    if not known:
        routes = sorted({f"{t.request.method} {t.request.path}" for t in state.cassette.turns})
        logger.warning("replay: no turn for %s %s", method, path)
        return error_envelope(
            f"This replay cassette has no turn for {method} {path}; it has "
            f"{', '.join(routes) or 'no turns'}.",
            code="cassette_no_match",
            status_code=404,
        )
    logger.warning("replay: no turn matches %s %s (%s)", method, path, describe_request(body))
    return error_envelope(
        f"This replay cassette has no recorded answer for {describe_request(body)}. "
        f"It only knows: {'; '.join(known)}.",
        code="cassette_no_match",
        status_code=400,
        param="input",
    )


def _parse_body(raw: bytes) -> Any:
    if not raw:
        return None
    try:
        return json.loads(raw)
    except ValueError:
        return raw.decode("utf-8", errors="replace")


def _order_choice(
    state: ReplayState, method: str, path: str, body: Any, loop: bool
) -> tuple[int, RecordedResponse] | None:
    index = state.find(method, path, body)
    if index is None and loop and state.route(method, path):
        state.rewind()
        index = state.find(method, path, body)
    return None if index is None else (index, state.cassette.turns[index].response)


def _exhausted(state: ReplayState, method: str, path: str) -> Response:
    logger.warning("cassette exhausted", extra={"method": method, "path": path})
    return error_envelope(
        f"Replay cassette exhausted: no unanswered turn for {method} {path} "
        f"({sum(state.used)} of {len(state.cassette.turns)} turns answered).",
        code="cassette_exhausted",
        status_code=404,
    )


def _strict_difference(turn: Turn, body: Any, ignore_stream: bool) -> str | None:
    recorded, received = _normalize_body(turn.request.body), _normalize_body(body)
    if ignore_stream and isinstance(recorded, dict) and isinstance(received, dict):
        recorded = {k: v for k, v in recorded.items() if k != "stream"}
        received = {k: v for k, v in received.items() if k != "stream"}
    return first_difference(recorded, received, path="")


def create_replay_app(
    cassette: Cassette, strict: bool = False, loop: bool = False, match: MatchMode = "order"
) -> Starlette:
    """A Starlette app serving ``cassette`` as an upstream (see the module docstring).

    ``match`` chooses how requests find their turns. With ``loop`` (order mode), an exhausted
    cassette starts over instead of answering 404.
    """
    state = ReplayState(cassette)
    models_turn = next(iter(state.route("GET", "/v1/models")), None)

    async def health(request: Request) -> Response:
        return JSONResponse({"status": "ok"})

    async def models(request: Request) -> Response:
        if match == "order" and state.find("GET", "/v1/models") is not None:
            return await replay(request)
        if models_turn is not None:
            return turn_response(cassette.turns[models_turn])
        data = [
            {"id": model, "object": "model", "created": 0, "owned_by": "respgate-replay"}
            for model in recorded_models(cassette)
        ]
        return JSONResponse({"object": "list", "data": data})

    async def list_received(request: Request) -> Response:
        return JSONResponse(state.received)

    async def reset(request: Request) -> Response:
        state.reset()
        return JSONResponse(state.status())

    async def status(request: Request) -> Response:
        return JSONResponse(state.status())

    async def replay(request: Request) -> Response:
        method = request.method.upper()
        path = request.url.path
        body = _parse_body(await request.body())
        entry: dict[str, Any] = {
            "method": method,
            "path": path,
            "query_params": dict(request.query_params),
            "headers": dict(request.headers),
            "body": body,
            "turn": None,
        }
        state.received.append(entry)
        if match == "content":
            choice = state.choose(method, path, body)
            if choice is None:
                return no_match_response(state, method, path, body)
        else:
            choice = _order_choice(state, method, path, body, loop)
            if choice is None:
                return _exhausted(state, method, path)
        index, answer = choice
        turn = cassette.turns[index]
        if strict:
            diff = _strict_difference(turn, body, ignore_stream=match == "content")
            if diff is not None:
                return error_envelope(
                    f"Replay strict mode: request body for {method} {path} does not match "
                    f"recorded turn {turn.filename}: {diff}.",
                    code="cassette_mismatch",
                    status_code=409,
                )
        state.take(index)
        entry["turn"] = turn.filename
        return turn_response(turn, answer)

    routes = [
        Route("/health", health, methods=["GET"]),
        Route("/v1/models", models, methods=["GET"]),
        Route("/__replay/requests", list_received, methods=["GET"]),
        Route("/__replay/reset", reset, methods=["POST"]),
        Route("/__replay/status", status, methods=["GET"]),
        Route("/{path:path}", replay, methods=_ALL_METHODS),
    ]
    app = Starlette(routes=routes)
    app.state.replay = state
    return app


def serve_replay(
    path: Path,
    host: str,
    port: int,
    strict: bool = False,
    loop: bool = False,
    match: MatchMode = "order",
) -> None:
    """Serve the cassette at ``path`` on ``host:port`` until interrupted (blocking)."""
    cassette = load_cassette(path)
    logger.info("replaying cassette", extra={"cassette": str(path), "turns": len(cassette.turns)})
    app = create_replay_app(cassette, strict=strict, loop=loop, match=match)
    uvicorn.run(app, host=host, port=port)
