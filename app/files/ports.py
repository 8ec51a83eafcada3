"""The ports of files and vector stores: the stored records, and the interfaces the feature's
services depend on (``FileStores`` and ``VectorIndexes`` are implemented in ``app.store``,
``BlobStore`` by ``app.store.blobs``, ``Embedder`` in ``app.files.embeddings``).

**Tenancy** (``app.core.tenancy``): every file, vector store, vector store file, file batch and
chunk belongs to the tenant that created it. The stores are reached through one tenant's view:
``FileStores.for_tenant(tenant)`` is a ``FileStore`` and ``VectorIndexes.for_tenant(tenant)`` a
``VectorIndex`` that see only that tenant's rows and write every row as that tenant's: another
tenant's id is exactly as unknown to them as an id that names nothing (``None``, ``False``,
left out of lists, ``UnknownCursorError`` as a cursor). No method of a view can name another
tenant. The ``BlobStore`` is keyed by file id alone: ids are the gateway's own (never the
client's), and a file's bytes are only read or deleted after its tenant's ``FileStore`` found it.
"""

from __future__ import annotations

from collections.abc import AsyncIterable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from app.protocol.json_types import JsonObject


@dataclass(frozen=True, slots=True)
class StoredFile:
    """An uploaded file's metadata (its bytes live in a ``BlobStore``)."""

    id: str
    filename: str
    purpose: str
    bytes: int
    created_at: int
    expires_at: int | None = None
    status: str = "processed"

    def to_object(self) -> JsonObject:
        """OpenAI's File object."""
        return {
            "id": self.id,
            "object": "file",
            "bytes": self.bytes,
            "created_at": self.created_at,
            "expires_at": self.expires_at,
            "filename": self.filename,
            "purpose": self.purpose,
            "status": self.status,
            "status_details": None,
        }


@dataclass(frozen=True, slots=True)
class StoredVectorStore:
    id: str
    name: str | None
    created_at: int
    metadata: dict[str, str]
    expires_after: JsonObject | None
    expires_at: int | None
    last_active_at: int
    status: str  # "in_progress" while files are being ingested, "completed", "expired"
    usage_bytes: int


@dataclass(frozen=True, slots=True)
class StoredVectorStoreFile:
    vector_store_id: str
    file_id: str
    created_at: int
    status: str  # "in_progress" | "completed" | "failed" | "cancelled"
    last_error: JsonObject | None
    attributes: dict[str, Any]
    chunking_strategy: JsonObject
    usage_bytes: int


@dataclass(frozen=True, slots=True)
class StoredFileBatch:
    id: str
    vector_store_id: str
    created_at: int
    status: str  # "in_progress" | "completed" | "failed" | "cancelled"
    file_ids: list[str]


@dataclass(frozen=True, slots=True)
class IndexedChunk:
    """One chunk of one file, ready for the index (``embedding`` L2-normalized)."""

    position: int
    text: str
    tokens: int
    embedding: list[float]


@dataclass(frozen=True, slots=True)
class SearchHit:
    file_id: str
    position: int
    text: str
    score: float


class Embedder(Protocol):
    """Turns texts into vectors (a local model or the upstream's ``/v1/embeddings``)."""

    name: str

    async def embed(self, texts: list[str]) -> list[list[float]]:
        """One L2-normalized vector per text; raises ``EmbeddingsUnavailableError``."""
        ...

    async def aclose(self) -> None:
        """Release the model or the HTTP client (a no-op where there is none)."""
        ...


class VectorIndex(Protocol):
    """One tenant's chunks with their embeddings, searched by vector, by keyword or both
    (hybrid): a view from ``VectorIndexes.for_tenant`` (chunks are written as the tenant's,
    and another tenant's chunks are never read, changed or deleted).

    The embedded default keeps them in the SQLite database (exact search, FTS5); PostgreSQL
    uses pgvector and its full-text search. Scores are in [0, 1], higher is better.
    """

    async def replace_file_chunks(
        self, vector_store_id: str, file_id: str, chunks: list[IndexedChunk]
    ) -> None: ...

    async def delete_file(self, vector_store_id: str, file_id: str) -> None: ...

    async def delete_store(self, vector_store_id: str) -> None: ...

    async def file_chunks(self, vector_store_id: str, file_id: str) -> list[str]:
        """The file's chunk texts in order (``GET …/files/{id}/content``)."""
        ...

    async def search(
        self,
        vector_store_id: str,
        *,
        embedding: list[float] | None,
        query: str,
        limit: int,
        ranker: str,
        file_ids: list[str] | None = None,
    ) -> list[SearchHit]:
        """Best chunks first. ``ranker``: ``"semantic"`` (vector only), ``"keyword"`` (full
        text only) or ``"hybrid"`` (both, fused by reciprocal rank); ``file_ids`` restricts the
        search to those files (attribute filters are applied by the caller)."""
        ...


class VectorIndexes(Protocol):
    """Every tenant's chunks (``app.store.vector_index``): the index the gateway opens once,
    used through one tenant's view at a time."""

    def for_tenant(self, tenant: str) -> VectorIndex:
        """The chunks of ``tenant`` (a light view: build one per request)."""
        ...

    async def aclose(self) -> None:
        """Release the index's own connections (the engine is the caller's)."""
        ...


class FileStore(Protocol):
    """One tenant's metadata of files, vector stores and their files: a view from
    ``FileStores.for_tenant`` (every row it writes is the tenant's; another tenant's rows are
    as absent as rows that do not exist).

    Lookups of a missing object return ``None`` / ``False``; every list raises
    ``UnknownCursorError`` (``app.core.store_errors``) for an ``after`` that names no object
    of the list, never ``KeyError``.
    """

    async def add_file(self, file: StoredFile) -> None: ...

    async def get_file(self, file_id: str) -> StoredFile | None: ...

    async def existing_file_ids(self, file_ids: Iterable[str]) -> set[str]:
        """Which of ``file_ids`` are stored (one read)."""
        ...

    async def list_files(
        self, *, purpose: str | None, after: str | None, limit: int, order: str
    ) -> list[StoredFile]:
        """Newest first for ``order="desc"``; ``limit + 1`` rows so callers see ``has_more``;
        raises ``UnknownCursorError`` for an unknown ``after``."""
        ...

    async def delete_file(self, file_id: str) -> bool:
        """Also detaches the file from every vector store."""
        ...

    async def create_vector_store(self, store: StoredVectorStore) -> None: ...

    async def get_vector_store(self, vector_store_id: str) -> StoredVectorStore | None: ...

    async def update_vector_store(self, store: StoredVectorStore) -> None: ...

    async def list_vector_stores(
        self, *, after: str | None, limit: int, order: str
    ) -> list[StoredVectorStore]:
        """As ``list_files``: ``limit + 1`` rows; ``UnknownCursorError`` for an unknown
        ``after``."""
        ...

    async def delete_vector_store(self, vector_store_id: str) -> bool: ...

    async def put_vector_store_file(self, record: StoredVectorStoreFile) -> None:
        """Insert or replace (status changes, attributes updates)."""
        ...

    async def get_vector_store_file(
        self, vector_store_id: str, file_id: str
    ) -> StoredVectorStoreFile | None: ...

    async def named_vector_store_files(
        self, vector_store_id: str, file_ids: Iterable[str]
    ) -> dict[str, tuple[StoredVectorStoreFile, str]]:
        """The store's records of ``file_ids`` with each file's name ("" once the file is
        gone), by file id; files not in the store are left out (one read)."""
        ...

    async def list_vector_store_files(
        self,
        vector_store_id: str,
        *,
        status: str | None,
        after: str | None,
        limit: int,
        order: str,
        file_ids: list[str] | None = None,
    ) -> list[StoredVectorStoreFile]:
        """As ``list_files``: ``limit + 1`` rows; ``UnknownCursorError`` for an ``after``
        that is not a file of this store."""
        ...

    async def delete_vector_store_file(self, vector_store_id: str, file_id: str) -> bool: ...

    async def file_counts(self, vector_store_id: str) -> dict[str, int]:
        """``in_progress``, ``completed``, ``failed``, ``cancelled``, ``total``."""
        ...

    async def put_file_batch(self, batch: StoredFileBatch) -> None: ...

    async def get_file_batch(
        self, vector_store_id: str, batch_id: str
    ) -> StoredFileBatch | None: ...


class FileStores(Protocol):
    """Every tenant's files, vector stores and their files (``store.files_sql``), used through
    one tenant's view at a time."""

    def for_tenant(self, tenant: str) -> FileStore:
        """The rows of ``tenant`` (a light view: build one per request)."""
        ...

    async def unfinished_ingestions(self) -> list[tuple[str, StoredVectorStoreFile]]:
        """Every tenant's vector store files still ``in_progress``, each with its tenant,
        oldest first: what a previous run left to ingest (read once at start-up)."""
        ...

    async def aclose(self) -> None:
        """Release the store's own resources (the SQL store's engine is the caller's)."""
        ...


class BlobStore(Protocol):
    """File bytes (the data directory by default)."""

    async def put(self, file_id: str, data: bytes) -> None: ...

    async def put_stream(self, file_id: str, chunks: AsyncIterable[bytes]) -> int:
        """Store the bytes ``chunks`` yields, as they come (an upload never whole in memory);
        the number of bytes. If ``chunks`` raises (a 413, a 400, a client gone), or the caller
        is cancelled, nothing of it is left and the exception propagates."""
        ...

    async def get(self, file_id: str) -> bytes | None: ...

    async def local_path(self, file_id: str) -> Path | None:
        """The file holding the blob when the store keeps it on this machine's disk (text
        extraction reads it from there rather than through memory); None otherwise, or when
        there is no such blob."""
        ...

    async def delete(self, file_id: str) -> None: ...

    async def aclose(self) -> None:
        """Release the store's client (a no-op for the data directory)."""
        ...
