"""How a failure after a stream started is reported: what the client's ``error`` event and
``response.failed`` say (a code and a message: a gateway error's own, else a fixed one, never
an exception's text), and the one line an operator gets in the log, with the response id and
the client's ``x-request-id``. A storage failure and an unexpected exception also log their
traceback (the driver's error is the cause of ``StorageUnavailableError``)."""

from __future__ import annotations

import logging

from app.errors import GatewayError, StorageUnavailableError
from app.protocol.json_types import JsonObject

logger = logging.getLogger(__name__)

# The client-facing message of an unexpected error (OpenAI's wording for its own 500s).
SERVER_ERROR_MESSAGE = "The server had an error while processing your request."


def stream_failure(exc: Exception, response_id: str, request_id: str | None) -> JsonObject:
    """The failure ``exc`` is for the client (``code``, ``message``), logged once."""
    if isinstance(exc, GatewayError):
        failure: JsonObject = {"code": exc.code or exc.type, "message": exc.message}
        traced = exc if isinstance(exc, StorageUnavailableError) else None
        log_stream_failure(response_id, failure, request_id, traced)
        return failure
    failure = {"code": "server_error", "message": SERVER_ERROR_MESSAGE}
    log_stream_failure(response_id, failure, request_id, exc)
    return failure


def log_stream_failure(
    response_id: str,
    failure: JsonObject,
    request_id: str | None = None,
    exc: BaseException | None = None,
) -> None:
    """The one line a stream that fails after its HTTP 200 leaves (its client sees ``error`` and
    ``response.failed``; a refusal before the stream starts is logged by the front end); with
    ``exc``, at ERROR with its traceback."""
    logger.log(
        logging.WARNING if exc is None else logging.ERROR,
        "response %s failed mid-stream (request_id=%s): code=%s: %s",
        response_id,
        request_id,
        failure.get("code"),
        str(failure.get("message"))[:500],
        exc_info=exc,
        extra={"response_id": response_id},
    )
