"""Every error leaves the gateway in OpenAI's envelope ``{"error": {...}}``."""

from __future__ import annotations

import logging

from fastapi import FastAPI
from fastapi.exceptions import RequestValidationError
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from app.api.body import format_loc
from app.errors import GatewayError, InvalidRequestError, MethodNotAllowedError, NotFoundError

logger = logging.getLogger(__name__)


async def _gateway_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, GatewayError)
    if exc.status_code >= 500 and exc.log_each:
        logger.warning("%s %s -> %s: %s", request.method, request.url.path, exc.status_code, exc)
    return JSONResponse(exc.to_envelope(), status_code=exc.status_code)


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
    return JSONResponse(error.to_envelope(), status_code=error.status_code, headers=exc.headers)


async def _validation_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, RequestValidationError)
    first = exc.errors()[0] if exc.errors() else {"loc": (), "msg": "invalid request"}
    param = format_loc(tuple(part for part in first["loc"] if part not in ("body", "query")))
    error = InvalidRequestError(f"Invalid value for '{param}': {first['msg']}.", param=param)
    return JSONResponse(error.to_envelope(), status_code=400)


async def _unexpected(request: Request, exc: Exception) -> Response:
    logger.exception("unhandled error on %s %s", request.method, request.url.path)
    error = GatewayError("The server had an error while processing your request.")
    return JSONResponse(error.to_envelope(), status_code=500)


def install_error_handlers(app: FastAPI) -> None:
    app.add_exception_handler(GatewayError, _gateway_error)
    app.add_exception_handler(HTTPException, _http_error)
    app.add_exception_handler(RequestValidationError, _validation_error)
    app.add_exception_handler(Exception, _unexpected)
