"""A full disk under the embedded SQLite store, for real: ``respgate serve`` runs in a private
mount namespace (``unshare``) with its data directory on a small tmpfs of its own, and the test
fills that file system (through ``/proc/<pid>/root``, the process's view of its mounts) until
the kernel answers ENOSPC, then frees it.

Through the ``openai`` SDK (its default two retries on): a create whose save fails is 503
``response_not_stored`` with ``x-should-retry: false`` and cost one generation; a stream sends
the answer, then ``error`` (same code) and ``response.failed``; no message carries SQLite's
text, which the gateway's log has, with the request id and the traceback; ``/ready`` is 503
naming the store (its disk is full) while ``/health`` stays 200; once there is room again the
gateway stores again, without a restart, and what it stored before is still there.
"""

from __future__ import annotations

import contextlib
import errno
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import openai
import pytest

from tests.api.upstreams import UpstreamLog, build_upstream
from tests.helpers import ROOT, free_port, serve_in_thread
from tests.serving.support import DEADLINE, write_config
from tests.test_container_readonly import unshare_prefix

TMPFS_BYTES = 16 * 1024 * 1024
# SQLite's own words; none of them may reach a client.
INTERNAL = ("sqlite", "disk is full", "OperationalError", "database or disk")


class Gateway:
    def __init__(self, url: str, proc: subprocess.Popen[bytes], data: Path, log: Path) -> None:
        self.url = url
        self.proc = proc
        self.log = log
        # The data directory as the gateway's mount namespace has it: its tmpfs.
        self.data = Path(f"/proc/{proc.pid}/root") / data.relative_to("/")
        self.sdk = openai.OpenAI(base_url=f"{url}/v1", api_key="sk-test", max_retries=2)

    def fill(self) -> None:
        """Write zeros until the tmpfs is full."""
        block = bytes(64 * 1024)
        fd = os.open(self.data / "fill", os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
        try:
            while True:
                os.write(fd, block)
        except OSError as exc:
            assert exc.errno == errno.ENOSPC, exc
        finally:
            os.close(fd)

    def free(self) -> None:
        (self.data / "fill").unlink()

    def wal_bytes(self) -> int:
        wal = self.data / "respgate.db-wal"
        return wal.stat().st_size if wal.exists() else 0


@contextlib.contextmanager
def gateway_on_tmpfs(tmp_path: Path, upstream_url: str) -> Iterator[Gateway]:
    data = tmp_path / "data"
    data.mkdir()
    config = write_config(tmp_path, upstream_url, job_signals="none")
    port = free_port()
    serve = [sys.executable, "-m", "app.cli", "serve", "--config", str(config)]
    serve += ["--port", str(port)]
    mount = f'mount -t tmpfs -o size={TMPFS_BYTES} tmpfs "$1" && shift && exec "$@"'
    argv = [*unshare_prefix(), "sh", "-c", mount, "sh", str(data), *serve]
    log = tmp_path / "serve.log"
    with log.open("wb") as out:
        env = {**os.environ, "RESPGATE_DATA_DIR": str(data)}  # the tests' conftest sets its own
        proc = subprocess.Popen(argv, cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + DEADLINE
        while True:
            if proc.poll() is not None:
                text = log.read_text()
                if "mount" in text and "permission denied" in text.lower():
                    pytest.skip(f"no tmpfs in a private mount namespace here: {text[-300:]}")
                raise AssertionError(f"respgate serve exited:\n{text}")
            assert time.monotonic() < deadline, log.read_text()
            with contextlib.suppress(httpx.TransportError):
                if httpx.get(f"{url}/health", timeout=1).status_code == 200:
                    break
            time.sleep(0.1)
        yield Gateway(url, proc, data, log)
    finally:
        if proc.poll() is None:
            proc.terminate()
            try:
                proc.wait(timeout=DEADLINE)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


@pytest.fixture
def upstream() -> Iterator[tuple[str, UpstreamLog]]:
    app, log = build_upstream({})
    with serve_in_thread(app) as url:
        yield url, log


def assert_not_stored(exc: openai.APIStatusError) -> None:
    assert exc.status_code == 503
    assert exc.code == "response_not_stored"
    assert exc.response.headers["x-should-retry"] == "false"
    assert isinstance(exc.body, dict)
    message = str(exc.body["message"])
    assert not any(text.lower() in message.lower() for text in INTERNAL), message


def test_a_full_disk(tmp_path: Path, upstream: tuple[str, UpstreamLog]) -> None:
    upstream_url, log = upstream
    with gateway_on_tmpfs(tmp_path, upstream_url) as gateway:
        kept = gateway.sdk.responses.create(model="m", input="remember this")
        assert httpx.get(f"{gateway.url}/ready").json()["store"] == "ready"

        gateway.fill()
        ready = httpx.get(f"{gateway.url}/ready")
        assert ready.status_code == 503, ready.text
        assert ready.json()["error"]["code"] == "storage_unavailable"
        assert "disk is full" in ready.json()["error"]["message"]
        assert httpx.get(f"{gateway.url}/health").status_code == 200

        # Bigger than the write-ahead log already is, so the save must grow a file.
        big = "x" * (gateway.wal_bytes() + 512 * 1024)
        before = len(log.posts())
        with pytest.raises(openai.InternalServerError) as raised:
            gateway.sdk.responses.create(
                model="m", input=big, extra_headers={"x-request-id": "req-full-1"}
            )
        assert_not_stored(raised.value)
        assert len(log.posts()) == before + 1  # the SDK did not retry: one generation

        with gateway.sdk.responses.create(model="m", input=big, stream=True) as stream:
            events = list(stream)
        types = [event.type for event in events]
        assert "response.output_text.delta" in types
        assert types[-2:] == ["error", "response.failed"], types
        error = events[-2]
        assert error.type == "error" and error.code == "response_not_stored"
        assert not any(text.lower() in error.message.lower() for text in INTERNAL)
        assert len(log.posts()) == before + 2
        # Reads do not need room.
        assert gateway.sdk.responses.retrieve(kept.id).output_text == kept.output_text

        gateway.free()
        assert httpx.get(f"{gateway.url}/ready").status_code == 200
        again = gateway.sdk.responses.create(model="m", input=big[:1000])
        assert gateway.sdk.responses.retrieve(again.id).status == "completed"
        assert gateway.sdk.responses.retrieve(kept.id).output_text == kept.output_text

    text = gateway.log.read_text()
    # SQLite's error is in the log, once per failure, with the request id and its traceback.
    assert "request_id=req-full-1" in text
    assert text.count("database or disk is full") >= 2
    assert "Traceback" in text
    assert os.path.exists(tmp_path / "data")
