"""The HTTP client every adapter shares: aiohttp (the hot path's library: on this project's
benchmark it adds a third of the latency of httpx.AsyncClient and sustains seven times the
request rate, bench/README.md), with one mapping of transport failures and error bodies onto the
gateway's errors. Upstreams, embeddings and web search all take them from here.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import aiohttp
import orjson

from app.errors import (
    UpstreamError,
    UpstreamProtocolError,
    UpstreamTimeoutError,
    UpstreamUnreachableError,
)
from app.protocol.json_types import JsonObject

logger = logging.getLogger(__name__)


def release(resp: aiohttp.ClientResponse) -> None:
    """Give the connection back, or drop it when the body was not read to its end: closing the
    connection is how a streaming upstream learns to stop generating."""
    if resp.closed:
        return
    if resp.content.is_eof():
        resp.release()
    else:
        resp.close()


def decode_json_object(raw: bytes) -> JsonObject:
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
        envelope = error_object_envelope(data, status)
        if envelope is not None:
            return envelope
    text = raw.decode("utf-8", "replace").strip() or f"upstream returned HTTP {status}"
    return {
        "error": {
            "message": text[:2000],
            "type": "upstream_error",
            "param": None,
            "code": str(status),
        }
    }


def error_object_envelope(data: JsonObject, status: int) -> JsonObject | None:
    """``data`` as OpenAI's error envelope when it describes an error, else None."""
    error = data.get("error")
    if isinstance(error, dict):
        code = error.get("code")
        if all(key in error for key in ("message", "type", "param", "code")) and (
            code is None or isinstance(code, str)
        ):
            return data
        filled = {
            "message": f"upstream returned HTTP {status}",
            "type": "upstream_error",
            "param": None,
            **error,
            # OpenAI's ``code`` is a string or null; llama.cpp puts the HTTP status there.
            "code": None if code is None else str(code),
        }
        return {**data, "error": filled}
    message = data.get("message")
    if message is None and isinstance(error, str):
        message = error
    if message is None and isinstance(data.get("detail"), str):
        message = data["detail"]
    if message is None:
        return None
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
    logger.exception("unexpected upstream failure")  # its text is for the log, not the client
    return UpstreamError("upstream request failed unexpectedly; the gateway's log has the details")
