"""Every error leaves the gateway in OpenAI's envelope ``{"error": {...}}`` (Anthropic's on the
Messages paths, ``/v1/messages...``), and one log line.

Each refused or failed request is logged once, on ``app.api.errors``: method, path, status,
the error's type, code and param, and its message (INFO for a 4xx, WARNING for a 5xx), so an
operator sees why a client failed without the client's help. A request body is never logged.
A storage failure (``StorageUnavailableError``) and an unexpected exception are logged at ERROR
with their traceback and the client's ``x-request-id``; their clients get a fixed message, never
the exception's text. An error's ``headers`` go with it (``x-should-retry: false``, which the
``openai`` and ``anthropic`` SDKs obey, when a retry would pay for a generation again).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping

from fastapi import FastAPI
from fastapi.exceptions import RequestValidationError
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from app.api.body import format_loc
from app.api.disconnect import ClientGoneError
from app.core.failures import SERVER_ERROR_MESSAGE
from app.core.request_id import current_request_id
from app.errors import (
    GatewayError,
    InvalidRequestError,
    MethodNotAllowedError,
    NotFoundError,
    StorageUnavailableError,
)
from app.frontends.anthropic.errors import error_envelope

# The error a request was answered with, kept in its scope for the metrics
# (``app.api.metrics_middleware`` counts upstream failures by it).
ERROR_SCOPE_KEY = "respgate.error"

# Anthropic's Messages API: errors on its paths are in Anthropic's envelope.
_ANTHROPIC_PREFIX = "/v1/messages"


def _reply(
    request: Request, error: GatewayError, headers: Mapping[str, str] | None = None
) -> JSONResponse:
    if request.url.path.startswith(_ANTHROPIC_PREFIX):
        status, body = error_envelope(error)
        return JSONResponse(body, status_code=status, headers=headers)
    return JSONResponse(error.to_envelope(), status_code=error.status_code, headers=headers)


logger = logging.getLogger(__name__)


def log_refusal(
    request: Request,
    status: int,
    error: GatewayError,
    *,
    loud: bool = True,
    exc: BaseException | None = None,
) -> None:
    """The one line a refused (4xx) or failed (5xx) request leaves in the log; with ``exc``, at
    ERROR with its traceback and the request id."""
    level = logging.WARNING if status >= 500 and loud else logging.INFO
    if exc is not None:
        level = logging.ERROR
    if not logger.isEnabledFor(level):
        return
    logger.log(
        level,
        "%s %s -> %d %s code=%s param=%s (request_id=%s): %s",
        request.method,
        request.url.path,
        status,
        error.type,
        error.code,
        error.param,
        current_request_id(),
        error.message[:500],
        exc_info=exc,
    )


async def _gateway_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, GatewayError)
    # ``log_each`` False: the adapter logged the details once; each request still leaves a line.
    # A storage failure's cause (the driver's error) is logged here, never sent.
    traced = exc if isinstance(exc, StorageUnavailableError) else None
    log_refusal(request, exc.status_code, exc, loud=exc.log_each, exc=traced)
    request.scope[ERROR_SCOPE_KEY] = exc
    return _reply(request, exc, exc.headers)


async def _http_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, HTTPException)
    error: GatewayError
    if exc.status_code == 404:
        detail = exc.detail if exc.detail and exc.detail != "Not Found" else None
        error = NotFoundError(detail or f"Unknown path: {request.method} {request.url.path}")
    elif exc.status_code == 405:
        error = MethodNotAllowedError(f"Method {request.method} is not allowed on this path")
    else:
        error = GatewayError(str(exc.detail), status_code=exc.status_code)
    log_refusal(request, error.status_code, error)
    return _reply(request, error, exc.headers)


async def _validation_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, RequestValidationError)
    first = exc.errors()[0] if exc.errors() else {"loc": (), "msg": "invalid request"}
    param = format_loc(tuple(part for part in first["loc"] if part not in ("body", "query")))
    error = InvalidRequestError(f"Invalid value for '{param}': {first['msg']}.", param=param)
    log_refusal(request, 400, error)
    return _reply(request, error)


async def _unexpected(request: Request, exc: Exception) -> Response:
    """A bug: logged with its traceback; the client gets a fixed message."""
    error = GatewayError(SERVER_ERROR_MESSAGE)
    log_refusal(request, error.status_code, error, exc=exc)
    return _reply(request, error)


async def _client_gone(request: Request, exc: Exception) -> Response:
    # Nobody reads it (``app.api.disconnect`` logged the line); 499 as nginx counts it.
    return Response(status_code=499)


def install_error_handlers(app: FastAPI) -> None:
    app.add_exception_handler(ClientGoneError, _client_gone)
    app.add_exception_handler(GatewayError, _gateway_error)
    app.add_exception_handler(HTTPException, _http_error)
    app.add_exception_handler(RequestValidationError, _validation_error)
    app.add_exception_handler(Exception, _unexpected)
