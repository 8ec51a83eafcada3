"""A recording proxy: forwards every request to an upstream and writes a cassette.

Every request (any method and path) is forwarded to ``upstream_url`` with its query string,
body and headers (minus hop-by-hop headers, ``host``, ``content-length`` and
``accept-encoding``); the response is streamed back to the client as it arrives (SSE is never
buffered) and, once complete, appended to the cassette as turn ``t<N>``, numbered in the
order the upstream started answering. The cassette file is rewritten atomically after each
turn, so an interrupted session keeps everything recorded so far. Requests that got no
upstream response (upstream unreachable -> 502, timeout -> 504) are not recorded.

The client is aiohttp's, with the transport-failure mapping of ``app.net.http``, as everywhere
else in the gateway.
"""

from __future__ import annotations

import json
import logging
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import aiohttp
import uvicorn
from starlette.applications import Starlette
from starlette.background import BackgroundTask
from starlette.requests import Request
from starlette.responses import Response, StreamingResponse
from starlette.routing import Route
from yarl import URL

from app.errors import UpstreamTimeoutError
from app.net.http import map_transport_error, release
from app.recording.cassette import (
    Cassette,
    RecordedRequest,
    RecordedResponse,
    Turn,
    dump_cassette,
    mask_headers,
    split_sse_lines,
)
from app.recording.replay import error_envelope

logger = logging.getLogger(__name__)

_ALL_METHODS = ["GET", "POST", "PUT", "PATCH", "DELETE", "HEAD", "OPTIONS"]

HOP_BY_HOP = frozenset(
    {
        "connection",
        "keep-alive",
        "proxy-authenticate",
        "proxy-authorization",
        "proxy-connection",
        "te",
        "trailer",
        "trailers",
        "transfer-encoding",
        "upgrade",
    }
)
_DROP_REQUEST_HEADERS = HOP_BY_HOP | {"host", "content-length", "accept-encoding"}
# aiohttp decodes gzip/deflate bodies, so the encoding and length no longer apply; uvicorn sets
# its own date and server headers.
_DROP_RESPONSE_HEADERS = HOP_BY_HOP | {"content-length", "content-encoding", "date", "server"}

DEFAULT_TIMEOUT = aiohttp.ClientTimeout(total=None, connect=10.0, sock_read=600.0)


@dataclass
class CassetteRecorder:
    """Collects turns in request-arrival order and rewrites the cassette after each one."""

    out: Path
    cassette: Cassette = field(default_factory=Cassette)
    _next_index: int = field(default=0, init=False)
    _done: dict[int, Turn] = field(default_factory=dict, init=False)

    def reserve(self) -> int:
        """A position for a request that just arrived."""
        self._next_index += 1
        return self._next_index

    def complete(self, index: int, turn: Turn) -> None:
        turn.filename = f"t{index}"
        self._done[index] = turn
        self.cassette.turns = [self._done[i] for i in sorted(self._done)]
        dump_cassette(self.cassette, self.out)
        logger.info(
            "recorded turn",
            extra={
                "turn": turn.filename,
                "method": turn.request.method,
                "path": turn.request.path,
                "status_code": turn.response.status_code,
            },
        )


def upstream_target(upstream_url: str, path: str, query: str) -> str:
    """Join the upstream base URL and a request path.

    A base URL ending in ``/v1`` (as OpenAI SDK users write it) is not doubled when the
    request path already starts with ``/v1/``.
    """
    base = upstream_url.rstrip("/")
    if urlsplit(base).path.endswith("/v1") and (path == "/v1" or path.startswith("/v1/")):
        base = base[: -len("/v1")]
    url = base + path
    return f"{url}?{query}" if query else url


def _parse_json(raw: bytes) -> Any:
    if not raw:
        return None
    try:
        return json.loads(raw)
    except ValueError:
        return None


def _response_body(raw: bytes) -> Any:
    if not raw:
        return None
    text = raw.decode("utf-8", errors="replace")
    try:
        return json.loads(text)
    except ValueError:
        return text


def _forward_headers(headers: Mapping[str, str], api_key: str | None) -> dict[str, str]:
    forwarded = {k.lower(): v for k, v in headers.items() if k.lower() not in _DROP_REQUEST_HEADERS}
    if api_key and "authorization" not in forwarded:
        forwarded["authorization"] = f"Bearer {api_key}"
    return forwarded


def create_record_app(
    upstream_url: str, out: Path, upstream_api_key: str | None = None
) -> Starlette:
    """A Starlette app that proxies to ``upstream_url`` and records to ``out``."""
    recorder = CassetteRecorder(out=Path(out))
    holder: dict[str, aiohttp.ClientSession] = {}

    @asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        async with aiohttp.ClientSession(timeout=DEFAULT_TIMEOUT) as client:
            holder["client"] = client
            yield
        holder.clear()

    async def proxy(request: Request) -> Response:
        client = holder.get("client")
        if client is None:  # lifespan not run (e.g. a bare ASGI call)
            client = aiohttp.ClientSession(timeout=DEFAULT_TIMEOUT)
            holder["client"] = client
        raw_body = await request.body()
        headers = _forward_headers(request.headers, upstream_api_key)
        url = upstream_target(upstream_url, request.url.path, request.url.query)
        recorded_request = RecordedRequest(
            method=request.method.upper(),
            path=request.url.path,
            body=_parse_json(raw_body),
            headers=mask_headers(headers),
            query_params=dict(request.query_params),
        )
        try:
            upstream = await client.request(
                request.method,
                URL(url, encoded=True),  # the query string as the client sent it
                headers=headers,
                data=raw_body,
                allow_redirects=False,
            )
        except (aiohttp.ClientError, OSError, TimeoutError) as exc:
            if isinstance(map_transport_error(exc), UpstreamTimeoutError):
                logger.warning("upstream timeout", extra={"url": url, "error": repr(exc)})
                return error_envelope(
                    f"Upstream {upstream_url} timed out: {exc!r}",
                    code="upstream_timeout",
                    status_code=504,
                    error_type="server_error",
                )
            logger.warning("upstream unreachable", extra={"url": url, "error": repr(exc)})
            return error_envelope(
                f"Upstream {upstream_url} is unreachable: {exc!r}",
                code="upstream_unreachable",
                status_code=502,
                error_type="server_error",
            )

        index = recorder.reserve()  # numbered once the upstream answered: no gaps for 502s
        content_type = upstream.headers.get("content-type", "")
        chunks: list[bytes] = []
        finished = False

        async def relay() -> AsyncIterator[bytes]:
            nonlocal finished
            try:
                async for chunk in upstream.content.iter_any():
                    chunks.append(chunk)
                    yield chunk
            except (aiohttp.ClientError, OSError, TimeoutError) as exc:
                logger.warning("upstream stream broke", extra={"url": url, "error": repr(exc)})
            finally:
                if not finished:
                    finished = True
                    record()
                release(upstream)

        def record() -> None:
            raw = b"".join(chunks)
            response = RecordedResponse(
                status_code=upstream.status,
                headers={"content-type": content_type} if content_type else {},
            )
            if "text/event-stream" in content_type.lower():
                response.sse = split_sse_lines(raw.decode("utf-8", errors="replace"))
            else:
                response.body = _response_body(raw)
            recorder.complete(index, Turn(request=recorded_request, response=response))

        response_headers = {
            k: v for k, v in upstream.headers.items() if k.lower() not in _DROP_RESPONSE_HEADERS
        }
        return StreamingResponse(
            relay(),
            status_code=upstream.status,
            headers=response_headers,
            background=BackgroundTask(release, upstream),
        )

    app = Starlette(routes=[Route("/{path:path}", proxy, methods=_ALL_METHODS)], lifespan=lifespan)
    app.state.recorder = recorder
    return app


def serve_record(
    upstream_url: str,
    out: Path,
    host: str,
    port: int,
    upstream_api_key: str | None = None,
) -> None:
    """Run the recording proxy on ``host:port`` until interrupted (blocking)."""
    logger.info("recording", extra={"upstream": upstream_url, "out": str(out)})
    uvicorn.run(create_record_app(upstream_url, out, upstream_api_key), host=host, port=port)
