"""Ingestion of a vector store's files: extract -> chunk -> embed -> index, in the background.

``ingest_file`` is one file's pipeline; it never raises for a bad file or an unavailable
embedder, it reports an ``IngestOutcome`` (``completed`` with ``usage_bytes``, or ``failed``
with OpenAI's ``last_error``). ``IngestQueue`` runs it in asyncio tasks it owns: at most
``max_concurrency`` files at a time, cancellable per file or per store, awaited on shutdown.
Each task reads and writes as its store's tenant (``FileStores.for_tenant``,
``VectorIndexes.for_tenant``). A task hands its outcome to ``finish`` (the service records
it); a cancelled task records nothing, the canceller does.
"""

from __future__ import annotations

import asyncio
import logging
import mimetypes
from dataclasses import dataclass
from typing import Protocol

from app.errors import GatewayError
from app.files.chunking import chunk_text
from app.files.extract import ExtractionError, UnsupportedFileError, extract_text
from app.files.ports import (
    BlobStore,
    Embedder,
    FileStores,
    IndexedChunk,
    StoredFile,
    VectorIndex,
    VectorIndexes,
)
from app.protocol.json_types import JsonObject

logger = logging.getLogger(__name__)

DEFAULT_CONCURRENCY = 2
DEFAULT_BATCH_SIZE = 64
# OpenAI's ``auto`` strategy, should a stored strategy lack its numbers.
DEFAULT_MAX_TOKENS = 800
DEFAULT_OVERLAP = 400


@dataclass(frozen=True, slots=True)
class IngestOptions:
    """How many files are ingested at once, and how many chunks are embedded per call."""

    concurrency: int = DEFAULT_CONCURRENCY
    batch_size: int = DEFAULT_BATCH_SIZE


@dataclass(frozen=True, slots=True)
class IngestOutcome:
    status: str  # "completed" | "failed"
    usage_bytes: int = 0
    last_error: JsonObject | None = None
    chunks: int = 0


def failure(code: str, message: str) -> IngestOutcome:
    """``code``: ``server_error``, ``unsupported_file`` or ``invalid_file`` (OpenAI's)."""
    return IngestOutcome(status="failed", last_error={"code": code, "message": message})


def chunk_sizes(strategy: JsonObject) -> tuple[int, int]:
    """``(max_tokens, overlap)`` of a stored chunking strategy (``{"type": "static", ...}``)."""
    static = strategy.get("static") if strategy.get("type") == "static" else None
    if not isinstance(static, dict):
        return DEFAULT_MAX_TOKENS, DEFAULT_OVERLAP
    max_tokens = static.get("max_chunk_size_tokens", DEFAULT_MAX_TOKENS)
    overlap = static.get("chunk_overlap_tokens", DEFAULT_OVERLAP)
    return int(max_tokens), int(overlap)


@dataclass(frozen=True, slots=True)
class Indexing:
    """Where a file's chunks go: embedded by ``embedder``, ``batch_size`` chunks per call,
    then written to ``index``."""

    index: VectorIndex
    embedder: Embedder
    batch_size: int = DEFAULT_BATCH_SIZE


async def ingest_file(
    vector_store_id: str,
    file: StoredFile,
    data: bytes,
    chunking_strategy: JsonObject,
    indexing: Indexing,
) -> IngestOutcome:
    """Index one file of one store (its chunks replace any the store had for it)."""
    index, embedder, batch_size = indexing.index, indexing.embedder, indexing.batch_size
    content_type = mimetypes.guess_type(file.filename)[0]
    try:
        # Extraction (PDF, DOCX) and tokenizing are CPU-bound: off the event loop.
        text = await asyncio.to_thread(
            extract_text, data, filename=file.filename, content_type=content_type
        )
    except UnsupportedFileError as exc:
        return failure("unsupported_file", str(exc) or f"Unsupported file: {file.filename}")
    except ExtractionError as exc:
        return failure("invalid_file", str(exc) or f"Could not read {file.filename}")
    max_tokens, overlap = chunk_sizes(chunking_strategy)
    chunks = await asyncio.to_thread(chunk_text, text, max_tokens=max_tokens, overlap=overlap)
    if not chunks:
        return failure("invalid_file", f"The file {file.filename} contains no text.")
    vectors: list[list[float]] = []
    try:
        for start in range(0, len(chunks), batch_size):
            batch = [chunk.text for chunk in chunks[start : start + batch_size]]
            vectors.extend(await embedder.embed(batch))
    except asyncio.CancelledError:
        raise
    except Exception as exc:  # an embedder's failure is the file's, reported to the user
        message = exc.message if isinstance(exc, GatewayError) else str(exc)
        logger.warning(
            "embedding failed",
            extra={"vector_store_id": vector_store_id, "file_id": file.id, "error": message},
        )
        return failure("server_error", message or f"Embedding failed ({type(exc).__name__})")
    if len(vectors) != len(chunks):
        return failure(
            "server_error",
            f"The embedder returned {len(vectors)} vectors for {len(chunks)} chunks.",
        )
    indexed = [
        IndexedChunk(
            position=chunk.position, text=chunk.text, tokens=chunk.tokens, embedding=vector
        )
        for chunk, vector in zip(chunks, vectors, strict=True)
    ]
    await index.replace_file_chunks(vector_store_id, file.id, indexed)
    usage = sum(len(chunk.text.encode()) for chunk in chunks)
    return IngestOutcome(status="completed", usage_bytes=usage, chunks=len(chunks))


class Finish(Protocol):
    """Records an ingestion task's outcome (in the store's tenant)."""

    async def __call__(
        self, vector_store_id: str, file_id: str, outcome: IngestOutcome, *, tenant: str
    ) -> None: ...


Key = tuple[str, str]  # (vector_store_id, file_id): ids are the gateway's, unique over tenants


class IngestQueue:
    """Background ingestion tasks, one per (store, file), ``options.concurrency`` at a time.

    ``finish(vector_store_id, file_id, outcome, tenant=...)`` records a task's outcome; it runs
    inside the task. Callers that cancel tasks and then change the same records must do both
    under the lock ``finish`` takes, so that a task is never cancelled halfway through
    recording.
    """

    def __init__(
        self,
        files: FileStores,
        blobs: BlobStore,
        index: VectorIndexes,
        embedder: Embedder,
        finish: Finish,
        options: IngestOptions | None = None,
    ) -> None:
        options = options or IngestOptions()
        self._files = files
        self._blobs = blobs
        self._index = index
        self._embedder = embedder
        self._batch_size = options.batch_size
        self._finish = finish
        self._slots = asyncio.Semaphore(options.concurrency)
        self._tasks: dict[Key, asyncio.Task[None]] = {}
        self._closed = False

    def is_pending(self, vector_store_id: str, file_id: str) -> bool:
        return (vector_store_id, file_id) in self._tasks

    async def submit(
        self, vector_store_id: str, file_id: str, chunking: JsonObject, *, tenant: str
    ) -> None:
        """Start ingesting a file of ``tenant``'s store; a task already running for this file of
        this store is cancelled."""
        if self._closed:
            return
        key = (vector_store_id, file_id)
        await self._cancel([key])
        task = asyncio.create_task(
            self._run(vector_store_id, file_id, chunking, tenant),
            name=f"ingest {vector_store_id}/{file_id}",
        )
        self._tasks[key] = task
        task.add_done_callback(lambda done: self._forget(key, done))

    async def cancel(self, vector_store_id: str, file_id: str) -> None:
        await self._cancel([(vector_store_id, file_id)])

    async def cancel_store(self, vector_store_id: str) -> None:
        await self._cancel([key for key in self._tasks if key[0] == vector_store_id])

    async def cancel_file(self, file_id: str) -> None:
        await self._cancel([key for key in self._tasks if key[1] == file_id])

    async def wait_idle(self) -> None:
        """Until every submitted file is ingested (or failed, or cancelled)."""
        while self._tasks:
            await asyncio.wait(list(self._tasks.values()))

    async def aclose(self) -> None:
        """Cancel what is still running and wait for it (shutdown)."""
        self._closed = True
        await self._cancel(list(self._tasks))

    async def _cancel(self, keys: list[Key]) -> None:
        tasks = [self._tasks.pop(key) for key in keys if key in self._tasks]
        for task in tasks:
            task.cancel()
        if tasks:
            # ``wait`` (not ``gather``): the tasks' cancellation is not ours to re-raise.
            await asyncio.wait(tasks)

    def _forget(self, key: Key, task: asyncio.Task[None]) -> None:
        if self._tasks.get(key) is task:
            del self._tasks[key]

    async def _run(
        self, vector_store_id: str, file_id: str, chunking: JsonObject, tenant: str
    ) -> None:
        async with self._slots:
            try:
                outcome = await self._ingest(vector_store_id, file_id, chunking, tenant)
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                logger.exception(
                    "ingestion failed",
                    extra={"vector_store_id": vector_store_id, "file_id": file_id},
                )
                outcome = failure("server_error", f"Ingestion failed: {exc}")
            await self._finish(vector_store_id, file_id, outcome, tenant=tenant)

    async def _ingest(
        self, vector_store_id: str, file_id: str, chunking: JsonObject, tenant: str
    ) -> IngestOutcome:
        file = await self._files.for_tenant(tenant).get_file(file_id)
        data = await self._blobs.get(file_id) if file is not None else None
        if file is None or data is None:
            return failure("invalid_file", f"The file {file_id} no longer exists.")
        logger.info(
            "ingesting file",
            extra={"vector_store_id": vector_store_id, "file_id": file_id, "bytes": len(data)},
        )
        indexing = Indexing(self._index.for_tenant(tenant), self._embedder, self._batch_size)
        return await ingest_file(vector_store_id, file, data, chunking, indexing)
