"""Errors in Anthropic's envelope: ``{"type": "error", "error": {"type", "message"}}``.

The status stays the gateway's except where Anthropic has its own: an upstream that is not
ready or busy (503: ``upstream_not_ready``, ``upstream_busy``) is ``overloaded_error`` with
Anthropic's 529. The error type follows the status, as
Anthropic's: 400 ``invalid_request_error``, 401 ``authentication_error``, 403
``permission_error``, 404 ``not_found_error``, 413 ``request_too_large``, 429
``rate_limit_error``, 529 ``overloaded_error``, any other 5xx ``api_error``.
"""

from __future__ import annotations

from app.errors import GatewayError, InvalidRequestError, NotReadyError, UpstreamBusyError
from app.protocol.json_types import JsonObject

_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    413: "request_too_large",
    429: "rate_limit_error",
    529: "overloaded_error",
}
OVERLOADED_STATUS = 529


def error_type(status: int) -> str:
    """Anthropic's error type for an HTTP status."""
    if status in _TYPES:
        return _TYPES[status]
    return "api_error" if status >= 500 else "invalid_request_error"


def anthropic_status(error: GatewayError) -> int:
    if isinstance(error, NotReadyError | UpstreamBusyError):
        return OVERLOADED_STATUS
    return error.status_code


def error_body(status: int, message: str) -> JsonObject:
    return {"type": "error", "error": {"type": error_type(status), "message": message}}


def error_envelope(error: GatewayError) -> tuple[int, JsonObject]:
    """The status and body Anthropic would answer for ``error``."""
    status = anthropic_status(error)
    message = error.message
    if error.param and error.param not in message:
        message = f"{error.param}: {message}"
    return status, error_body(status, message)


def stream_error_event(error: JsonObject | None) -> JsonObject:
    """The ``error`` SSE event for a Responses ``error`` (or failed response's ``error``)."""
    error = error or {}
    message = str(error.get("message") or "The upstream failed while streaming the response.")
    code = str(error.get("code") or "")
    overloaded = code in ("upstream_not_ready", "upstream_busy", "overloaded")
    status = OVERLOADED_STATUS if overloaded else 500
    if code in ("rate_limit_exceeded", "rate_limit_error"):
        status = 429
    return error_body(status, message)


def invalid(param: str, message: str) -> InvalidRequestError:
    """A 400 naming the request field at fault."""
    return InvalidRequestError(f"{param}: {message}", param=param)
