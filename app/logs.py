"""How the gateway's processes log: ``log_format`` "text" (one line for people) or "json" (one
JSON object a line, for log collectors).

Both carry the request id of the line's request (``core.request_id``): text lines end with
``request_id=…``; a JSON line has ``ts`` (UTC, ISO 8601), ``level``, ``logger``, ``message``,
``request_id`` when there is one, the structured fields a line was given (``response_id``,
``round``, ``tool`` …: a logger call's ``extra``) and ``exception`` (the traceback) when it has
one. In JSON, uvicorn's own loggers go through the same handler (``uvicorn_log_config``).
"""

from __future__ import annotations

import logging
import sys
from datetime import UTC, datetime
from typing import Any

import orjson

from app.core.request_id import install_log_records

TEXT_FORMAT = "%(asctime)s %(levelname)s %(name)s %(message)s"
# The attributes every LogRecord has: the rest came from a call's ``extra``.
_STANDARD = frozenset(
    {
        *logging.LogRecord("", 0, "", 0, "", None, None).__dict__,
        "message",
        "asctime",
        "request_id",
        "taskName",
        "color_message",  # uvicorn's coloured copy of the message
    }
)


class TextFormatter(logging.Formatter):
    """``TEXT_FORMAT``, then ``request_id=…`` on the lines of a request."""

    def format(self, record: logging.LogRecord) -> str:
        line = super().format(record)
        request_id = getattr(record, "request_id", None)
        return line if request_id is None else f"{line} request_id={request_id}"


class JsonFormatter(logging.Formatter):
    """One JSON object per record (see the module docstring)."""

    def format(self, record: logging.LogRecord) -> str:
        out: dict[str, Any] = {
            "ts": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
        }
        request_id = getattr(record, "request_id", None)
        if request_id is not None:
            out["request_id"] = request_id
        for key, value in record.__dict__.items():
            if key not in _STANDARD and not key.startswith("_") and value is not None:
                out[key] = value
        if record.exc_info:
            out["exception"] = self.formatException(record.exc_info)
        elif record.exc_text:
            out["exception"] = record.exc_text
        if record.stack_info:
            out["stack"] = self.formatStack(record.stack_info)
        return orjson.dumps(out, default=str).decode()


def configure_logging(level: str, log_format: str = "text") -> None:
    """The root logger at ``level``, one stderr handler in ``log_format``; records carry the
    request id."""
    install_log_records()
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(JsonFormatter() if log_format == "json" else TextFormatter(TEXT_FORMAT))
    logging.basicConfig(level=level.upper(), handlers=[handler])


def uvicorn_log_config(log_format: str) -> dict[str, Any]:
    """uvicorn's ``log_config`` option: its own (coloured) handlers for text; for JSON none,
    so its loggers' records reach the root handler (``log_config=None``)."""
    return {"log_config": None} if log_format == "json" else {}
