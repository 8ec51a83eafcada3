"""Ingestion of vector store files (``files.ingest``) and the services that record it
(``files.vector_stores``), on the in-memory fakes of the ports and the real extraction and
chunking. Tests wait with ``wait_idle`` (or on an embedder gate), never with sleeps."""

from __future__ import annotations

import asyncio
import io
import zipfile
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import pytest

from app.core.tenancy import DEFAULT_TENANT
from app.errors import GatewayError, InvalidRequestError
from app.files.attach import FileEntry
from app.files.embeddings import EmbeddingsUnavailableError, UnavailableEmbedder
from app.files.files import FilesService
from app.files.ingest import (
    Indexing,
    IngestOptions,
    IngestOutcome,
    IngestQueue,
    chunk_sizes,
    ingest_file,
)
from app.files.paging import Cursor
from app.files.ports import StoredFile, StoredVectorStoreFile
from app.files.requests import parse_search
from app.files.vector_stores import VectorStoresService
from app.protocol.json_types import JsonObject
from tests.fakes import (
    FakeClock,
    FakeEmbedder,
    MemoryBlobStore,
    MemoryFileStores,
    MemoryVectorIndex,
)

T = DEFAULT_TENANT  # every file and store here is one tenant's (tests/e2e/test_two_tenants.py)

AUTO = {"type": "static", "static": {"max_chunk_size_tokens": 800, "chunk_overlap_tokens": 400}}
SMALL = {"type": "static", "static": {"max_chunk_size_tokens": 100, "chunk_overlap_tokens": 0}}
PAGE = Cursor(after=None, before=None, limit=100, order="asc")

LONG_TEXT = " ".join(f"Sentence number {i} talks about topic {i % 7}." for i in range(300))


async def search(vector_stores: VectorStoresService, store_id: str, body: JsonObject) -> JsonObject:
    """A search as the file_search tool makes one: the body parsed once, then searched."""
    return await vector_stores.searcher.search(store_id, parse_search(body), tenant=T)


def stored(file_id: str, filename: str, data: bytes) -> StoredFile:
    return StoredFile(
        id=file_id, filename=filename, purpose="assistants", bytes=len(data), created_at=1
    )


# ------------------------------------------------------------------------------ ingest_file


async def test_ingest_file_indexes_every_chunk_in_batches() -> None:
    index, embedder = MemoryVectorIndex(), FakeEmbedder()
    data = LONG_TEXT.encode()
    outcome = await ingest_file(
        "vs_1",
        stored("file-1", "notes.txt", data),
        data,
        SMALL,
        Indexing(index.for_tenant(T), embedder, batch_size=3),
    )
    chunks = index.chunks[("vs_1", "file-1", T)]
    assert outcome.status == "completed"
    assert outcome.last_error is None
    assert outcome.chunks == len(chunks) > 3
    assert outcome.usage_bytes == sum(len(c.text.encode()) for c in chunks)
    assert [c.position for c in chunks] == list(range(len(chunks)))
    assert all(c.tokens <= 100 for c in chunks)
    assert [len(b) for b in embedder.batches[:-1]] == [3] * (len(embedder.batches) - 1)
    assert sum(len(b) for b in embedder.batches) == len(chunks)
    assert chunks[0].embedding == embedder.vector(chunks[0].text)


async def test_the_strategy_sets_the_chunk_size() -> None:
    data = LONG_TEXT.encode()
    counts = []
    for strategy in (AUTO, SMALL):
        index = MemoryVectorIndex()
        outcome = await ingest_file(
            "vs",
            stored("f", "a.md", data),
            data,
            strategy,
            Indexing(index.for_tenant(T), FakeEmbedder()),
        )
        counts.append(outcome.chunks)
    assert counts[0] < counts[1]
    assert chunk_sizes(AUTO) == (800, 400)
    assert chunk_sizes({"type": "other"}) == (800, 400)


@pytest.mark.parametrize(
    ("filename", "data", "code"),
    [
        ("picture.png", b"\x89PNG\r\n\x1a\n" + bytes(64), "unsupported_file"),
        ("program.exe", b"MZ\x90\x00" + bytes(64), "unsupported_file"),
        ("broken.pdf", b"%PDF-1.7 this is not a pdf", "invalid_file"),
        ("empty.txt", b"   \n\n ", "invalid_file"),
    ],
)
async def test_unreadable_files_fail_with_openai_codes(
    filename: str, data: bytes, code: str
) -> None:
    index = MemoryVectorIndex()
    outcome = await ingest_file(
        "vs", stored("f", filename, data), data, AUTO, Indexing(index.for_tenant(T), FakeEmbedder())
    )
    assert outcome.status == "failed"
    assert outcome.last_error is not None
    assert outcome.last_error["code"] == code
    assert outcome.last_error["message"]
    assert index.chunks == {}


async def test_docx_is_extracted() -> None:
    data = _docx("The quarterly report mentions pelicans.")
    index = MemoryVectorIndex()
    outcome = await ingest_file(
        "vs",
        stored("f", "report.docx", data),
        data,
        AUTO,
        Indexing(index.for_tenant(T), FakeEmbedder()),
    )
    assert outcome.status == "completed", outcome
    assert "pelicans" in index.chunks[("vs", "f", T)][0].text


async def test_an_unavailable_embedder_is_a_server_error_with_its_reason() -> None:
    data = b"hello world"
    embedder = UnavailableEmbedder("No embedding model is available: install one.")
    outcome = await ingest_file(
        "vs",
        stored("f", "a.txt", data),
        data,
        AUTO,
        Indexing(MemoryVectorIndex().for_tenant(T), embedder),
    )
    assert outcome == IngestOutcome(
        status="failed",
        last_error={
            "code": "server_error",
            "message": "No embedding model is available: install one.",
        },
    )
    crashing = FakeEmbedder(fail=ConnectionError("embedding server refused the connection"))
    outcome = await ingest_file(
        "vs",
        stored("f", "a.txt", data),
        data,
        AUTO,
        Indexing(MemoryVectorIndex().for_tenant(T), crashing),
    )
    assert outcome.last_error == {
        "code": "server_error",
        "message": "embedding server refused the connection",
    }


# ------------------------------------------------------------------------------ IngestQueue


class CountingEmbedder(FakeEmbedder):
    """Holds every call on ``gate`` and records how many ran at once."""

    def __init__(self) -> None:
        super().__init__(gate=asyncio.Event())
        self.running = 0
        self.peak = 0
        self.started = asyncio.Event()
        self.two_running = asyncio.Event()

    async def embed(self, texts: list[str]) -> list[list[float]]:
        self.running += 1
        self.peak = max(self.peak, self.running)
        self.started.set()
        if self.running >= 2:
            self.two_running.set()
        try:
            return await super().embed(texts)
        finally:
            self.running -= 1


@dataclass
class QueueSetup:
    files: MemoryFileStores
    blobs: MemoryBlobStore
    index: MemoryVectorIndex
    outcomes: dict[tuple[str, str], IngestOutcome]


async def _queue_setup(count: int) -> QueueSetup:
    files, blobs = MemoryFileStores(), MemoryBlobStore()
    for i in range(count):
        data = f"document {i} about herons".encode()
        await files.for_tenant(T).add_file(stored(f"file-{i}", f"doc{i}.txt", data))
        await blobs.put(f"file-{i}", data)
    return QueueSetup(files, blobs, MemoryVectorIndex(), {})


async def test_the_queue_runs_at_most_n_files_at_once() -> None:
    setup = await _queue_setup(5)
    embedder = CountingEmbedder()

    async def finish(store_id: str, file_id: str, outcome: IngestOutcome, *, tenant: str) -> None:
        assert tenant == T
        setup.outcomes[(store_id, file_id)] = outcome

    queue = IngestQueue(
        setup.files, setup.blobs, setup.index, embedder, finish, IngestOptions(concurrency=2)
    )
    for i in range(5):
        await queue.submit("vs", f"file-{i}", AUTO, tenant=T)
    await embedder.two_running.wait()
    # Two files hold the slots (their embedding is held on the gate); the others wait for one.
    assert queue._slots.locked()
    assert all(queue.is_pending("vs", f"file-{i}") for i in range(5))
    assert embedder.gate is not None
    embedder.gate.set()
    await queue.wait_idle()
    assert embedder.peak == 2
    assert {k: o.status for k, o in setup.outcomes.items()} == {
        ("vs", f"file-{i}"): "completed" for i in range(5)
    }
    assert not queue.is_pending("vs", "file-0")


async def test_a_cancelled_task_records_nothing_and_aclose_cancels_the_rest() -> None:
    setup = await _queue_setup(3)
    embedder = CountingEmbedder()

    async def finish(store_id: str, file_id: str, outcome: IngestOutcome, *, tenant: str) -> None:
        assert tenant == T
        setup.outcomes[(store_id, file_id)] = outcome

    queue = IngestQueue(setup.files, setup.blobs, setup.index, embedder, finish)
    for i in range(3):
        await queue.submit("vs", f"file-{i}", AUTO, tenant=T)
    await embedder.started.wait()
    await queue.cancel("vs", "file-0")
    await queue.cancel_store("other")  # names no task
    assert not queue.is_pending("vs", "file-0")
    await queue.aclose()
    assert setup.outcomes == {}
    assert setup.index.chunks == {}
    await queue.submit("vs", "file-0", AUTO, tenant=T)  # after close: ignored
    assert not queue.is_pending("vs", "file-0")


async def test_a_missing_blob_fails_the_file_and_a_crash_is_a_server_error() -> None:
    setup = await _queue_setup(1)
    await setup.blobs.delete("file-0")

    class BrokenIndex(MemoryVectorIndex):
        async def replace_file_chunks(self, *args: Any, **kwargs: Any) -> None:
            raise RuntimeError("disk full")

    async def finish(store_id: str, file_id: str, outcome: IngestOutcome, *, tenant: str) -> None:
        assert tenant == T
        setup.outcomes[(store_id, file_id)] = outcome

    queue = IngestQueue(setup.files, setup.blobs, BrokenIndex(), FakeEmbedder(), finish)
    await queue.submit("vs", "file-0", AUTO, tenant=T)
    await queue.wait_idle()
    assert setup.outcomes[("vs", "file-0")].last_error == {
        "code": "invalid_file",
        "message": "The file file-0 no longer exists.",
    }
    await setup.blobs.put("file-0", b"some text")
    await queue.submit("vs", "file-0", AUTO, tenant=T)
    await queue.wait_idle()
    assert setup.outcomes[("vs", "file-0")].last_error == {
        "code": "server_error",
        "message": "Ingestion failed: disk full",
    }


# ------------------------------------------------------------------------------ the service


@dataclass
class Services:
    store: MemoryFileStores
    blobs: MemoryBlobStore
    index: MemoryVectorIndex
    embedder: FakeEmbedder
    clock: FakeClock
    files: FilesService
    vector_stores: VectorStoresService

    async def upload(self, name: str, text: str | bytes) -> str:
        data = text.encode() if isinstance(text, str) else text
        created = await self.files.create(filename=name, data=data, purpose="assistants", tenant=T)
        return str(created["id"])


@pytest.fixture
async def services() -> AsyncIterator[Services]:
    store, blobs, index = MemoryFileStores(), MemoryBlobStore(), MemoryVectorIndex()
    embedder, clock = FakeEmbedder(), FakeClock()
    vector_stores = VectorStoresService(store, blobs, index, embedder, clock)
    files = FilesService(store, blobs, clock, detacher=vector_stores.store_files)
    yield Services(store, blobs, index, embedder, clock, files, vector_stores)
    await vector_stores.aclose()


async def _new_store(s: Services, file_ids: list[str] | None = None, **kw: Any) -> str:
    created = await s.vector_stores.stores.create(
        name=kw.get("name", "docs"),
        metadata={},
        expires_after=kw.get("expires_after"),
        file_ids=file_ids or [],
        chunking_strategy=kw.get("chunking_strategy"),
        tenant=T,
    )
    return str(created["id"])


async def test_files_move_from_in_progress_to_completed(services: Services) -> None:
    s = services
    gate = asyncio.Event()
    s.embedder.gate = gate
    good = await s.upload("herons.txt", "Herons are wading birds of the family Ardeidae.")
    bad = await s.upload("image.png", b"\x89PNG\r\n\x1a\n" + bytes(32))
    store_id = await _new_store(s, [good, bad])
    store = await s.vector_stores.stores.get(store_id, tenant=T)
    assert store["status"] == "in_progress"
    assert store["file_counts"] == {
        "in_progress": 2,
        "completed": 0,
        "failed": 0,
        "cancelled": 0,
        "total": 2,
    }
    record = await s.vector_stores.store_files.get_file(store_id, good, tenant=T)
    assert (record["status"], record["usage_bytes"], record["last_error"]) == (
        "in_progress",
        0,
        None,
    )
    assert record["chunking_strategy"] == AUTO
    gate.set()
    await s.vector_stores.wait_idle()
    store = await s.vector_stores.stores.get(store_id, tenant=T)
    assert store["status"] == "completed"
    assert store["file_counts"]["completed"] == 1
    assert store["file_counts"]["failed"] == 1
    record = await s.vector_stores.store_files.get_file(store_id, good, tenant=T)
    assert record["status"] == "completed"
    assert record["usage_bytes"] == len(b"Herons are wading birds of the family Ardeidae.")
    assert store["usage_bytes"] == record["usage_bytes"]
    failed = await s.vector_stores.store_files.get_file(store_id, bad, tenant=T)
    assert failed["status"] == "failed"
    assert failed["last_error"]["code"] == "unsupported_file"


async def test_removing_a_file_while_it_is_ingested_leaves_no_chunks(services: Services) -> None:
    s = services
    gate = asyncio.Event()
    s.embedder.gate = gate
    file_id = await s.upload("a.txt", "alpha beta gamma")
    store_id = await _new_store(s)
    await s.vector_stores.store_files.add_file(store_id, FileEntry(file_id, {"k": "v"}), tenant=T)
    assert s.vector_stores.ingest.is_pending(store_id, file_id)
    deleted = await s.vector_stores.store_files.remove_file(store_id, file_id, tenant=T)
    assert deleted == {"id": file_id, "object": "vector_store.file.deleted", "deleted": True}
    gate.set()
    await s.vector_stores.wait_idle()
    assert s.index.chunks == {}
    assert (await s.vector_stores.stores.get(store_id, tenant=T))["file_counts"]["total"] == 0
    assert await s.files.get(file_id, tenant=T)  # the file itself stays


async def test_deleting_a_file_detaches_it_from_every_store(services: Services) -> None:
    s = services
    file_id = await s.upload("a.txt", "alpha beta gamma")
    other = await s.upload("b.txt", "delta epsilon")
    first = await _new_store(s, [file_id, other])
    second = await _new_store(s, [file_id])
    await s.vector_stores.wait_idle()
    assert (await s.vector_stores.stores.get(first, tenant=T))["usage_bytes"] == len(
        "alpha beta gamma"
    ) + len("delta epsilon")
    assert await s.files.delete(file_id, tenant=T) == {
        "id": file_id,
        "object": "file",
        "deleted": True,
    }
    assert set(s.index.chunks) == {(first, other, T)}
    for store_id, total, usage in ((first, 1, len("delta epsilon")), (second, 0, 0)):
        store = await s.vector_stores.stores.get(store_id, tenant=T)
        assert (store["file_counts"]["total"], store["usage_bytes"]) == (total, usage)
    assert s.blobs.blobs.keys() == {other}


async def test_re_adding_a_failed_file_ingests_it_again(services: Services) -> None:
    s = services
    s.embedder.fail = EmbeddingsUnavailableError("no model")
    file_id = await s.upload("a.txt", "some words")
    store_id = await _new_store(s, [file_id])
    await s.vector_stores.wait_idle()
    record = await s.vector_stores.store_files.get_file(store_id, file_id, tenant=T)
    assert record["last_error"] == {"code": "server_error", "message": "no model"}
    s.embedder.fail = None
    again = await s.vector_stores.store_files.add_file(
        store_id, FileEntry(file_id, {"n": 1}), tenant=T
    )
    assert (again["status"], again["attributes"]) == ("in_progress", {"n": 1})
    await s.vector_stores.wait_idle()
    record = await s.vector_stores.store_files.get_file(store_id, file_id, tenant=T)
    assert (record["status"], record["last_error"]) == ("completed", None)
    # A completed file added again is left as it is.
    same = await s.vector_stores.store_files.add_file(
        store_id, FileEntry(file_id, {"n": 2}), tenant=T
    )
    assert same == record


async def test_cancelling_a_batch(services: Services) -> None:
    s = services
    gate = asyncio.Event()
    s.embedder.gate = gate
    ids = [await s.upload(f"{i}.txt", f"text number {i}") for i in range(3)]
    store_id = await _new_store(s)
    batch = await s.vector_stores.batches.create_batch(
        store_id, [FileEntry(file_id, {"i": i}) for i, file_id in enumerate(ids)], tenant=T
    )
    assert batch["status"] == "in_progress"
    assert batch["file_counts"]["in_progress"] == 3
    cancelled = await s.vector_stores.batches.cancel_batch(store_id, batch["id"], tenant=T)
    assert cancelled["status"] == "cancelled"
    assert cancelled["file_counts"] == {
        "in_progress": 0,
        "completed": 0,
        "failed": 0,
        "cancelled": 3,
        "total": 3,
    }
    gate.set()
    await s.vector_stores.wait_idle()
    assert s.index.chunks == {}
    store = await s.vector_stores.stores.get(store_id, tenant=T)
    assert (store["status"], store["file_counts"]["cancelled"]) == ("completed", 3)
    page = await s.vector_stores.batches.list_batch_files(
        store_id, batch["id"], PAGE, status="cancelled", tenant=T
    )
    assert sorted(item["id"] for item in page.items) == sorted(ids)


async def test_search_filters_by_attributes_and_touches_the_store(services: Services) -> None:
    s = services
    herons = await s.upload("herons.txt", "Herons are wading birds that eat fish.")
    trains = await s.upload("trains.txt", "Steam trains ran on coal and water.")
    store_id = await _new_store(s, expires_after={"anchor": "last_active_at", "days": 2})
    await s.vector_stores.store_files.add_file(
        store_id, FileEntry(herons, {"kind": "bird", "year": 2020}), tenant=T
    )
    await s.vector_stores.store_files.add_file(
        store_id, FileEntry(trains, {"kind": "machine", "year": 1890}), tenant=T
    )
    await s.vector_stores.wait_idle()
    created = await s.vector_stores.stores.get(store_id, tenant=T)
    s.clock.advance(3600)

    page = await search(s.vector_stores, store_id, {"query": "birds that eat fish"})
    assert page["object"] == "vector_store.search_results.page"
    assert page["search_query"] == ["birds that eat fish"]
    assert (page["has_more"], page["next_page"]) == (False, None)
    assert page["data"][0]["file_id"] == herons
    assert page["data"][0]["filename"] == "herons.txt"
    assert page["data"][0]["attributes"] == {"kind": "bird", "year": 2020}
    assert page["data"][0]["content"] == [
        {"type": "text", "text": "Herons are wading birds that eat fish."}
    ]
    assert 0 <= page["data"][-1]["score"] <= page["data"][0]["score"] <= 1

    touched = await s.vector_stores.stores.get(store_id, tenant=T)
    assert touched["last_active_at"] == created["last_active_at"] + 3600
    assert touched["expires_at"] == touched["last_active_at"] + 2 * 86400

    page = await search(
        s.vector_stores,
        store_id,
        {
            "query": ["birds", "fish"],
            "filters": {"type": "lt", "key": "year", "value": 2000},
            "ranking_options": {"ranker": "default-2024-11-15"},
        },
    )
    assert [hit["file_id"] for hit in page["data"]] == [trains]
    assert s.index.searches[-1]["file_ids"] == [trains]
    assert s.index.searches[-1]["ranker"] == "hybrid"
    assert page["search_query"] == ["birds", "fish"]

    page = await search(
        s.vector_stores,
        store_id,
        {"query": "fish", "filters": {"type": "eq", "key": "kind", "value": "plant"}},
    )
    assert page["data"] == []

    calls = len(s.embedder.batches)
    page = await search(
        s.vector_stores, store_id, {"query": "coal", "ranking_options": {"ranker": "keyword"}}
    )
    assert len(s.embedder.batches) == calls  # no embedding for keyword search
    assert [hit["file_id"] for hit in page["data"]] == [trains]

    page = await search(
        s.vector_stores, store_id, {"query": "fish", "ranking_options": {"score_threshold": 1.0}}
    )
    assert all(hit["score"] >= 1.0 for hit in page["data"])


async def test_search_errors(services: Services) -> None:
    s = services
    store_id = await _new_store(s, expires_after={"anchor": "last_active_at", "days": 1})
    with pytest.raises(InvalidRequestError) as bad:
        await search(s.vector_stores, store_id, {"query": "x", "max_num_results": 51})
    assert bad.value.param == "max_num_results"
    with pytest.raises(InvalidRequestError) as bad:
        await search(s.vector_stores, store_id, {"query": []})
    assert bad.value.param == "query"
    with pytest.raises(InvalidRequestError) as bad:
        await search(s.vector_stores, store_id, {"query": "x", "filters": {"type": "eq"}})
    assert (bad.value.param, bad.value.code) == ("filters.key", "missing_required_parameter")
    s.embedder.fail = EmbeddingsUnavailableError("no embedding model")
    with pytest.raises(GatewayError) as unavailable:
        await search(s.vector_stores, store_id, {"query": "x"})
    assert (unavailable.value.status_code, unavailable.value.message) == (
        503,
        "no embedding model",
    )
    s.clock.advance(86400)
    assert (await s.vector_stores.stores.get(store_id, tenant=T))["status"] == "expired"
    with pytest.raises(InvalidRequestError) as expired:
        await search(s.vector_stores, store_id, {"query": "x"})
    assert expired.value.message == f"Vector store '{store_id}' has expired."


async def test_resume_pending_ingests_what_a_previous_run_left(services: Services) -> None:
    s = services
    gate = asyncio.Event()
    s.embedder.gate = gate
    file_id = await s.upload("a.txt", "resumable text")
    store_id = await _new_store(s, [file_id])
    await s.vector_stores.aclose()  # the "previous run" stops mid-ingestion
    assert (await s.vector_stores.store_files.get_file(store_id, file_id, tenant=T))[
        "status"
    ] == "in_progress"

    restarted = VectorStoresService(s.store, s.blobs, s.index, FakeEmbedder(), s.clock)
    try:
        assert await restarted.resume_pending() == 1
        await restarted.wait_idle()
        assert (await restarted.store_files.get_file(store_id, file_id, tenant=T))[
            "status"
        ] == "completed"
        assert await restarted.resume_pending() == 0
    finally:
        await restarted.aclose()


async def test_deleting_a_store_stops_its_ingestion(services: Services) -> None:
    s = services
    gate = asyncio.Event()
    s.embedder.gate = gate
    file_id = await s.upload("a.txt", "text")
    store_id = await _new_store(s, [file_id])
    assert await s.vector_stores.stores.delete(store_id, tenant=T) == {
        "id": store_id,
        "object": "vector_store.deleted",
        "deleted": True,
    }
    assert not s.vector_stores.ingest.is_pending(store_id, file_id)
    gate.set()
    await s.vector_stores.wait_idle()
    assert s.index.chunks == {}
    assert s.store.store_files == {}


async def test_an_expired_file_is_deleted_when_asked_for(services: Services) -> None:
    s = services
    created = await s.files.create(
        filename="a.txt",
        data=b"x",
        purpose="user_data",
        expires_after={"anchor": "created_at", "seconds": 3600},
        tenant=T,
    )
    assert created["expires_at"] == created["created_at"] + 3600
    s.clock.advance(3600)
    with pytest.raises(GatewayError) as missing:
        await s.files.get(created["id"], tenant=T)
    assert missing.value.status_code == 404
    assert s.store.files == {}
    assert s.blobs.blobs == {}


def _docx(text: str) -> bytes:
    """A minimal DOCX: one paragraph."""
    document = (
        '<?xml version="1.0" encoding="UTF-8" standalone="yes"?>'
        '<w:document xmlns:w="http://schemas.openxmlformats.org/wordprocessingml/2006/main">'
        f"<w:body><w:p><w:r><w:t>{text}</w:t></w:r></w:p></w:body></w:document>"
    )
    content_types = (
        '<?xml version="1.0" encoding="UTF-8" standalone="yes"?>'
        '<Types xmlns="http://schemas.openxmlformats.org/package/2006/content-types">'
        '<Default Extension="rels" ContentType="application/vnd.openxmlformats-package.'
        'relationships+xml"/><Default Extension="xml" ContentType="application/xml"/>'
        '<Override PartName="/word/document.xml" ContentType="application/vnd.'
        'openxmlformats-officedocument.wordprocessingml.document.main+xml"/></Types>'
    )
    rels = (
        '<?xml version="1.0" encoding="UTF-8" standalone="yes"?>'
        '<Relationships xmlns="http://schemas.openxmlformats.org/package/2006/relationships">'
        '<Relationship Id="rId1" Type="http://schemas.openxmlformats.org/officeDocument/2006/'
        'relationships/officeDocument" Target="word/document.xml"/></Relationships>'
    )
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        archive.writestr("[Content_Types].xml", content_types)
        archive.writestr("_rels/.rels", rels)
        archive.writestr("word/document.xml", document)
    return buffer.getvalue()


async def test_scans_page_through_many_stores_and_files(services: Services) -> None:
    """Attribute filters and file deletion read every page of the FileStore's lists."""
    s = services
    file_id = await s.upload("shared.txt", "shared text")
    store_ids = [await _new_store(s) for _ in range(105)]
    files = s.store.for_tenant(T)
    for store_id in store_ids:
        await files.put_vector_store_file(_completed(store_id, file_id, {"n": 0}))
        await s.index.for_tenant(T).replace_file_chunks(store_id, file_id, [])
    many = store_ids[0]
    for i in range(1, 151):
        await files.put_vector_store_file(_completed(many, f"file-{i:04d}", {"n": i}))
    await search(
        s.vector_stores, many, {"query": "x", "filters": {"type": "gt", "key": "n", "value": 0}}
    )
    assert len(s.index.searches[-1]["file_ids"]) == 150
    await s.files.delete(file_id, tenant=T)
    assert all(key[1] != file_id for key in s.store.store_files)
    assert all(key[1] != file_id for key in s.index.chunks)


def _completed(store_id: str, file_id: str, attributes: JsonObject) -> StoredVectorStoreFile:
    return StoredVectorStoreFile(
        vector_store_id=store_id,
        file_id=file_id,
        created_at=1,
        status="completed",
        last_error=None,
        attributes=attributes,
        chunking_strategy=AUTO,
        usage_bytes=0,
    )
