"""Upstream that serves ``/v1/responses`` itself: vLLM, SGLang, OpenAI.

The hot path runs on aiohttp's ClientSession: on this project's benchmark it adds a third of
the latency of httpx.AsyncClient and sustains seven times the request rate (bench/README.md).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Mapping
from typing import Any

import aiohttp
import orjson

from app.core.ports import JsonObject, RawReply, SingleResponseStream
from app.errors import (
    UpstreamError,
    UpstreamHTTPError,
    UpstreamProtocolError,
    UpstreamTimeoutError,
    UpstreamUnreachableError,
)
from app.upstream.sse import parse_sse_lines, split_lines

logger = logging.getLogger(__name__)

_JSON = "application/json"


class ResponsesUpstream:
    """``core.ports.Upstream`` over HTTP with one pooled aiohttp session."""

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
        self._timeout = aiohttp.ClientTimeout(
            total=None, connect=connect_timeout, sock_read=read_timeout
        )
        self._connector_limit = max_connections
        self._session: aiohttp.ClientSession | None = None

    @property
    def session(self) -> aiohttp.ClientSession:
        if self._session is None:
            connector = aiohttp.TCPConnector(
                limit=self._connector_limit, ttl_dns_cache=300, enable_cleanup_closed=False
            )
            self._session = aiohttp.ClientSession(
                connector=connector,
                timeout=self._timeout,
                json_serialize=lambda obj: orjson.dumps(obj).decode(),
                auto_decompress=True,
            )
        return self._session

    async def aclose(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None

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
            async with self.session.post(
                self._responses_url, data=orjson.dumps(body), headers=self._headers(headers, _JSON)
            ) as resp:
                raw = await resp.read()
                if resp.status >= 400:
                    raise UpstreamHTTPError(resp.status, error_envelope(resp.status, raw))
        except UpstreamError:
            raise
        except Exception as exc:
            raise map_transport_error(exc) from exc
        return decode_response(raw)

    async def stream_response(
        self, body: JsonObject, headers: Mapping[str, str]
    ) -> AiohttpEventStream | SingleResponseStream:
        try:
            resp = await self.session.post(
                self._responses_url,
                data=orjson.dumps(body),
                headers=self._headers(headers, "text/event-stream"),
            )
        except Exception as exc:
            raise map_transport_error(exc) from exc
        if resp.status >= 400:
            try:
                raw = await resp.read()
            except Exception as exc:
                raise map_transport_error(exc) from exc
            finally:
                resp.release()
            raise UpstreamHTTPError(resp.status, error_envelope(resp.status, raw))
        if resp.content_type == _JSON:
            # The server ignored ``stream``: fold its whole answer into one terminal event.
            try:
                raw = await resp.read()
            except Exception as exc:
                raise map_transport_error(exc) from exc
            finally:
                resp.release()
            return SingleResponseStream(decode_response(raw))
        return AiohttpEventStream(resp)

    async def list_models(self, headers: Mapping[str, str]) -> RawReply:
        try:
            async with self.session.get(
                f"{self.base_url}/v1/models", headers=self._headers(headers, _JSON)
            ) as resp:
                raw = await resp.read()
                return RawReply(resp.status, resp.headers.get("content-type", _JSON), raw)
        except Exception as exc:
            raise map_transport_error(exc) from exc

    async def check_ready(self) -> bool:
        timeout = aiohttp.ClientTimeout(total=5)
        for path in ("/health", "/v1/models"):
            try:
                async with self.session.get(
                    f"{self.base_url}{path}", headers=self._headers({}, _JSON), timeout=timeout
                ) as resp:
                    await resp.read()
                    if resp.status < 400:
                        return True
                    if resp.status != 404:
                        return False
            except (TimeoutError, aiohttp.ClientError):
                return False
        return False


class AiohttpEventStream:
    """Events parsed from a streaming aiohttp response; closing it drops the connection."""

    def __init__(self, resp: aiohttp.ClientResponse) -> None:
        self._resp = resp

    def __aiter__(self) -> AsyncIterator[JsonObject]:
        return self._events()

    async def _events(self) -> AsyncIterator[JsonObject]:
        try:
            # Not aiohttp's readline: it caps line length (see ``split_lines``).
            lines = split_lines(self._resp.content.iter_any())
            async for event in parse_sse_lines(lines):
                yield event
        except UpstreamError:
            raise
        except Exception as exc:
            raise map_transport_error(exc) from exc
        finally:
            await self.aclose()

    async def aclose(self) -> None:
        if not self._resp.closed:
            if self._resp.content.is_eof():
                self._resp.release()
            else:
                # Closing the connection is how a streaming upstream learns to stop generating.
                self._resp.close()


def decode_response(raw: bytes) -> JsonObject:
    try:
        data = orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        raise UpstreamProtocolError(f"upstream answered with invalid JSON: {exc}") from exc
    if not isinstance(data, dict):
        raise UpstreamProtocolError("upstream answered with JSON that is not an object")
    return data


def error_envelope(status: int, raw: bytes) -> JsonObject:
    """The upstream's error body in OpenAI's envelope.

    An OpenAI envelope is kept as it is (keys it lacks are added); flat error objects (vLLM's
    ``{"object": "error", "message": ...}``, ``{"error": "text"}``, ``{"detail": "text"}``) and
    plain text are wrapped, with a string ``code`` (the HTTP status when nothing better).
    """
    try:
        data: Any = orjson.loads(raw)
    except orjson.JSONDecodeError:
        data = None
    if isinstance(data, dict):
        error = data.get("error")
        if isinstance(error, dict):
            if all(key in error for key in ("message", "type", "param", "code")):
                return data
            filled = {
                "message": f"upstream returned HTTP {status}",
                "type": "upstream_error",
                "param": None,
                "code": None,
                **error,
            }
            return {**data, "error": filled}
        message = data.get("message")
        if message is None and isinstance(error, str):
            message = error
        if message is None and isinstance(data.get("detail"), str):
            message = data["detail"]
        if message is not None:
            code = data.get("code")
            return {
                "error": {
                    "message": str(message),
                    "type": str(data.get("type") or "upstream_error"),
                    "param": data.get("param"),
                    # OpenAI's ``code`` is a string or null; vLLM puts the HTTP status there.
                    "code": None if code is None else str(code),
                }
            }
    text = raw.decode("utf-8", "replace").strip() or f"upstream returned HTTP {status}"
    return {
        "error": {
            "message": text[:2000],
            "type": "upstream_error",
            "param": None,
            "code": str(status),
        }
    }


def map_transport_error(exc: BaseException) -> UpstreamError:
    if isinstance(exc, UpstreamError):
        return exc
    if isinstance(exc, asyncio.TimeoutError | aiohttp.ServerTimeoutError):
        return UpstreamTimeoutError("the upstream did not answer in time")
    if isinstance(exc, aiohttp.ClientConnectorError | ConnectionRefusedError):
        return UpstreamUnreachableError(f"cannot connect to the upstream: {exc}")
    if isinstance(exc, aiohttp.ClientPayloadError | aiohttp.ServerDisconnectedError):
        return UpstreamProtocolError(f"the upstream connection broke: {exc}")
    if isinstance(exc, aiohttp.ClientError | OSError):
        return UpstreamUnreachableError(f"upstream request failed: {exc}")
    logger.exception("unexpected upstream failure")
    return UpstreamError(f"upstream request failed: {exc!r}")
