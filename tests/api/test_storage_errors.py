"""How storage failures and bugs reach a client, in process (the real faults, through real
databases, are tests/api/test_storage_failures.py and tests/serving/test_storage_faults.py).

- The store adapter's classification (``app.store.failures``): real SQLite errors (a database
  past its ``max_page_count`` is SQLite's own "database or disk is full"), the SQLite writer
  thread, OS errors; a constraint violation or a ``KeyError`` stays a bug.
- The mapping, with the tests' in-memory store raising ``StorageUnavailableError`` where an
  adapter would: 503 ``storage_unavailable`` before the generation (the SDK may retry), 503
  ``response_not_stored`` with ``x-should-retry: false`` after it, the stream's ``error`` event;
  a bug in a stream ends it with a fixed message, never the exception's text; ``/ready`` names
  the store.
"""

from __future__ import annotations

import errno
import io
import sqlite3
from collections.abc import Iterator
from pathlib import Path

import openai
import pytest
from sqlalchemy import exc as sa_exc
from starlette.testclient import TestClient

from app.core.ports import NewResponse, StoredResponse
from app.errors import StorageUnavailableError
from app.files import extract_worker
from app.main import create_app
from app.settings import Settings
from app.store.failures import is_unavailable, translated
from app.store.sqlite_writer import SqliteWriter
from tests.fakes import FakeEmbedder, FakeUpstream, MemoryResponseStore, text_response
from tests.helpers import in_process, openai_client

SECRET = "driver says: /srv/data/respgate.db is on fire"


# ------------------------------------------------------------------ the adapter's classification


def full_database(path: Path) -> sqlite3.Connection:
    connection = sqlite3.connect(path, isolation_level=None)
    connection.execute("CREATE TABLE t (x BLOB)")
    connection.execute("PRAGMA max_page_count = 3")
    return connection


def test_sqlite_full_and_read_only_are_unavailable(tmp_path: Path) -> None:
    connection = full_database(tmp_path / "full.db")
    with pytest.raises(sqlite3.OperationalError) as full:
        connection.execute("INSERT INTO t VALUES (?)", (bytes(64 * 1024),))
    assert full.value.sqlite_errorcode == sqlite3.SQLITE_FULL
    assert is_unavailable(full.value)
    connection.execute("PRAGMA query_only = ON")
    with pytest.raises(sqlite3.OperationalError) as read_only:
        connection.execute("INSERT INTO t VALUES (1)")
    assert is_unavailable(read_only.value)
    wrapped = sa_exc.OperationalError("INSERT", None, read_only.value)
    assert isinstance(translated(wrapped), StorageUnavailableError)


def test_bugs_are_not_unavailable(tmp_path: Path) -> None:
    connection = sqlite3.connect(tmp_path / "db", isolation_level=None)
    connection.execute("CREATE TABLE t (x PRIMARY KEY)")
    connection.execute("INSERT INTO t VALUES (1)")
    with pytest.raises(sqlite3.IntegrityError) as duplicate:
        connection.execute("INSERT INTO t VALUES (1)")
    with pytest.raises(sqlite3.OperationalError) as syntax:
        connection.execute("SELEC 1")
    for bug in (
        duplicate.value,
        sa_exc.IntegrityError("INSERT", None, duplicate.value),
        syntax.value,
        KeyError("x"),
        OSError(errno.ENOENT, "gone"),
    ):
        assert not is_unavailable(bug), bug
        assert translated(bug) is bug
    for failure in (OSError(errno.ENOSPC, "full"), OSError(errno.EROFS, "ro"), ConnectionError()):
        assert is_unavailable(failure), failure


async def test_the_sqlite_writer_reports_a_full_database(tmp_path: Path) -> None:
    full_database(tmp_path / "full.db").close()
    writer = SqliteWriter(str(tmp_path / "full.db"))

    def insert(connection: sqlite3.Connection) -> None:
        connection.execute("PRAGMA max_page_count = 3")
        connection.execute("INSERT INTO t VALUES (?)", (bytes(64 * 1024),))

    try:
        with pytest.raises(StorageUnavailableError) as raised:
            await writer.transaction(insert)
        assert isinstance(raised.value.__cause__, sqlite3.OperationalError)
        assert raised.value.message == StorageUnavailableError().message
        # The writer is still usable once there is room.
        await writer.transaction(lambda c: c.execute("INSERT INTO t VALUES (1)"))
    finally:
        await writer.aclose()


# ------------------------------------------------------------------ the mapping


class BrokenStore(MemoryResponseStore):
    """``reads`` / ``saves``: what loading a response / saving one raises instead."""

    def __init__(self) -> None:
        super().__init__()
        self.reads: Exception | None = None
        self.saves: Exception | None = None

    async def get_response(self, response_id: str, *, tenant: str) -> StoredResponse | None:
        if self.reads is not None:
            raise self.reads
        return await super().get_response(response_id, tenant=tenant)

    async def save_response(self, new: NewResponse, *, tenant: str) -> None:
        if self.saves is not None:
            raise self.saves
        await super().save_response(new, tenant=tenant)

    async def readiness_problem(self) -> str | None:
        return "the database is not answering" if self.reads is not None else None


def unavailable() -> StorageUnavailableError:
    try:
        raise OSError(errno.ENOSPC, SECRET)
    except OSError as exc:
        try:
            raise StorageUnavailableError() from exc
        except StorageUnavailableError as error:
            return error


@pytest.fixture
def gateway(tmp_path: Path) -> Iterator[tuple[TestClient, BrokenStore, FakeUpstream]]:
    store = BrokenStore()
    upstream = FakeUpstream(
        body=text_response("Hi there"),
        events=[
            {"type": "response.created", "response": text_response("")},
            {"type": "response.completed", "response": text_response("Hi there")},
        ],
    )
    app = create_app(
        Settings(data_dir=tmp_path), upstream=upstream, store=store, embedder=FakeEmbedder()
    )
    with in_process(app) as http:
        yield http, store, upstream


def test_before_the_generation_a_retry_is_safe(
    gateway: tuple[TestClient, BrokenStore, FakeUpstream],
) -> None:
    http, store, upstream = gateway
    kept = http.post("/v1/responses", json={"model": "m", "input": "hi"}).json()
    store.reads = unavailable()
    body = {"model": "m", "input": "again", "previous_response_id": kept["id"]}
    for reply in (http.post("/v1/responses", json=body), http.get(f"/v1/responses/{kept['id']}")):
        assert reply.status_code == 503
        assert reply.json()["error"]["code"] == "storage_unavailable"
        assert "x-should-retry" not in reply.headers
        assert SECRET not in reply.text
    assert len(upstream.requests) == 1
    ready = http.get("/ready")
    assert ready.status_code == 503
    assert ready.json()["error"] == {
        "message": "the store is unavailable (the database is not answering)",
        "type": "server_error",
        "param": None,
        "code": "storage_unavailable",
    }
    assert http.get("/health").status_code == 200
    store.reads = None
    assert http.get("/ready").json()["store"] == "ready"


def test_after_the_generation_the_sdk_does_not_retry(
    gateway: tuple[TestClient, BrokenStore, FakeUpstream], caplog: pytest.LogCaptureFixture
) -> None:
    http, store, upstream = gateway
    store.saves = unavailable()
    client = openai_client(http).with_options(max_retries=2)
    with pytest.raises(openai.InternalServerError) as raised:
        client.responses.create(model="m", input="hi", extra_headers={"x-request-id": "abc"})
    assert raised.value.status_code == 503
    assert raised.value.code == "response_not_stored"
    assert raised.value.response.headers["x-should-retry"] == "false"
    assert SECRET not in raised.value.response.text
    assert len(upstream.requests) == 1
    [line] = [r for r in caplog.records if "response_not_stored" in r.getMessage()]
    assert "request_id=abc" in line.getMessage() and line.exc_info is not None

    with client.responses.create(model="m", input="hi", stream=True) as stream:
        events = list(stream)
    assert [e.type for e in events[-2:]] == ["error", "response.failed"]
    assert events[-2].code == "response_not_stored"  # type: ignore[union-attr]
    assert SECRET not in events[-2].message  # type: ignore[union-attr]
    assert len(upstream.requests) == 2


def test_a_bug_in_a_stream_has_a_fixed_message(
    gateway: tuple[TestClient, BrokenStore, FakeUpstream],
) -> None:
    http, store, _ = gateway
    store.saves = KeyError(SECRET)
    reply = http.post("/v1/responses", json={"model": "m", "input": "hi", "stream": True})
    assert reply.status_code == 200
    assert SECRET not in reply.text
    assert "The server had an error while processing your request." in reply.text


def test_an_unforeseen_extraction_failure_keeps_its_text_for_the_log(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    def broken(*args: object, **kwargs: object) -> str:
        raise KeyError(SECRET)

    monkeypatch.setattr(extract_worker, "extract_text", broken)
    reply = extract_worker.extract_reply({"filename": "a.pdf"}, io.BytesIO(b"%PDF"))
    assert reply["error"]["code"] == "server_error"
    assert reply["error"]["message"] == extract_worker.UNEXPECTED_FAILURE
    assert SECRET in reply["error"]["detail"]  # logged by extract_process, never sent
