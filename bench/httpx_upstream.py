"""``core.ports.Upstream`` on ``httpx.AsyncClient``: the comparison for bench/upstream_clients.py.

Benchmark code only (the gateway itself uses ``app.upstream.responses.ResponsesUpstream`` on
aiohttp). It mirrors that adapter call for call so that the two differ only in the HTTP client:
same headers, same pooling limit and timeouts, same SSE line splitting and parser
(``app.upstream.sse.parse_sse_lines``), same error mapping onto ``app.errors``.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterable, AsyncIterator, Mapping

import httpx
import orjson

from app.core.ports import RawReply, SingleResponseStream
from app.errors import (
    UpstreamError,
    UpstreamHTTPError,
    UpstreamProtocolError,
    UpstreamTimeoutError,
    UpstreamUnreachableError,
)
from app.protocol.json_types import JsonObject
from app.upstream import sse as _sse
from app.upstream.http import decode_json_object as decode_response
from app.upstream.http import error_envelope
from app.upstream.sse import parse_sse_lines

if hasattr(_sse, "SSEDecoder"):  # parse_sse_lines takes the network chunks themselves

    def split_lines(chunks: AsyncIterable[bytes]) -> AsyncIterable[bytes]:
        return chunks

elif hasattr(_sse, "split_lines"):  # older commits (bench --ref): the adapter's line splitter
    split_lines = _sse.split_lines
else:  # older still: the same splitting, inline

    async def split_lines(chunks: AsyncIterable[bytes]) -> AsyncIterator[bytes]:  # type: ignore[misc]
        buffer = b""
        async for chunk in chunks:
            buffer += chunk
            start = 0
            while True:
                end = buffer.find(b"\n", start)
                if end < 0:
                    break
                yield buffer[start : end + 1]
                start = end + 1
            buffer = buffer[start:]
        if buffer:
            yield buffer


logger = logging.getLogger(__name__)

_JSON = "application/json"


class HttpxUpstream:
    """Same contract as ``ResponsesUpstream``, on one pooled ``httpx.AsyncClient``."""

    def __init__(
        self,
        base_url: str,
        *,
        api_key: str | None = None,
        connect_timeout: float = 10.0,
        read_timeout: float = 600.0,
        max_connections: int = 256,
    ) -> None:
        self.base_url = base_url.rstrip("/")
        self._api_key = api_key
        self._responses_url = f"{self.base_url}/v1/responses"
        self._client = httpx.AsyncClient(
            timeout=httpx.Timeout(
                connect=connect_timeout, read=read_timeout, write=None, pool=None
            ),
            limits=httpx.Limits(
                max_connections=max_connections, max_keepalive_connections=max_connections
            ),
            follow_redirects=False,
            trust_env=False,
        )

    async def aclose(self) -> None:
        await self._client.aclose()

    def _headers(self, headers: Mapping[str, str], accept: str) -> dict[str, str]:
        out = {"content-type": _JSON, "accept": accept}
        auth = headers.get("authorization")
        if auth:
            out["authorization"] = auth
        elif self._api_key:
            out["authorization"] = f"Bearer {self._api_key}"
        for name in ("openai-organization", "openai-project", "x-request-id"):
            value = headers.get(name)
            if value:
                out[name] = value
        return out

    async def create_response(self, body: JsonObject, headers: Mapping[str, str]) -> JsonObject:
        try:
            resp = await self._client.post(
                self._responses_url,
                content=orjson.dumps(body),
                headers=self._headers(headers, _JSON),
            )
        except Exception as exc:
            raise map_transport_error(exc) from exc
        raw = resp.content
        if resp.status_code >= 400:
            raise UpstreamHTTPError(resp.status_code, error_envelope(resp.status_code, raw))
        return decode_response(raw)

    async def stream_response(
        self, body: JsonObject, headers: Mapping[str, str]
    ) -> HttpxEventStream | SingleResponseStream:
        request = self._client.build_request(
            "POST",
            self._responses_url,
            content=orjson.dumps(body),
            headers=self._headers(headers, "text/event-stream"),
        )
        try:
            resp = await self._client.send(request, stream=True)
        except Exception as exc:
            raise map_transport_error(exc) from exc
        if resp.status_code >= 400 or resp.headers.get("content-type", "").startswith(_JSON):
            try:
                raw = await resp.aread()
            except Exception as exc:
                raise map_transport_error(exc) from exc
            finally:
                await resp.aclose()
            if resp.status_code >= 400:
                raise UpstreamHTTPError(resp.status_code, error_envelope(resp.status_code, raw))
            return SingleResponseStream(decode_response(raw))
        return HttpxEventStream(resp)

    async def list_models(self, headers: Mapping[str, str]) -> RawReply:
        try:
            resp = await self._client.get(
                f"{self.base_url}/v1/models", headers=self._headers(headers, _JSON)
            )
        except Exception as exc:
            raise map_transport_error(exc) from exc
        return RawReply(resp.status_code, resp.headers.get("content-type", _JSON), resp.content)

    async def check_ready(self) -> bool:
        for path in ("/health", "/v1/models"):
            try:
                resp = await self._client.get(
                    f"{self.base_url}{path}", headers=self._headers({}, _JSON), timeout=5.0
                )
            except httpx.HTTPError:
                return False
            if resp.status_code < 400:
                return True
            if resp.status_code != 404:
                return False
        return False


class HttpxEventStream:
    """Events parsed from a streaming httpx response (``app.upstream.events.UpstreamEvents``
    without a translation step, on httpx); closing it drops the connection."""

    def __init__(self, resp: httpx.Response) -> None:
        self._resp = resp

    def __aiter__(self) -> AsyncIterator[JsonObject]:
        return self._events()

    async def _events(self) -> AsyncIterator[JsonObject]:
        try:
            async for event in parse_sse_lines(split_lines(self._resp.aiter_bytes())):
                yield event
        except UpstreamError:
            raise
        except Exception as exc:
            raise map_transport_error(exc) from exc
        finally:
            await self.aclose()

    async def aclose(self) -> None:
        if not self._resp.is_closed:
            await self._resp.aclose()


def map_transport_error(exc: BaseException) -> UpstreamError:
    if isinstance(exc, UpstreamError):
        return exc
    if isinstance(exc, httpx.TimeoutException):
        return UpstreamTimeoutError("the upstream did not answer in time")
    if isinstance(exc, httpx.ConnectError | ConnectionRefusedError):
        return UpstreamUnreachableError(f"cannot connect to the upstream: {exc}")
    if isinstance(exc, httpx.RemoteProtocolError | httpx.ReadError):
        return UpstreamProtocolError(f"the upstream connection broke: {exc}")
    if isinstance(exc, httpx.HTTPError | OSError):
        return UpstreamUnreachableError(f"upstream request failed: {exc}")
    logger.exception("unexpected upstream failure")
    return UpstreamError(f"upstream request failed: {exc!r}")
