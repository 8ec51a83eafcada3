"""Ingestion of a vector store's files: extract -> chunk -> embed -> index, in the background.

``ingest_file`` is one file's pipeline (``extract_file`` then ``index_text``); it never raises
for a bad file or an unavailable embedder, it reports an ``IngestOutcome`` (``completed`` with
``usage_bytes``, or ``failed`` with OpenAI's ``last_error``). The text is extracted by a
``TextExtractor``: ``extract_process.ProcessExtractor``, a budgeted child process per file,
never this process. ``IngestQueue`` runs the pipeline in asyncio tasks it owns, cancellable per
file or per store, awaited on shutdown: extraction waits for the extractor's own lanes, and
only chunking, embedding and indexing take one of the queue's ``concurrency`` slots, so a file
whose extraction runs to its time budget never holds a slot another file needs. A task hands
its outcome to ``finish`` (the service records it); a cancelled task records nothing, the
canceller does.
Each task reads and writes as its store's tenant (``FileStores.for_tenant``,
``VectorIndexes.for_tenant``).
"""

from __future__ import annotations

import asyncio
import logging
import mimetypes
from dataclasses import dataclass, field
from typing import Protocol

from app.errors import GatewayError
from app.files.chunking import chunk_text
from app.files.extract import ExtractionError, ExtractionLimits, Source, UnsupportedFileError
from app.files.extract_process import ProcessExtractor
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
    """How many files are chunked, embedded and indexed at once, how many chunks are embedded
    per call, and the budget of each file's text extraction."""

    concurrency: int = DEFAULT_CONCURRENCY
    batch_size: int = DEFAULT_BATCH_SIZE
    extraction: ExtractionLimits = field(default_factory=ExtractionLimits)


class TextExtractor(Protocol):
    async def extract(self, source: Source, *, filename: str, content_type: str | None) -> str:
        """The file's text; raises ``UnsupportedFileError`` or ``ExtractionError``."""
        ...


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
    """How a file becomes chunks in the index: its text extracted by ``extractor``, its chunks
    embedded by ``embedder``, ``batch_size`` chunks per call, then written to ``index``."""

    index: VectorIndex
    embedder: Embedder
    batch_size: int = DEFAULT_BATCH_SIZE
    extractor: TextExtractor = field(default_factory=ProcessExtractor)


async def ingest_file(
    vector_store_id: str,
    file: StoredFile,
    source: Source,
    chunking_strategy: JsonObject,
    indexing: Indexing,
) -> IngestOutcome:
    """Index one file of one store (its chunks replace any the store had for it); ``source``
    is its bytes or the path of the file that holds them."""
    extracted = await extract_file(file, source, indexing.extractor)
    if isinstance(extracted, IngestOutcome):
        return extracted
    return await index_text(vector_store_id, file, extracted, chunking_strategy, indexing)


async def extract_file(
    file: StoredFile, source: Source, extractor: TextExtractor
) -> str | IngestOutcome:
    """The file's text, or the failed outcome that says why there is none."""
    content_type = mimetypes.guess_type(file.filename)[0]
    try:
        return await extractor.extract(source, filename=file.filename, content_type=content_type)
    except (UnsupportedFileError, ExtractionError) as exc:
        return failure(exc.code, str(exc) or f"Could not read {file.filename}")


async def index_text(
    vector_store_id: str,
    file: StoredFile,
    text: str,
    chunking_strategy: JsonObject,
    indexing: Indexing,
) -> IngestOutcome:
    """Chunk, embed and index a file's extracted text."""
    index, embedder, batch_size = indexing.index, indexing.embedder, indexing.batch_size
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
        self._extractor = ProcessExtractor(options.extraction)
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
        source: Source | None = None
        if file is not None:
            # A blob on the local disk is read by the extractor from its path, not loaded here.
            source = await self._blobs.local_path(file_id) or await self._blobs.get(file_id)
        if file is None or source is None:
            return failure("invalid_file", f"The file {file_id} no longer exists.")
        logger.info(
            "ingesting file",
            extra={"vector_store_id": vector_store_id, "file_id": file_id, "bytes": file.bytes},
        )
        # Extraction is bounded by the extractor's own lanes and budget, outside the slots.
        extracted = await extract_file(file, source, self._extractor)
        if isinstance(extracted, IngestOutcome):
            return extracted
        indexing = Indexing(
            self._index.for_tenant(tenant), self._embedder, self._batch_size, self._extractor
        )
        async with self._slots:
            return await index_text(vector_store_id, file, extracted, chunking, indexing)
