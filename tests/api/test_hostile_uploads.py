"""Hostile uploads against the whole gateway in process (``create_app``, lifespan run, SQLite,
the disk blob store, the real extraction child), through the official ``openai`` SDK.

- The crafted files of the security review (tests/files/hostile.py: a DOCX zip bomb, a deeply
  nested DOCX, PDFs with too many pages, a compression bomb, and PDFs that keep pypdf busy for
  minutes) each fail within the ``[extraction]`` budget with OpenAI's ``last_error``, while a
  small file uploaded at the same time is ingested (``completed`` while they still run); no
  extraction process is left afterwards.
- An upload over ``max_upload_bytes`` is a 413 in OpenAI's envelope, answered before the rest
  of the body is read, and leaves no blob (nor a temporary file) and no record; so does an
  upload the client abandons halfway.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest
from starlette.types import Message

from app.main import create_app
from app.options.extraction import ExtractionSettings
from app.settings import Settings
from tests.api.test_conversations import ANSWER
from tests.fakes import FakeEmbedder, FakeUpstream
from tests.files import hostile
from tests.files.test_extract_process import extractor_pids
from tests.helpers import in_process, openai_client

# The slow PDFs run into this; the small file needs a fraction of it even on a busy machine.
TIME_BUDGET = 10.0
TERMINAL = ("completed", "failed", "cancelled")


def settings_for(data_dir: Path, **overrides: Any) -> Settings:
    return Settings(
        data_dir=data_dir,
        upstream_url="http://127.0.0.1:9/v1",
        extraction=ExtractionSettings(timeout_seconds=TIME_BUDGET, max_pdf_pages=1_000),
        **overrides,
    )


@pytest.fixture
def client(tmp_path: Path) -> Iterator[openai.OpenAI]:
    app = create_app(
        settings_for(tmp_path / "data"), upstream=FakeUpstream(body=ANSWER), embedder=FakeEmbedder()
    )
    with in_process(app) as http:
        yield openai_client(http)


def blob_names(data_dir: Path) -> list[str]:
    files = data_dir / "files"
    return sorted(p.name for p in files.iterdir()) if files.exists() else []


def statuses(client: openai.OpenAI, store_id: str) -> dict[str, Any]:
    return {f.id: f for f in client.vector_stores.files.list(store_id, limit=100)}


def test_hostile_files_fail_within_the_budget_while_a_small_file_is_ingested(
    client: openai.OpenAI,
) -> None:
    uploads = {
        "bomb.docx": hostile.zip_bomb_docx(300),
        "nested.docx": hostile.nested_docx(30_000),
        "pages.pdf": hostile.page_bomb_pdf(2_000),
        "flate.pdf": hostile.flate_bomb_pdf(100),
        "slow-1.pdf": hostile.slow_pdf(900, 8_000),
        "slow-2.pdf": hostile.slow_pdf(900, 8_001),
        "small.txt": b"The harbor opens at six.",
    }
    ids = {
        name: client.files.create(file=(name, data), purpose="assistants").id
        for name, data in uploads.items()
    }
    store = client.vector_stores.create(name="mixed", file_ids=list(ids.values()))

    # The small file is ingested while the slow PDFs are still being extracted.
    deadline = time.monotonic() + 120
    while (files := statuses(client, store.id))[ids["small.txt"]].status not in TERMINAL:
        assert time.monotonic() < deadline, "the small file was never ingested"
        time.sleep(0.05)
    assert files[ids["small.txt"]].status == "completed", files[ids["small.txt"]]
    assert files[ids["slow-1.pdf"]].status == "in_progress"
    assert files[ids["slow-2.pdf"]].status == "in_progress"
    found = client.vector_stores.search(store.id, query="harbor opens")
    assert [hit.file_id for hit in found.data] == [ids["small.txt"]]

    while True:
        files = statuses(client, store.id)
        if all(f.status in TERMINAL for f in files.values()):
            break
        assert time.monotonic() < deadline, "the hostile files were never stopped"
        time.sleep(0.1)
    errors = {name: files[ids[name]].last_error for name in uploads if name != "small.txt"}
    assert {name: error.code for name, error in errors.items() if error} == {
        "bomb.docx": "invalid_file",
        "nested.docx": "invalid_file",
        "pages.pdf": "invalid_file",
        "flate.pdf": "invalid_file",
        "slow-1.pdf": "server_error",
        "slow-2.pdf": "server_error",
    }
    messages = {name: error.message for name, error in errors.items() if error}
    assert "expands to 300" in messages["bomb.docx"]
    assert "Excessive depth in document" in messages["nested.docx"]
    assert messages["pages.pdf"] == "The PDF has 2000 pages, more than the 1000 allowed."
    assert "Limit reached while decompressing" in messages["flate.pdf"]
    for name in ("slow-1.pdf", "slow-2.pdf"):
        assert messages[name] == (
            f"Text extraction did not finish within the {TIME_BUDGET:g} seconds allowed."
        )
    counts = client.vector_stores.retrieve(store.id).file_counts
    assert (counts.completed, counts.failed, counts.in_progress) == (1, 6, 0)
    assert extractor_pids() == set()


def test_an_upload_over_the_limit_is_a_413_and_leaves_nothing(tmp_path: Path) -> None:
    data_dir = tmp_path / "data"
    app = create_app(
        settings_for(data_dir, max_upload_bytes=1_000),
        upstream=FakeUpstream(body=ANSWER),
        embedder=FakeEmbedder(),
    )
    with in_process(app) as http:
        client = openai_client(http)
        with pytest.raises(openai.APIStatusError) as refused:
            client.files.create(file=("big.txt", b"x" * 1_001), purpose="assistants")
        assert refused.value.status_code == 413
        body = refused.value.response.json()
        assert body == {
            "error": {
                "message": "The file exceeds the upload limit of 1000 bytes.",
                "type": "invalid_request_error",
                "param": None,
                "code": "request_too_large",
            }
        }
        assert client.files.list().data == []
        assert blob_names(data_dir) == []
        exact = client.files.create(file=("fits.txt", b"y" * 1_000), purpose="assistants")
        assert exact.bytes == 1_000
        assert blob_names(data_dir) == [exact.id]
        assert client.files.content(exact.id).content == b"y" * 1_000


# ------------------------------------------------------------------ the body as it arrives (ASGI)

BOUNDARY = "respgateboundary"
HEAD = (
    f'--{BOUNDARY}\r\nContent-Disposition: form-data; name="purpose"\r\n\r\nassistants\r\n'
    f'--{BOUNDARY}\r\nContent-Disposition: form-data; name="file"; filename="a.txt"\r\n'
    "Content-Type: text/plain\r\n\r\n"
).encode()


async def post_upload(
    app: Any, chunks: list[bytes], *, disconnect: bool = False
) -> tuple[list[Message], int]:
    """POST /v1/files straight to the ASGI app, one body message per chunk (and a disconnect
    after them when ``disconnect``); the messages sent back and how many chunks were read."""
    pending = list(chunks)
    read = 0
    sent: list[Message] = []

    async def receive() -> Message:
        nonlocal read
        if pending:
            read += 1
            chunk = pending.pop(0)
            return {"type": "http.request", "body": chunk, "more_body": bool(pending) or disconnect}
        if disconnect:
            return {"type": "http.disconnect"}
        await asyncio.Event().wait()  # the client sent everything and waits
        raise AssertionError("unreachable")

    async def send(message: Message) -> None:
        sent.append(message)

    scope = {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": "POST",
        "scheme": "http",
        "path": "/v1/files",
        "raw_path": b"/v1/files",
        "query_string": b"",
        "root_path": "",
        "headers": [(b"content-type", f"multipart/form-data; boundary={BOUNDARY}".encode())],
        "client": ("127.0.0.1", 1234),
        "server": ("127.0.0.1", 9000),
        "state": {},
    }
    await app(scope, receive, send)
    return sent, read


@pytest.fixture
async def gateway_app(tmp_path: Path) -> AsyncIterator[Any]:
    """The gateway with its lifespan run in the test's event loop (the tests call it there)."""
    app = create_app(
        settings_for(tmp_path / "data", max_upload_bytes=10_000),
        upstream=FakeUpstream(body=ANSWER),
        embedder=FakeEmbedder(),
    )
    async with app.router.lifespan_context(app):
        yield app


async def test_the_413_comes_as_soon_as_the_file_passes_the_limit(
    gateway_app: Any, tmp_path: Path
) -> None:
    chunks = [HEAD] + [b"z" * 1_000] * 100 + [f"\r\n--{BOUNDARY}--\r\n".encode()]
    sent, read = await post_upload(gateway_app, chunks)
    assert sent[0]["status"] == 413
    assert read == 12  # the fields, then 11 chunks of the file: 11,000 bytes > 10,000
    assert blob_names(tmp_path / "data") == []


async def test_an_interrupted_upload_leaves_no_blob_and_no_record(
    gateway_app: Any, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    chunks = [HEAD] + [b"z" * 1_000] * 5
    sent, read = await post_upload(gateway_app, chunks, disconnect=True)
    assert read == len(chunks)
    assert sent[0]["status"] == 400
    assert blob_names(tmp_path / "data") == []
    assert not [r for r in caplog.records if r.levelname in ("ERROR", "CRITICAL")]
    transport = httpx.ASGITransport(app=gateway_app)
    async with httpx.AsyncClient(transport=transport, base_url="http://gateway") as http:
        listed = await http.get("/v1/files")
    assert listed.json()["data"] == []
