"""The read-only root filesystem of the compose files, proven without Docker: a real run of the
gateway with every mount read-only except its data directory and its temporary directory.

``tests/readonly/enter.py`` does, in a private mount namespace (``unshare``), what ``docker run
--read-only`` with a volume and a tmpfs does: the data directory (the image's ``/data``) and
``TMPDIR`` (the image's ``/tmp``) writable, everything else (the virtualenv, ``HOME``, the
working directory, the checkout, the system's /tmp) read-only, for root too. In it run, as the
image runs them (the image's environment: ``HF_HUB_OFFLINE``, ``PYTHONDONTWRITEBYTECODE`` ...):
``respgate migrate``, ``respgate serve`` answering the ``openai`` SDK (a stored response and its
continuation, a file upload ingested into a vector store with the local embedding model, so
torch and sentence-transformers load), ``respgate purge --dry-run``, and a clean stop. Every
Python process logs each write it attempts (``tests/readonly/sitecustomize.py``, an audit hook:
failed attempts too), and the test checks that all of them went to the two writable places,
which are the places tests/test_container.py requires the compose files to mount
(``WRITABLE``).
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import httpx
import openai
import pytest
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse

from app.files.embeddings import local_embeddings_installed
from tests.fakes import message, round_events, text_response
from tests.helpers import free_port, responses_app, serve_in_thread
from tests.test_container import DATA_DIR, WRITABLE

ROOT = Path(__file__).resolve().parents[1]
READONLY = ROOT / "tests" / "readonly"
BIN = Path(sys.executable).parent
DEADLINE = 180.0  # generous: the proof is the run, not its time (a model loads on a busy box)
# The image's environment (Dockerfile, final stage), less what the test places itself.
IMAGE_ENV = {
    "PYTHONDONTWRITEBYTECODE": "1",
    "PYTHONUNBUFFERED": "1",
    "HF_HUB_OFFLINE": "1",
    "TRANSFORMERS_OFFLINE": "1",
}


def unshare_prefix() -> list[str]:
    """How this machine gives a process a private mount namespace in which it may mount."""
    unshare = shutil.which("unshare")
    if unshare is None:
        pytest.skip("unshare (util-linux) is not installed: no mount namespace for the run")
    user = [] if os.geteuid() == 0 else ["--user", "--map-root-user"]
    return [unshare, *user, "--mount", "--propagation", "private", "--"]


class ReadOnlyRoot:
    """Runs commands with a read-only root: writable only ``data``, ``tmp`` (and the audit log's
    directory), ``HOME`` and the working directory ``home`` read-only."""

    def __init__(self, base: Path) -> None:
        self.data, self.tmp, self.home, self.audit = (
            base / "data",
            base / "tmp",
            base / "home",
            base / "audit",
        )
        for path in (self.data, self.tmp, self.home, self.audit):
            path.mkdir()
        self.log = self.audit / "writes.log"
        self.env = {
            **IMAGE_ENV,
            "PATH": f"{BIN}:/usr/local/bin:/usr/bin:/bin",
            "HOME": str(self.home),
            "TMPDIR": str(self.tmp),
            "RESPGATE_DATA_DIR": str(self.data),
            "PYTHONPATH": str(READONLY),
            "RESPGATE_WRITE_AUDIT": str(self.log),
        }

    def argv(self, *command: str) -> list[str]:
        """``command`` (a program and its arguments) with the read-only root."""
        enter = [sys.executable, "-I", str(READONLY / "enter.py")]
        for path in (self.data, self.tmp, self.audit):
            enter += ["--writable", str(path)]
        return [*unshare_prefix(), *enter, "--", *command]

    def respgate(self, *arguments: str) -> list[str]:
        return self.argv(str(BIN / "respgate"), *arguments)

    def run(self, *arguments: str) -> subprocess.CompletedProcess[str]:
        """``respgate arguments`` with the read-only root, to its end."""
        return subprocess.run(
            self.respgate(*arguments),
            cwd=self.home,
            env=self.env,
            capture_output=True,
            text=True,
            timeout=DEADLINE,
        )

    def writes(self) -> list[tuple[str, Path]]:
        """(event, path) of every write attempted, in order."""
        lines = self.log.read_text().splitlines() if self.log.exists() else []
        found = []
        for line in lines:
            _pid, event, path = line.split(" ", 2)
            found.append((event, Path(path)))
        return found


@pytest.fixture
def root(tmp_path: Path) -> ReadOnlyRoot:
    readonly = ReadOnlyRoot(tmp_path)
    probe = subprocess.run(
        [*unshare_prefix(), sys.executable, "-I", str(READONLY / "enter.py"), "--", "true"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    if probe.returncode != 0:
        pytest.skip(f"no private mount namespace here (unshare): {probe.stderr.strip()[-300:]}")
    return readonly


def test_the_probe_itself_refuses_writes_outside_the_writable_places(
    root: ReadOnlyRoot, tmp_path: Path
) -> None:
    """What the run below relies on: a write to HOME, the checkout or the system's /tmp fails;
    one to the data directory succeeds."""
    script = (
        "import sys\n"
        "for path in sys.argv[1:]:\n"
        "    try:\n"
        "        open(path, 'w').close(); print('wrote', path)\n"
        "    except OSError as exc:\n"
        "        print('refused', path, exc.errno)\n"
    )
    targets = [root.home / "x", ROOT / "x", Path("/tmp") / f"x-{os.getpid()}", root.data / "x"]
    argv = root.argv(sys.executable, "-c", script, *map(str, targets))
    result = subprocess.run(argv, env=root.env, cwd=root.home, capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == [
        f"refused {targets[0]} 30",
        f"refused {targets[1]} 30",
        f"refused {targets[2]} 30",
        f"wrote {targets[3]}",
    ]


# --------------------------------------------------------------------------- the run


@contextlib.contextmanager
def upstream() -> Iterator[str]:
    """A model server answering every request with a fresh message, as JSON or as SSE."""
    count = 0

    async def infer(request: Request) -> Response:
        nonlocal count
        count += 1
        body = await request.json()
        if body.get("stream"):
            events = round_events([message(f"answer {count}")])

            async def stream() -> AsyncIterator[bytes]:
                for event in events:
                    yield f"event: {event['type']}\ndata: {json.dumps(event)}\n\n".encode()

            return StreamingResponse(stream(), media_type="text/event-stream")
        return JSONResponse(text_response(f"answer {count}"))

    with serve_in_thread(responses_app(infer)) as url:
        yield url


@contextlib.contextmanager
def serving(root: ReadOnlyRoot, upstream_url: str) -> Iterator[openai.OpenAI]:
    port = free_port()
    command = ["serve", "--host", "127.0.0.1", "--port", str(port), "--upstream-url", upstream_url]
    log = root.audit / "serve.log"
    with log.open("w") as out:
        proc = subprocess.Popen(
            root.respgate(*command),
            cwd=root.home,
            env=root.env,
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    try:
        url = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + DEADLINE
        while True:
            assert proc.poll() is None, f"respgate serve exited:\n{log.read_text()}"
            assert time.monotonic() < deadline, f"respgate serve did not start:\n{log.read_text()}"
            with contextlib.suppress(httpx.TransportError):
                if httpx.get(f"{url}/health", timeout=1).status_code == 200:
                    break
            time.sleep(0.1)
        with openai.OpenAI(base_url=f"{url}/v1", api_key="sk-test", max_retries=0) as client:
            yield client
        proc.terminate()
        assert proc.wait(timeout=60) == 0, log.read_text()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def ingest(client: openai.OpenAI) -> str:
    """Upload a file, put it in a vector store, wait for its ingestion (the local embedding
    model embeds it); the file's status."""
    upload = client.files.create(
        file=("herons.txt", b"Herons wade in shallow water and spear fish with their bills."),
        purpose="assistants",
    )
    store = client.vector_stores.create(name="docs", file_ids=[upload.id])
    deadline = time.monotonic() + DEADLINE
    while True:
        record = client.vector_stores.files.retrieve(upload.id, vector_store_id=store.id)
        if record.status != "in_progress" or time.monotonic() > deadline:
            assert record.last_error is None, record.last_error
            return record.status
        time.sleep(0.2)


def test_the_gateway_writes_only_its_data_directory_and_tmp(root: ReadOnlyRoot) -> None:
    if not local_embeddings_installed():
        pytest.skip("the local embedding model (respgate[embeddings]) is not installed")
    migrated = root.run("migrate")
    assert migrated.returncode == 0, migrated.stderr
    with upstream() as upstream_url, serving(root, upstream_url) as client:
        first = client.responses.create(model="m", input="hello")
        second = client.responses.create(model="m", input="again", previous_response_id=first.id)
        assert second.output_text.startswith("answer")
        assert client.responses.retrieve(first.id).id == first.id
        assert ingest(client) == "completed"
    purge = root.run("purge", "--dry-run", "--older-than", "1d")
    assert purge.returncode == 0, purge.stderr
    assert "would remove 0 responses" in purge.stdout

    writes = root.writes()
    assert writes, "the audit hook logged nothing: did the processes load it?"
    outside = [
        (event, str(path))
        for event, path in writes
        if not (path.is_relative_to(root.data) or path.is_relative_to(root.tmp))
        and not path.is_relative_to("/dev")  # /dev/null: a container has its /dev
    ]
    assert outside == []
    # What the gateway keeps: the database, the compaction key, the uploaded file's bytes.
    inside = [path.relative_to(root.data) for _, path in writes if path.is_relative_to(root.data)]
    kept = {path.parts[0] for path in inside if path.parts}
    assert {"respgate.db", "compaction.key", "files"} <= kept
    # The two places are where the compose files mount a volume and a tmpfs.
    assert {DATA_DIR, "/tmp"} == WRITABLE
