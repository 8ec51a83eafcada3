"""What every HTTP upstream shares: the pooled aiohttp session, credentials, error mapping,
retries and the circuit breaker (``retry``), ``/v1/models``, readiness and the raw
``/v1/chat/completions`` passthrough.

The hot path runs on aiohttp's ClientSession: on this project's benchmark it adds a third of
the latency of httpx.AsyncClient and sustains seven times the request rate (bench/README.md).
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Mapping
from typing import Any, TypedDict, Unpack

import aiohttp
import orjson

from app.core.ports import RawReply, RawStream
from app.errors import UpstreamError, UpstreamEventTooLargeError, UpstreamHTTPError
from app.net.http import decode_json_object, error_envelope, map_transport_error, release
from app.protocol.json_types import JsonObject
from app.upstream.pool import PoolWatch, pool_connector
from app.upstream.retry import NO_RETRY, RetryPolicy, UpstreamGuard
from app.upstream.sse import DEFAULT_MAX_EVENT_BYTES

logger = logging.getLogger(__name__)

JSON_TYPE = "application/json"
SSE_TYPE = "text/event-stream"

# The pool's default limit (``max_connections``; see app/options/upstreams.py for why).
DEFAULT_MAX_CONNECTIONS = 1024
# A wait for a pool connection this long or longer logs a warning (``pool_wait_warn_seconds``).
DEFAULT_POOL_WAIT_WARN_SECONDS = 1.0
# Below the 5 s keep-alive timeout of the usual inference servers (see ``HttpUpstream.session``).
KEEPALIVE_SECONDS = 3.0
# The request id, OpenAI's organization and project; a trace context when tracing is on.
_PASSED_HEADERS = (
    "openai-organization",
    "openai-project",
    "x-request-id",
    "traceparent",
    "tracestate",
)


class HttpOptions(TypedDict, total=False):
    """How an ``HttpUpstream`` connects (keyword arguments of its constructor)."""

    api_key: str | None
    forward_client_key: bool
    connect_timeout: float
    read_timeout: float
    # The upstream's name, in the pool's warnings and metrics (``pool``).
    name: str
    # The pool's connections at most; 0: no limit. A request past them waits for one.
    max_connections: int
    # A wait for a connection this long or longer logs a warning (``pool.PoolWatch``).
    pool_wait_warn_seconds: float
    # One SSE line or event, or one JSON answer ([limits] max_upstream_event_bytes).
    max_event_bytes: int
    # Retries of requests that never started, and the circuit breaker (``retry``); none: a
    # request is sent once and no circuit is kept.
    guard: UpstreamGuard


class HttpUpstream:
    """An inference server over HTTP, with one pooled aiohttp session."""

    def __init__(self, base_url: str, **options: Unpack[HttpOptions]) -> None:
        self.base_url = base_url.rstrip("/")
        self.max_event_bytes = options.get("max_event_bytes", DEFAULT_MAX_EVENT_BYTES)
        self._api_key = options.get("api_key")
        self._forward_client_key = options.get("forward_client_key", False)
        self._timeout = aiohttp.ClientTimeout(
            total=None,
            connect=options.get("connect_timeout", 10.0),
            sock_read=options.get("read_timeout", 600.0),
        )
        self.pool = PoolWatch(
            options.get("name", "upstream"),
            limit=options.get("max_connections", DEFAULT_MAX_CONNECTIONS),
            warn_after=options.get("pool_wait_warn_seconds", DEFAULT_POOL_WAIT_WARN_SECONDS),
        )
        self.guard = options.get("guard") or UpstreamGuard(RetryPolicy(retries=0))
        self._session: aiohttp.ClientSession | None = None
        self._probe_session: aiohttp.ClientSession | None = None

    @property
    def session(self) -> aiohttp.ClientSession:
        if self._session is None:
            # An idle connection is dropped after KEEPALIVE_SECONDS, before the upstream's own
            # keep-alive timeout closes it (uvicorn's, vLLM's and SGLang's: 5 s; aiohttp's
            # default is 15 s): a request written on a connection the server is closing at
            # that moment fails with a reset, a 502 for the client (the soak found it,
            # tests/serving/test_soak.py). The pool's waits for a connection are traced
            # (``pool.PoolWatch``).
            connector = pool_connector(
                self.pool,
                ttl_dns_cache=300,
                enable_cleanup_closed=False,
                keepalive_timeout=KEEPALIVE_SECONDS,
            )
            self._session = aiohttp.ClientSession(
                connector=connector,
                timeout=self._timeout,
                json_serialize=lambda obj: orjson.dumps(obj).decode(),
                auto_decompress=True,
            )
        return self._session

    @property
    def probe_session(self) -> aiohttp.ClientSession:
        """Readiness checks' own session, outside the pool: with every pooled connection
        carrying a stream (a busy GPU server), a check waiting for one would time out and
        take a working replica out of its load balancer."""
        if self._probe_session is None:
            connector = aiohttp.TCPConnector(
                limit=1, ttl_dns_cache=300, keepalive_timeout=KEEPALIVE_SECONDS
            )
            self._probe_session = aiohttp.ClientSession(connector=connector)
        return self._probe_session

    async def aclose(self) -> None:
        self.pool.close()
        for session in (self._session, self._probe_session):
            if session is not None:
                await session.close()
        self._session = self._probe_session = None

    def headers_for(self, headers: Mapping[str, str], accept: str) -> dict[str, str]:
        """What goes upstream: this upstream's configured key, or, when it is configured with
        ``forward_client_key``, the client's own credential (``headers["authorization"]``,
        which the front end fills from the principal: never a gateway key); tracing."""
        out = {"content-type": JSON_TYPE, "accept": accept}
        auth = headers.get("authorization") if self._forward_client_key else None
        if auth:
            out["authorization"] = auth
        elif self._api_key:
            out["authorization"] = f"Bearer {self._api_key}"
        for name in _PASSED_HEADERS:
            value = headers.get(name)
            if value:
                out[name] = value
        return out

    async def post_json(self, url: str, body: JsonObject, headers: Mapping[str, str]) -> JsonObject:
        """POST ``body`` and decode the JSON answer; HTTP errors raise ``UpstreamHTTPError``."""
        resp, retried = await self._send(url, orjson.dumps(body), headers, JSON_TYPE)
        try:
            async with resp:
                raw = await read_at_most(resp, self.max_event_bytes)
        except UpstreamError:
            raise
        except Exception as exc:
            raise map_transport_error(exc) from exc
        if resp.status >= 400:
            raise _http_error(resp.status, raw, retried)
        return decode_json_object(raw)

    async def post_stream(
        self, url: str, body: JsonObject, headers: Mapping[str, str]
    ) -> aiohttp.ClientResponse | JsonObject:
        """POST ``body`` asking for SSE: the open response, or the decoded JSON object when the
        server ignored ``stream`` and answered at once. HTTP errors raise before any event."""
        resp, retried = await self._send(url, orjson.dumps(body), headers, SSE_TYPE)
        if resp.status < 400 and resp.content_type != JSON_TYPE:
            return resp
        try:
            raw = await read_at_most(resp, self.max_event_bytes)
        except UpstreamError:
            raise
        except Exception as exc:
            raise map_transport_error(exc) from exc
        finally:
            resp.release()
        if resp.status >= 400:
            raise _http_error(resp.status, raw, retried)
        return decode_json_object(raw)

    async def _send(
        self, url: str, data: bytes, headers: Mapping[str, str], accept: str
    ) -> tuple[aiohttp.ClientResponse, bool]:
        """POST ``data`` through the guard: the response (body unread) and whether the
        request was retried."""
        sent = self.headers_for(headers, accept)
        return await self.guard.send(lambda: self.session.post(url, data=data, headers=sent))

    async def list_models(self, headers: Mapping[str, str]) -> RawReply:
        try:
            async with self.session.get(
                f"{self.base_url}/v1/models", headers=self.headers_for(headers, JSON_TYPE)
            ) as resp:
                raw = await resp.read()
                return RawReply(resp.status, resp.headers.get("content-type", JSON_TYPE), raw)
        except Exception as exc:
            raise map_transport_error(exc) from exc

    async def check_ready(self) -> bool:
        timeout = aiohttp.ClientTimeout(total=5)
        for path in ("/health", "/v1/models"):
            try:
                async with self.probe_session.get(
                    f"{self.base_url}{path}",
                    headers=self.headers_for({}, JSON_TYPE),
                    timeout=timeout,
                ) as resp:
                    await resp.read()
                    if resp.status < 400:
                        return True
                    if resp.status != 404:
                        return False
            except (TimeoutError, aiohttp.ClientError):
                return False
        return False

    async def forward_chat_completions(
        self, body: bytes, parsed: JsonObject, headers: Mapping[str, str]
    ) -> RawStream:
        """``POST /v1/chat/completions`` with the client's body as it came; the answer (JSON,
        SSE or an error) is streamed back unchanged."""
        accept = SSE_TYPE if parsed.get("stream") is True else JSON_TYPE
        resp, _ = await self._send(f"{self.base_url}/v1/chat/completions", body, headers, accept)
        return RawStream(
            status_code=resp.status,
            content_type=resp.headers.get("content-type", JSON_TYPE),
            chunks=_raw_chunks(resp),
            close=_closer(resp),
        )


def _http_error(status: int, raw: bytes, retried: bool) -> UpstreamHTTPError:
    error = UpstreamHTTPError(status, error_envelope(status, raw))
    if retried:
        error.headers = NO_RETRY
    return error


async def read_at_most(resp: aiohttp.ClientResponse, limit: int) -> bytes:
    """The whole body, or ``UpstreamEventTooLargeError`` once it is known to exceed ``limit``."""
    length = resp.content_length
    if length is not None and length > limit:
        raise UpstreamEventTooLargeError(limit)
    parts: list[bytes] = []
    size = 0
    async for chunk in resp.content.iter_any():
        size += len(chunk)
        if size > limit:
            raise UpstreamEventTooLargeError(limit)
        parts.append(chunk)
    return b"".join(parts)


async def _raw_chunks(resp: aiohttp.ClientResponse) -> AsyncIterator[bytes]:
    try:
        async for chunk in resp.content.iter_any():
            yield chunk
    except Exception as exc:
        raise map_transport_error(exc) from exc
    finally:
        release(resp)


def _closer(resp: aiohttp.ClientResponse) -> Any:
    async def close() -> None:
        release(resp)

    return close
