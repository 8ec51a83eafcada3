"""A replay upstream: an HTTP server that answers requests from a cassette.

Matching rule: each incoming request is answered by the **first not-yet-used turn with the
same method and path** (query string ignored), in cassette order; among those, a turn whose
recorded body has the same ``stream`` flag as the request is preferred. Turns for paths the client
never requests (e.g. ``/v1/conversations`` calls a gateway handles itself) are simply skipped
over and stay unused. A used turn is never answered twice; when no unused turn matches, the
server answers 404 with an OpenAI error envelope (``code: cassette_exhausted``), or, with
``loop``, starts the cassette over.

``GET /v1/models`` is matched like any request while the cassette has an unused
``GET /v1/models`` turn. After that (listing models is idempotent and gateways poll it) the
first recorded ``/v1/models`` turn is answered again, and a cassette without one gets a list
synthesized from the ``model`` values of its recorded request bodies; neither is consumed nor
logged. ``GET /health`` answers ``{"status": "ok"}``. The control endpoints (never matched,
never logged):

- ``GET /__replay/requests``: every request matched against the cassette, in arrival order
  (``method``, ``path``, ``query_params``, ``headers``, ``body`` parsed as JSON, ``turn``).
- ``POST /__replay/reset``: mark every turn unused again and clear the received requests.
- ``GET /__replay/status``: the cursor (position after the last answered turn), the number of
  answered and remaining turns and the remaining turns themselves.

In strict mode, a request whose JSON body differs from the matched turn's recorded body is
answered 409 (``code: cassette_mismatch``) naming the first differing key; the turn stays
unused.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from app.recording.cassette import Cassette, Turn, load_cassette, recorded_models

logger = logging.getLogger(__name__)

_ALL_METHODS = ["GET", "POST", "PUT", "PATCH", "DELETE", "HEAD", "OPTIONS"]


def error_envelope(
    message: str, code: str, status_code: int, error_type: str = "invalid_request_error"
) -> JSONResponse:
    """An OpenAI-style error response."""
    return JSONResponse(
        {"error": {"message": message, "type": error_type, "param": None, "code": code}},
        status_code=status_code,
    )


def first_difference(recorded: Any, received: Any, path: str = "") -> str | None:
    """Describe the first place where two JSON values differ, or ``None`` if equal."""
    if isinstance(recorded, dict) and isinstance(received, dict):
        for key in sorted(set(recorded) | set(received), key=str):
            sub = f"{path}.{key}" if path else str(key)
            if key not in received:
                return f"'{sub}' is missing (recorded {_short(recorded[key])})"
            if key not in recorded:
                return f"'{sub}' was not recorded (received {_short(received[key])})"
            diff = first_difference(recorded[key], received[key], sub)
            if diff is not None:
                return diff
        return None
    if isinstance(recorded, list) and isinstance(received, list):
        for i, (a, b) in enumerate(zip(recorded, received, strict=False)):
            diff = first_difference(a, b, f"{path}[{i}]")
            if diff is not None:
                return diff
        if len(recorded) != len(received):
            where = path or "body"
            return f"'{where}' has {len(received)} items, recorded {len(recorded)}"
        return None
    if isinstance(recorded, bool) == isinstance(received, bool) and recorded == received:
        return None
    where = path or "body"
    return f"'{where}' differs: recorded {_short(recorded)}, received {_short(received)}"


def _short(value: Any, limit: int = 120) -> str:
    text = json.dumps(value, ensure_ascii=False)
    return text if len(text) <= limit else text[: limit - 3] + "..."


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


def turn_response(turn: Turn) -> Response:
    """Answer with a recorded response: raw SSE lines streamed one by one, or the JSON body."""
    recorded = turn.response
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


def _parse_body(raw: bytes) -> Any:
    if not raw:
        return None
    try:
        return json.loads(raw)
    except ValueError:
        return raw.decode("utf-8", errors="replace")


def create_replay_app(cassette: Cassette, strict: bool = False, loop: bool = False) -> Starlette:
    """A Starlette app serving ``cassette`` as an upstream (see the module docstring).

    With ``loop``, an exhausted cassette starts over instead of answering 404 (for demos).
    """
    state = ReplayState(cassette)
    models_turn = next(
        (t for t in cassette.turns if (t.request.method, t.request.path) == ("GET", "/v1/models")),
        None,
    )

    async def health(request: Request) -> Response:
        return JSONResponse({"status": "ok"})

    async def models(request: Request) -> Response:
        if state.find("GET", "/v1/models") is not None:
            return await replay(request)
        if models_turn is not None:
            return turn_response(models_turn)
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
        index = state.find(method, path, body)
        if (
            index is None
            and loop
            and any((t.request.method, t.request.path) == (method, path) for t in cassette.turns)
        ):
            state.rewind()
            index = state.find(method, path, body)
        if index is None:
            logger.warning("cassette exhausted", extra={"method": method, "path": path})
            return error_envelope(
                f"Replay cassette exhausted: no unanswered turn for {method} {path} "
                f"({sum(state.used)} of {len(cassette.turns)} turns answered).",
                code="cassette_exhausted",
                status_code=404,
            )
        turn = cassette.turns[index]
        if strict:
            diff = first_difference(
                _normalize_body(turn.request.body), _normalize_body(body), path=""
            )
            if diff is not None:
                return error_envelope(
                    f"Replay strict mode: request body for {method} {path} does not match "
                    f"recorded turn {turn.filename}: {diff}.",
                    code="cassette_mismatch",
                    status_code=409,
                )
        state.take(index)
        entry["turn"] = turn.filename
        return turn_response(turn)

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
    path: Path, host: str, port: int, strict: bool = False, loop: bool = False
) -> None:
    """Serve the cassette at ``path`` on ``host:port`` until interrupted (blocking)."""
    cassette = load_cassette(path)
    logger.info("replaying cassette", extra={"cassette": str(path), "turns": len(cassette.turns)})
    uvicorn.run(create_replay_app(cassette, strict=strict, loop=loop), host=host, port=port)
