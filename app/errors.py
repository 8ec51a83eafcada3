"""Errors the gateway reports, each mapped to an HTTP status and OpenAI's error envelope."""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any


class GatewayError(Exception):
    """Base of every error that reaches a client: ``{"error": {message, type, param, code}}``."""

    status_code: int = 500
    type: str = "server_error"
    code: str | None = None
    # A 5xx is logged with each request, unless the error was logged where it was found.
    log_each: bool = True
    # Response headers that go with it (``retry-after``, ``x-should-retry``).
    headers: Mapping[str, str] | None = None

    def __init__(
        self,
        message: str,
        *,
        param: str | None = None,
        code: str | None = None,
        status_code: int | None = None,
    ) -> None:
        super().__init__(message)
        self.message = message
        self.param = param
        if code is not None:
            self.code = code
        if status_code is not None:
            self.status_code = status_code

    def to_error(self) -> dict[str, Any]:
        return {"message": self.message, "type": self.type, "param": self.param, "code": self.code}

    def to_envelope(self) -> dict[str, Any]:
        return {"error": self.to_error()}


class InvalidRequestError(GatewayError):
    status_code = 400
    type = "invalid_request_error"


class AuthenticationError(GatewayError):
    """No credential, or one the gateway does not accept (``app.api.auth``): OpenAI's 401."""

    status_code = 401
    type = "invalid_request_error"
    code = "invalid_api_key"


class NotFoundError(GatewayError):
    status_code = 404
    type = "invalid_request_error"
    code = "not_found"


class CursorNotFoundError(GatewayError):
    """An ``after`` cursor naming no item of the list: a 404 that OpenAI gives a null code."""

    status_code = 404
    type = "invalid_request_error"
    code = None


class MethodNotAllowedError(GatewayError):
    status_code = 405
    type = "invalid_request_error"
    code = "method_not_allowed"


class RequestTooLargeError(GatewayError):
    status_code = 413
    type = "invalid_request_error"
    code = "request_too_large"


class UpstreamError(GatewayError):
    """The upstream inference server failed; subclasses say how."""

    status_code = 502
    type = "upstream_error"
    code = "upstream_error"


class UpstreamUnreachableError(UpstreamError):
    status_code = 502
    code = "upstream_unreachable"


class UpstreamUnavailableError(UpstreamError):
    """The upstream's circuit is open (``app.upstream.breaker``): the request fails fast."""

    status_code = 503
    code = "upstream_unavailable"
    log_each = False  # the breaker logged the circuit opening

    def __init__(self, name: str, retry_after: float) -> None:
        wait = max(1, math.ceil(retry_after))
        super().__init__(
            f"The upstream {name!r} is unavailable: after failing repeatedly it gets no "
            f"requests for a while. Retry in {wait} s."
        )
        self.headers = {"retry-after": str(wait), "retry-after-ms": str(wait * 1000)}


class UpstreamTimeoutError(UpstreamError):
    status_code = 504
    code = "upstream_timeout"


class UpstreamBusyError(UpstreamError):
    """Every connection of the upstream's pool (``max_connections``) stayed in use for the
    whole ``connect_timeout`` the request waited: the upstream is busy, not failing. Not
    retried by the gateway (the request already waited), not counted by its circuit breaker
    (``app.upstream.retry``)."""

    status_code = 503
    code = "upstream_busy"
    log_each = False  # the pool's own warning (``app.upstream.pool``) tells the operator

    def __init__(self, name: str, limit: int, waited: float) -> None:
        super().__init__(
            f"The upstream {name!r} is busy: its {limit} connections were all in use for the "
            f"{waited:.1f} s this request waited for one. Retry shortly."
        )
        self.headers = {"retry-after": "1", "retry-after-ms": "1000"}


class UpstreamProtocolError(UpstreamError):
    """The upstream answered with something that is not a Responses API answer."""

    status_code = 502
    code = "upstream_protocol_error"


class UpstreamEventTooLargeError(UpstreamProtocolError):
    """The upstream sent an SSE line or event, or a JSON answer, larger than the gateway takes
    (``[limits] max_upstream_event_bytes``)."""

    code = "upstream_event_too_large"

    def __init__(self, limit: int) -> None:
        super().__init__(
            f"the upstream sent an event larger than {limit} bytes, the gateway's limit "
            "(max_upstream_event_bytes)"
        )


class UpstreamHTTPError(UpstreamError):
    """The upstream answered with an HTTP error: its status and error body are forwarded."""

    def __init__(self, status_code: int, envelope: dict[str, Any]) -> None:
        error = envelope.get("error")
        message = error.get("message") if isinstance(error, dict) else None
        super().__init__(str(message or f"upstream returned HTTP {status_code}"))
        self.status_code = status_code
        self.envelope = envelope

    def to_error(self) -> dict[str, Any]:
        error = self.envelope.get("error")
        return dict(error) if isinstance(error, dict) else super().to_error()

    def to_envelope(self) -> dict[str, Any]:
        return self.envelope


STORAGE_UNAVAILABLE = (
    "The gateway's storage is unavailable, so the request was not carried out; please retry later."
)
RESPONSE_NOT_STORED = (
    "The response was generated but could not be stored: the gateway's storage is unavailable. "
    "Nothing was saved; sending the request again generates a new response."
)


class StorageUnavailableError(GatewayError):
    """The gateway's store cannot be reached or cannot write (database down, connection lost,
    disk full, read-only data directory). Nothing was generated or written, so a retry is safe
    (the SDKs retry a 503). The store adapters raise it from the driver's error; the message is
    always this fixed one, and the cause is logged with the request, never sent."""

    status_code = 503
    type = "server_error"
    code = "storage_unavailable"

    def __init__(self, message: str = STORAGE_UNAVAILABLE) -> None:
        super().__init__(message)


class ResponseNotStoredError(StorageUnavailableError):
    """The storage failed when saving a response the upstream had already generated: a retry
    pays for another generation, so the client is told not to retry blindly
    (``x-should-retry: false``); it decides (again, later, or with ``store: false``)."""

    code = "response_not_stored"
    headers: Mapping[str, str] | None = {"x-should-retry": "false"}

    def __init__(self, message: str = RESPONSE_NOT_STORED) -> None:
        super().__init__(message)


class NotReadyError(GatewayError):
    status_code = 503
    type = "server_error"
    code = "upstream_not_ready"
