"""The contract of the ``FileStores`` / ``FileStore`` ports (files, vector stores, their files
and batches, one tenant's view at a time) and of the ``BlobStore`` port: the same tests on
every implementation.

FileStores: the in-memory fake (``tests.fakes.MemoryFileStores``), ``SqlFileStores`` on SQLite
(schema built by the migrations) and on PostgreSQL (the session's scratch schema; skipped
without a server unless ``CI`` is set). The single-tenant tests use the default tenant's view;
the two-tenant ones check that a view never sees, changes or deletes another tenant's rows.
BlobStore: ``MemoryBlobStore`` and ``DiskBlobStore`` (plus the disk's own guarantees: whole
writes, safe ids).
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import AsyncIterator
from dataclasses import replace
from pathlib import Path

import pytest
from sqlalchemy import text

from app.core.store_errors import UnknownCursorError
from app.core.tenancy import DEFAULT_TENANT
from app.files.ports import (
    BlobStore,
    FileStore,
    FileStores,
    StoredFile,
    StoredFileBatch,
    StoredVectorStore,
    StoredVectorStoreFile,
)
from app.store.blobs import DiskBlobStore
from app.store.engine import create_engine_for, create_schema
from app.store.files_sql import SqlFileStores
from app.store.migrate import upgrade_to_head
from tests.fakes import MemoryBlobStore, MemoryFileStores
from tests.store.conftest import Postgres, _in_schema

TABLES = "files, vector_stores, vector_store_files, vector_store_file_batches"


@pytest.fixture(params=["memory", "sqlite", "postgres"])
async def file_stores(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[FileStores]:
    """Memory: the fake; SQLite: schema built by the migrations; PostgreSQL: the session's
    scratch schema."""
    if request.param == "memory":
        yield MemoryFileStores()
        return
    if request.param == "sqlite":
        url = f"sqlite+aiosqlite:///{tmp_path / 'data' / 'respgate.db'}"
        await upgrade_to_head(url)
        engine = create_engine_for(url)
    else:
        pg: Postgres = request.getfixturevalue("postgres")
        engine = _in_schema(create_engine_for(pg.url), pg.schema)
        await create_schema(engine)
        async with engine.begin() as conn:
            await conn.execute(text(f"TRUNCATE {TABLES}"))
    try:
        yield SqlFileStores(engine)
    finally:
        await engine.dispose()


@pytest.fixture
def files(file_stores: FileStores) -> FileStore:
    """The default tenant's view (what a gateway without authentication uses)."""
    return file_stores.for_tenant(DEFAULT_TENANT)


def a_file(file_id: str, created_at: int = 1_700_000_000, **kw: object) -> StoredFile:
    values: dict[str, object] = {
        "id": file_id,
        "filename": f"{file_id}.txt",
        "purpose": "assistants",
        "bytes": 1234,
        "created_at": created_at,
    }
    values.update(kw)
    return StoredFile(**values)  # type: ignore[arg-type]


def a_store(store_id: str, created_at: int = 1_700_000_000, **kw: object) -> StoredVectorStore:
    values: dict[str, object] = {
        "id": store_id,
        "name": f"store {store_id}",
        "created_at": created_at,
        "metadata": {"z": "1", "a": "2"},
        "expires_after": None,
        "expires_at": None,
        "last_active_at": created_at,
        "status": "completed",
        "usage_bytes": 0,
    }
    values.update(kw)
    return StoredVectorStore(**values)  # type: ignore[arg-type]


def a_store_file(
    store_id: str, file_id: str, created_at: int = 1_700_000_000, **kw: object
) -> StoredVectorStoreFile:
    values: dict[str, object] = {
        "vector_store_id": store_id,
        "file_id": file_id,
        "created_at": created_at,
        "status": "in_progress",
        "last_error": None,
        "attributes": {},
        "chunking_strategy": {
            "type": "static",
            "static": {"max_chunk_size_tokens": 800, "chunk_overlap_tokens": 400},
        },
        "usage_bytes": 0,
    }
    values.update(kw)
    return StoredVectorStoreFile(**values)  # type: ignore[arg-type]


# --- files ------------------------------------------------------------------------------------


async def test_file_round_trip(files: FileStore) -> None:
    stored = a_file("file-1", expires_at=1_800_000_000, bytes=3 * 2**31, filename="ü ☃.pdf")
    await files.add_file(stored)

    assert await files.get_file("file-1") == stored
    assert await files.get_file("file-missing") is None
    assert (await files.get_file("file-1")).to_object()["bytes"] == 3 * 2**31  # type: ignore[union-attr]


async def test_list_files_pages_like_openai(files: FileStore) -> None:
    # two share a created_at: the id breaks the tie
    for file_id, created_at, purpose in [
        ("file-a", 10, "assistants"),
        ("file-c", 20, "assistants"),
        ("file-b", 20, "batch"),
        ("file-d", 30, "assistants"),
    ]:
        await files.add_file(a_file(file_id, created_at, purpose=purpose))

    async def ids(**kw: object) -> list[str]:
        params: dict[str, object] = {"purpose": None, "after": None, "limit": 10, "order": "desc"}
        params.update(kw)
        return [file.id for file in await files.list_files(**params)]  # type: ignore[arg-type]

    assert await ids() == ["file-d", "file-c", "file-b", "file-a"]
    assert await ids(order="asc") == ["file-a", "file-b", "file-c", "file-d"]
    assert await ids(limit=2) == ["file-d", "file-c", "file-b"]  # limit + 1
    assert await ids(limit=2, after="file-c") == ["file-b", "file-a"]
    assert await ids(order="asc", after="file-b") == ["file-c", "file-d"]
    assert await ids(purpose="assistants") == ["file-d", "file-c", "file-a"]
    assert await ids(purpose="assistants", after="file-b") == ["file-a"]
    assert await ids(after="file-a") == []
    with pytest.raises(UnknownCursorError):
        await ids(after="file-unknown")


async def test_delete_file_detaches_it_from_vector_stores(files: FileStore) -> None:
    await files.add_file(a_file("file-1"))
    await files.add_file(a_file("file-2"))
    for store_id in ("vs_1", "vs_2"):
        await files.create_vector_store(a_store(store_id))
        await files.put_vector_store_file(a_store_file(store_id, "file-1"))
        await files.put_vector_store_file(a_store_file(store_id, "file-2", status="completed"))

    assert await files.delete_file("file-1") is True
    assert await files.delete_file("file-1") is False

    assert await files.get_file("file-1") is None
    for store_id in ("vs_1", "vs_2"):
        assert await files.get_vector_store_file(store_id, "file-1") is None
        assert await files.get_vector_store_file(store_id, "file-2") is not None
        assert (await files.file_counts(store_id))["total"] == 1


# --- vector stores ----------------------------------------------------------------------------


async def test_vector_store_round_trip_and_update(files: FileStore) -> None:
    store = a_store(
        "vs_1",
        expires_after={"anchor": "last_active_at", "days": 7},
        expires_at=1_700_604_800,
        status="in_progress",
    )
    await files.create_vector_store(store)

    loaded = await files.get_vector_store("vs_1")
    assert loaded == store
    assert list(loaded.metadata) == ["z", "a"]  # type: ignore[union-attr]  # key order kept
    assert await files.get_vector_store("vs_missing") is None

    changed = replace(
        store,
        name=None,
        metadata={"b": "3"},
        last_active_at=1_700_000_100,
        status="completed",
        usage_bytes=4096,
        expires_after=None,
        expires_at=None,
    )
    await files.update_vector_store(changed)
    assert await files.get_vector_store("vs_1") == changed


async def test_list_vector_stores(files: FileStore) -> None:
    for store_id, created_at in [("vs_a", 1), ("vs_b", 2), ("vs_c", 2), ("vs_d", 3)]:
        await files.create_vector_store(a_store(store_id, created_at))

    async def ids(**kw: object) -> list[str]:
        params: dict[str, object] = {"after": None, "limit": 10, "order": "desc"}
        params.update(kw)
        return [store.id for store in await files.list_vector_stores(**params)]  # type: ignore[arg-type]

    assert await ids() == ["vs_d", "vs_c", "vs_b", "vs_a"]
    assert await ids(order="asc", limit=1) == ["vs_a", "vs_b"]
    assert await ids(after="vs_c", limit=1) == ["vs_b", "vs_a"]
    with pytest.raises(UnknownCursorError):
        await ids(after="vs_unknown")


async def test_delete_vector_store_deletes_its_files_and_batches(files: FileStore) -> None:
    await files.add_file(a_file("file-1"))
    for store_id in ("vs_1", "vs_2"):
        await files.create_vector_store(a_store(store_id))
        await files.put_vector_store_file(a_store_file(store_id, "file-1"))
        await files.put_file_batch(
            StoredFileBatch(f"vsfb_{store_id}", store_id, 5, "in_progress", ["file-1"])
        )

    assert await files.delete_vector_store("vs_1") is True
    assert await files.delete_vector_store("vs_1") is False

    assert await files.get_vector_store("vs_1") is None
    assert await files.get_vector_store_file("vs_1", "file-1") is None
    assert await files.get_file_batch("vs_1", "vsfb_vs_1") is None
    assert (await files.file_counts("vs_1"))["total"] == 0
    assert await files.get_file("file-1") is not None  # the file itself stays
    assert await files.get_vector_store_file("vs_2", "file-1") is not None
    assert await files.get_file_batch("vs_2", "vsfb_vs_2") is not None


# --- vector store files -------------------------------------------------------------------------


async def test_put_vector_store_file_inserts_then_replaces(files: FileStore) -> None:
    record = a_store_file("vs_1", "file-1", attributes={"author": "ann", "year": 2024})
    await files.put_vector_store_file(record)
    assert await files.get_vector_store_file("vs_1", "file-1") == record

    failed = replace(
        record,
        status="failed",
        last_error={"code": "unsupported_file", "message": "no text"},
        attributes={"author": "bob", "score": 0.5, "draft": True},
        usage_bytes=77,
    )
    await files.put_vector_store_file(failed)

    assert await files.get_vector_store_file("vs_1", "file-1") == failed
    assert await files.get_vector_store_file("vs_2", "file-1") is None
    assert await files.delete_vector_store_file("vs_1", "file-1") is True
    assert await files.delete_vector_store_file("vs_1", "file-1") is False
    assert await files.get_vector_store_file("vs_1", "file-1") is None


async def test_list_vector_store_files(files: FileStore) -> None:
    for file_id, created_at, status in [
        ("file-a", 1, "completed"),
        ("file-b", 2, "in_progress"),
        ("file-c", 2, "completed"),
        ("file-d", 3, "failed"),
    ]:
        await files.put_vector_store_file(a_store_file("vs_1", file_id, created_at, status=status))
    await files.put_vector_store_file(a_store_file("vs_2", "file-z", 2))

    async def ids(**kw: object) -> list[str]:
        params: dict[str, object] = {"status": None, "after": None, "limit": 10, "order": "desc"}
        params.update(kw)
        listed = await files.list_vector_store_files("vs_1", **params)  # type: ignore[arg-type]
        return [record.file_id for record in listed]

    assert await ids() == ["file-d", "file-c", "file-b", "file-a"]
    assert await ids(order="asc") == ["file-a", "file-b", "file-c", "file-d"]
    assert await ids(limit=1, after="file-c") == ["file-b", "file-a"]
    assert await ids(status="completed") == ["file-c", "file-a"]
    assert await ids(status="completed", after="file-b") == ["file-a"]
    assert await ids(file_ids=["file-a", "file-d", "file-z"]) == ["file-d", "file-a"]
    assert await ids(file_ids=[]) == []
    with pytest.raises(UnknownCursorError):
        await ids(after="file-z")  # in another store
    counts = await files.file_counts("vs_1")
    assert counts == {
        "in_progress": 1,
        "completed": 2,
        "failed": 1,
        "cancelled": 0,
        "total": 4,
    }
    assert (await files.file_counts("vs_none"))["total"] == 0


async def test_file_batches(files: FileStore) -> None:
    batch = StoredFileBatch("vsfb_1", "vs_1", 100, "in_progress", ["file-2", "file-1"])
    await files.put_file_batch(batch)
    assert await files.get_file_batch("vs_1", "vsfb_1") == batch
    assert await files.get_file_batch("vs_2", "vsfb_1") is None  # another store's batch

    done = replace(batch, status="completed")
    await files.put_file_batch(done)

    assert await files.get_file_batch("vs_1", "vsfb_1") == done


# --- blobs (the BlobStore contract, then the disk's own guarantees) ----------------------------


@pytest.fixture(params=["memory", "disk"])
async def blobs(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[BlobStore]:
    """Memory: the fake; disk: ``DiskBlobStore`` under a directory not created yet."""
    store: BlobStore = (
        MemoryBlobStore() if request.param == "memory" else DiskBlobStore(tmp_path / "files")
    )
    try:
        yield store
    finally:
        await store.aclose()


async def test_blob_round_trip(blobs: BlobStore) -> None:
    assert await blobs.get("file-1") is None  # nothing stored yet
    await blobs.delete("file-1")  # nothing to delete: fine

    await blobs.put("file-1", b"\x00first")
    await blobs.put("file-2", b"")
    assert await blobs.get("file-1") == b"\x00first"
    assert await blobs.get("file-2") == b""
    await blobs.put("file-1", b"second")
    assert await blobs.get("file-1") == b"second"

    await blobs.delete("file-1")
    assert await blobs.get("file-1") is None
    assert await blobs.get("file-2") == b""


async def test_blob_keeps_its_own_copy(blobs: BlobStore) -> None:
    data = bytearray(b"original")
    await blobs.put("file-1", data)  # type: ignore[arg-type]  # a caller's buffer
    data[:] = b"changed!"
    assert await blobs.get("file-1") == b"original"


async def _pieces(*pieces: bytes, fail: Exception | None = None) -> AsyncIterator[bytes]:
    for piece in pieces:
        await asyncio.sleep(0)
        yield piece
    if fail is not None:
        raise fail


async def test_blob_streamed_in_pieces(blobs: BlobStore) -> None:
    assert await blobs.put_stream("file-1", _pieces(b"ab", b"", b"c" * 3_000_000)) == 3_000_002
    assert await blobs.get("file-1") == b"ab" + b"c" * 3_000_000
    assert await blobs.put_stream("file-2", _pieces()) == 0
    assert await blobs.get("file-2") == b""


async def test_a_failed_stream_leaves_nothing(blobs: BlobStore) -> None:
    with pytest.raises(ValueError, match="client gone"):
        await blobs.put_stream("file-1", _pieces(b"x" * 2_000_000, fail=ValueError("client gone")))
    assert await blobs.get("file-1") is None
    assert await blobs.local_path("file-1") is None


async def test_disk_blob_store_stream_failure_and_cancel_leave_no_file(tmp_path: Path) -> None:
    blobs = DiskBlobStore(tmp_path / "files")
    await blobs.put("file-1", b"kept")
    with pytest.raises(RuntimeError):
        await blobs.put_stream("file-1", _pieces(b"x" * 3_000_000, fail=RuntimeError()))
    arrived = asyncio.Event()

    async def stalled() -> AsyncIterator[bytes]:
        yield b"y" * 2_000_000
        arrived.set()
        await asyncio.Event().wait()
        yield b""

    task = asyncio.create_task(blobs.put_stream("file-2", stalled()))
    await arrived.wait()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert sorted(os.listdir(tmp_path / "files")) == ["file-1"]  # no temporary file left
    assert await blobs.get("file-1") == b"kept"  # a failed rewrite keeps the old bytes
    assert await blobs.local_path("file-1") == tmp_path / "files" / "file-1"
    assert await blobs.local_path("file-2") is None


async def test_disk_blob_store_leaves_only_its_blobs(tmp_path: Path) -> None:
    root = tmp_path / "data" / "files"
    blobs = DiskBlobStore(root)
    await blobs.put("file-1", b"first")
    await blobs.put("file-2", b"")
    await blobs.put("file-1", b"second")
    assert sorted(os.listdir(root)) == ["file-1", "file-2"]  # no temporary file left
    await blobs.delete("file-1")
    assert sorted(os.listdir(root)) == ["file-2"]


async def test_disk_blob_store_concurrent_writes_are_whole(tmp_path: Path) -> None:
    blobs = DiskBlobStore(tmp_path)
    payloads = [bytes([i]) * 200_000 for i in range(8)]

    await asyncio.gather(*(blobs.put("file-x", data) for data in payloads))

    assert await blobs.get("file-x") in payloads
    assert os.listdir(tmp_path) == ["file-x"]


@pytest.mark.parametrize(
    "file_id", ["", "../etc/passwd", "a/b", ".tmp-123", ".hidden", "x" * 300, "a\x00b"]
)
async def test_disk_blob_store_refuses_unsafe_ids(tmp_path: Path, file_id: str) -> None:
    blobs = DiskBlobStore(tmp_path / "files")
    with pytest.raises(ValueError, match="invalid file id"):
        await blobs.put(file_id, b"x")
    with pytest.raises(ValueError, match="invalid file id"):
        await blobs.get(file_id)
    assert not (tmp_path / "files").exists()


async def test_existing_file_ids_is_one_read_of_many(files: FileStore) -> None:
    for file_id in ("file-a", "file-b"):
        await files.add_file(a_file(file_id))
    assert await files.existing_file_ids([]) == set()
    wanted = ["file-b", "file-x", "file-a", "file-b"]
    assert await files.existing_file_ids(wanted) == {"file-a", "file-b"}


async def test_named_vector_store_files_reads_records_and_names_at_once(
    files: FileStore,
) -> None:
    await files.create_vector_store(a_store("vs-1"))
    await files.create_vector_store(a_store("vs-2"))
    for file_id in ("file-a", "file-b"):
        await files.add_file(a_file(file_id))
        await files.put_vector_store_file(a_store_file("vs-1", file_id))
    await files.put_vector_store_file(a_store_file("vs-2", "file-a"))
    await files.put_vector_store_file(a_store_file("vs-1", "file-gone"))  # file deleted since
    named = await files.named_vector_store_files(
        "vs-1", ["file-a", "file-gone", "file-x", "file-a"]
    )
    assert set(named) == {"file-a", "file-gone"}
    assert named["file-a"] == (await files.get_vector_store_file("vs-1", "file-a"), "file-a.txt")
    assert named["file-gone"][1] == ""
    assert await files.named_vector_store_files("vs-1", []) == {}


# --- tenants: one view never reaches another tenant's rows -----------------------------------


async def _alice_and_bob(file_stores: FileStores) -> tuple[FileStore, FileStore]:
    """Alice's file, store (with the file, one batch) and Bob's own; returns both views."""
    alice, bob = file_stores.for_tenant("alice"), file_stores.for_tenant("bob")
    await alice.add_file(a_file("file-a", 10))
    await alice.create_vector_store(a_store("vs_a", 10))
    await alice.put_vector_store_file(a_store_file("vs_a", "file-a", 10))
    await alice.put_file_batch(StoredFileBatch("vsfb_a", "vs_a", 10, "in_progress", ["file-a"]))
    await bob.add_file(a_file("file-b", 20))
    await bob.create_vector_store(a_store("vs_b", 20))
    return alice, bob


async def test_another_tenants_rows_are_unknown(file_stores: FileStores) -> None:
    alice, bob = await _alice_and_bob(file_stores)

    assert await bob.get_file("file-a") is None
    assert await bob.existing_file_ids(["file-a", "file-b"]) == {"file-b"}
    assert await bob.get_vector_store("vs_a") is None
    assert await bob.get_vector_store_file("vs_a", "file-a") is None
    assert await bob.named_vector_store_files("vs_a", ["file-a"]) == {}
    assert await bob.get_file_batch("vs_a", "vsfb_a") is None
    assert (await bob.file_counts("vs_a"))["total"] == 0
    listing = {"status": None, "after": None, "limit": 10, "order": "desc"}
    assert await bob.list_vector_store_files("vs_a", **listing) == []  # type: ignore[arg-type]
    assert [
        f.id for f in await bob.list_files(purpose=None, after=None, limit=10, order="asc")
    ] == ["file-b"]
    assert [s.id for s in await bob.list_vector_stores(after=None, limit=10, order="asc")] == [
        "vs_b"
    ]
    # another tenant's id is no cursor either, as an unknown id is not
    with pytest.raises(UnknownCursorError):
        await bob.list_files(purpose=None, after="file-a", limit=10, order="asc")
    with pytest.raises(UnknownCursorError):
        await bob.list_vector_stores(after="vs_a", limit=10, order="asc")
    with pytest.raises(UnknownCursorError):
        await bob.list_vector_store_files(
            "vs_a", status=None, after="file-a", limit=10, order="asc"
        )
    # and alice sees hers
    assert await alice.get_file("file-a") == a_file("file-a", 10)
    assert [
        f.id for f in await alice.list_files(purpose=None, after=None, limit=9, order="asc")
    ] == ["file-a"]


async def test_another_tenant_cannot_change_or_delete_rows(file_stores: FileStores) -> None:
    alice, bob = await _alice_and_bob(file_stores)

    assert await bob.delete_file("file-a") is False
    assert await bob.delete_vector_store_file("vs_a", "file-a") is False
    assert await bob.delete_vector_store("vs_a") is False
    await bob.update_vector_store(replace(a_store("vs_a", 10), name="taken"))
    await bob.put_vector_store_file(a_store_file("vs_a", "file-a", 10, status="failed"))
    await bob.put_file_batch(StoredFileBatch("vsfb_a", "vs_a", 10, "cancelled", []))

    assert await alice.get_file("file-a") is not None
    stored = await alice.get_vector_store("vs_a")
    assert stored is not None and stored.name == "store vs_a"
    record = await alice.get_vector_store_file("vs_a", "file-a")
    assert record is not None and record.status == "in_progress"
    batch = await alice.get_file_batch("vs_a", "vsfb_a")
    assert batch is not None and (batch.status, batch.file_ids) == ("in_progress", ["file-a"])
    assert (await alice.file_counts("vs_a"))["total"] == 1
    assert await bob.get_vector_store_file("vs_a", "file-a") is None


async def test_deleting_ones_own_rows_leaves_the_other_tenants(file_stores: FileStores) -> None:
    alice, bob = await _alice_and_bob(file_stores)
    # a row of bob's naming alice's file id (the services never write one): bob's, not hers
    await bob.put_vector_store_file(a_store_file("vs_b", "file-a", 20))

    assert await alice.delete_file("file-a") is True
    assert await alice.get_vector_store_file("vs_a", "file-a") is None  # detached
    assert await bob.get_vector_store_file("vs_b", "file-a") is not None

    await bob.put_vector_store_file(a_store_file("vs_b", "file-b", 20))
    assert await bob.delete_vector_store("vs_b") is True
    assert await alice.get_vector_store("vs_a") is not None
    assert await alice.get_file_batch("vs_a", "vsfb_a") is not None


async def test_unfinished_ingestions_name_their_tenant(file_stores: FileStores) -> None:
    alice, bob = await _alice_and_bob(file_stores)
    await bob.put_vector_store_file(a_store_file("vs_b", "file-b", 20))
    await bob.put_vector_store_file(a_store_file("vs_b", "file-c", 30, status="completed"))

    unfinished = await file_stores.unfinished_ingestions()

    assert [(tenant, r.vector_store_id, r.file_id) for tenant, r in unfinished] == [
        ("alice", "vs_a", "file-a"),
        ("bob", "vs_b", "file-b"),
    ]
    assert unfinished[0][1] == await alice.get_vector_store_file("vs_a", "file-a")
