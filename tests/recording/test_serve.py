"""serve_replay / serve_record as the CLI runs them: blocking, in their own process."""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx

from app.recording.cassette import load_cassette
from tests.helpers import free_port
from tests.recordings import fixture

ROOT = Path(__file__).resolve().parents[2]
CASSETTE = fixture("text_only/responses/resp-single-gpt-4o-nonstreaming.yaml")


@contextmanager
def running(code: str, port: int) -> Iterator[str]:
    proc = subprocess.Popen([sys.executable, "-c", code], cwd=ROOT)
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 30
        while True:
            assert proc.poll() is None, "server exited"
            try:
                httpx.get(f"{base}/health", timeout=1)
                break
            except httpx.TransportError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.05)
        yield base
    finally:
        proc.terminate()
        proc.wait(timeout=10)


def test_serve_replay_and_serve_record(tmp_path: Path) -> None:
    replay_port, record_port = free_port(), free_port()
    out = tmp_path / "out.yaml"
    turn = load_cassette(CASSETTE).turns[0]
    replay_code = (
        "from pathlib import Path\n"
        "from app.recording.replay import serve_replay\n"
        f"serve_replay(Path({str(CASSETTE)!r}), '127.0.0.1', {replay_port}, strict=True)\n"
    )
    with running(replay_code, replay_port) as upstream:
        record_code = (
            "from pathlib import Path\n"
            "from app.recording.record import serve_record\n"
            f"serve_record({upstream!r}, Path({str(out)!r}), '127.0.0.1', {record_port},"
            " upstream_api_key='sk-x')\n"
        )
        with running(record_code, record_port) as proxy:
            response = httpx.post(f"{proxy}/v1/responses", json=turn.request.body)
            assert response.status_code == 200
            assert response.json() == turn.response.body
    recorded = load_cassette(out)
    # /health probes went through the recorder too; the exchange under test is recorded.
    (posted,) = [t for t in recorded.turns if t.request.path == "/v1/responses"]
    assert posted.response.body == turn.response.body
    assert posted.request.headers["authorization"] == "Bearer ***"
