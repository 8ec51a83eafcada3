"""The id of the request being served, for the log lines and the calls made on its behalf.

The front end (``app.api.request_id``) sets it for each HTTP request and WebSocket: the
client's ``x-request-id`` when it is sane, else a new ``req_…`` id. Every log record made
while it is set carries it as ``record.request_id`` (``install_log_records``: a record factory,
so every handler sees it, pytest's ``caplog`` included); ``None`` outside a request.
"""

from __future__ import annotations

import logging
from contextvars import ContextVar
from typing import Any

REQUEST_ID: ContextVar[str | None] = ContextVar("respgate_request_id", default=None)


def current_request_id() -> str | None:
    """The request id of the request being served, or ``None``."""
    return REQUEST_ID.get()


class _RequestIdRecords:
    """The log record factory that adds ``request_id`` (wraps the one it replaced)."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner

    def __call__(self, *args: Any, **kwargs: Any) -> logging.LogRecord:
        record: logging.LogRecord = self.inner(*args, **kwargs)
        record.request_id = REQUEST_ID.get()
        return record


def install_log_records() -> None:
    """Make every log record carry ``request_id`` (once per process; idempotent)."""
    factory = logging.getLogRecordFactory()
    if not isinstance(factory, _RequestIdRecords):
        logging.setLogRecordFactory(_RequestIdRecords(factory))
