"""``log_format = "json"`` (``RESPGATE_LOG_FORMAT=json``): ``respgate serve`` as a real process
writes one JSON object per line on stderr, its own lines and uvicorn's, and the lines of a
request carry that request's id (the one its answer's ``x-request-id`` names)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import httpx

from tests.helpers import ROOT, free_port


def test_serve_logs_json_lines_with_the_request_id(tmp_path: Path) -> None:
    port = free_port()
    log = tmp_path / "stderr.log"
    env = {**os.environ, "RESPGATE_LOG_FORMAT": "json", "RESPGATE_ACCESS_LOG": "true"}
    argv = [sys.executable, "-m", "app.cli", "serve", "--port", str(port)]
    argv += ["--data-dir", str(tmp_path / "data"), "--upstream-url", "http://127.0.0.1:9"]
    with log.open("wb") as out:
        proc = subprocess.Popen(argv, cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT)
        try:
            url = f"http://127.0.0.1:{port}"
            deadline = time.monotonic() + 60
            while True:
                assert proc.poll() is None and time.monotonic() < deadline, log.read_text()
                try:
                    if httpx.get(f"{url}/health", timeout=1).status_code == 200:
                        break
                except httpx.TransportError:
                    time.sleep(0.1)
            missing = httpx.get(f"{url}/v1/nothing", headers={"x-request-id": "json-log-1"})
            assert missing.status_code == 404
            failing = httpx.post(f"{url}/v1/responses", json={"model": "m", "input": "hi"})
            assert failing.status_code == 502
        finally:
            proc.terminate()
            proc.wait(timeout=30)
    lines = [line for line in log.read_text().splitlines() if line.strip()]
    records = [json.loads(line) for line in lines]  # every line is one JSON object
    for record in records:
        assert {"ts", "level", "logger", "message"} <= record.keys()
    loggers = {record["logger"] for record in records}
    assert {"uvicorn.error", "uvicorn.access", "app.api.errors"} <= loggers
    refused = [r for r in records if r["logger"] == "app.api.errors"]
    assert [r["request_id"] for r in refused] == ["json-log-1", failing.headers["x-request-id"]]
    assert "GET /v1/nothing -> 404" in refused[0]["message"]
    assert refused[1]["level"] == "WARNING"
