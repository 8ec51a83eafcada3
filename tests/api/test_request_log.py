"""Operability: every refused or failed request leaves one log line saying why, and the access
log is an option (``access_log`` / ``--access-log``)."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from pathlib import Path

import pytest
from starlette.testclient import TestClient

from app.cli import build_parser
from app.errors import UpstreamUnreachableError
from app.main import create_app
from app.serving import make_server
from app.settings import Settings
from tests.fakes import FakeUpstream, text_response
from tests.helpers import in_process

ERRORS_LOGGER = "app.api.errors"


@pytest.fixture
def client(tmp_path: Path) -> Iterator[TestClient]:
    upstream = FakeUpstream(body=text_response("hi"))
    with in_process(create_app(Settings(data_dir=tmp_path), upstream=upstream)) as http:
        yield http


def refusal_lines(caplog: pytest.LogCaptureFixture) -> list[logging.LogRecord]:
    return [r for r in caplog.records if r.name == ERRORS_LOGGER]


def test_an_invalid_request_leaves_one_line_naming_status_code_param_and_message(
    client: TestClient, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger=ERRORS_LOGGER)
    response = client.post("/v1/responses", json={"model": "m", "input": "hi", "temperature": "x"})
    assert response.status_code == 400
    error = response.json()["error"]
    [line] = refusal_lines(caplog)
    assert line.levelno == logging.INFO
    text = line.getMessage()
    assert text.startswith("POST /v1/responses -> 400 invalid_request_error")
    assert f"param={error['param']}" in text
    assert error["message"] in text


def test_a_missing_response_and_an_unknown_path_are_logged(
    client: TestClient, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger=ERRORS_LOGGER)
    assert client.get("/v1/responses/resp_nope").status_code == 404
    assert client.get("/v1/nowhere").status_code == 404
    texts = [r.getMessage() for r in refusal_lines(caplog)]
    assert len(texts) == 2
    assert texts[0].startswith("GET /v1/responses/resp_nope -> 404 invalid_request_error")
    assert "code=not_found" in texts[0]
    assert texts[1].startswith("GET /v1/nowhere -> 404")


def test_a_failed_request_is_a_warning(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    class Down(FakeUpstream):
        async def create_response(self, body: object, headers: object) -> dict[str, object]:
            raise UpstreamUnreachableError("cannot connect to the upstream: refused")

    caplog.set_level(logging.INFO, logger=ERRORS_LOGGER)
    with in_process(create_app(Settings(data_dir=tmp_path), upstream=Down())) as http:
        response = http.post("/v1/responses", json={"model": "m", "input": "hi"})
    assert response.status_code == 502
    [line] = refusal_lines(caplog)
    assert line.levelno == logging.WARNING
    assert "-> 502 " in line.getMessage()
    assert "cannot connect to the upstream" in line.getMessage()


def test_a_stream_that_fails_after_its_200_leaves_one_line(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    upstream = FakeUpstream(
        events=[{"type": "response.created", "response": text_response("")}],
        fail_after=UpstreamUnreachableError("the upstream connection broke"),
    )
    caplog.set_level(logging.INFO)
    with in_process(create_app(Settings(data_dir=tmp_path), upstream=upstream)) as http:
        response = http.post("/v1/responses", json={"model": "m", "input": "hi", "stream": True})
        assert response.status_code == 200
        assert "response.failed" in response.text
    lines = [r.getMessage() for r in caplog.records if "failed mid-stream" in r.getMessage()]
    assert len(lines) == 1
    assert "the upstream connection broke" in lines[0]


def test_a_successful_request_leaves_no_refusal_line(
    client: TestClient, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG, logger=ERRORS_LOGGER)
    assert client.post("/v1/responses", json={"model": "m", "input": "hi"}).status_code == 200
    assert refusal_lines(caplog) == []


def test_the_access_log_is_off_by_default_and_an_option() -> None:
    assert Settings().access_log is False
    assert make_server(object(), "info").config.access_log is False
    assert make_server(object(), "info", access_log=True).config.access_log is True
    parser = build_parser()
    assert parser.parse_args(["serve"]).access_log is None  # the config file decides
    assert parser.parse_args(["serve", "--access-log"]).access_log is True
