"""``app.logs``: a JSON line has the record's fields, its request id and its ``extra`` fields
(not the LogRecord's own attributes), its traceback; a text line ends with the request id."""

from __future__ import annotations

import json
import logging
import sys

from app.core.request_id import REQUEST_ID, install_log_records
from app.logs import TEXT_FORMAT, JsonFormatter, TextFormatter


def record(message: str, *args: object, **extra: object) -> logging.LogRecord:
    install_log_records()
    logger = logging.getLogger("app.test")
    made = logger.makeRecord("app.test", logging.WARNING, __file__, 1, message, args, None)
    made.__dict__.update(extra)
    return made


def test_a_json_line_has_the_fields_the_request_id_and_the_extras() -> None:
    token = REQUEST_ID.set("req_1")
    try:
        line = JsonFormatter().format(
            record("tool %s failed", "t", response_id="resp_1", round=2, tool="t", ok=None)
        )
    finally:
        REQUEST_ID.reset(token)
    data = json.loads(line)
    assert data.pop("ts").endswith("+00:00")
    assert data == {
        "level": "WARNING",
        "logger": "app.test",
        "message": "tool t failed",
        "request_id": "req_1",
        "response_id": "resp_1",
        "round": 2,
        "tool": "t",
    }


def test_a_json_line_outside_a_request_has_no_request_id_and_keeps_a_traceback() -> None:
    try:
        raise ValueError("bad")
    except ValueError:
        made = record("failed", value=object())
        made.exc_info = sys.exc_info()
    data = json.loads(JsonFormatter().format(made))
    assert "request_id" not in data
    assert "ValueError: bad" in data["exception"]
    assert data["value"].startswith("<object object")


def test_a_text_line_ends_with_the_request_id() -> None:
    formatter = TextFormatter(TEXT_FORMAT)
    token = REQUEST_ID.set("req_2")
    try:
        inside = formatter.format(record("hello"))
    finally:
        REQUEST_ID.reset(token)
    assert inside.endswith("WARNING app.test hello request_id=req_2")
    assert formatter.format(record("hello")).endswith("WARNING app.test hello")
