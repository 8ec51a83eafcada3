"""``SqliteVectorIndex``: the embedded ``VectorIndexes``, in the gateway's SQLite database.

Chunks are rows of ``chunks`` (the embedding a BLOB of float32 little-endian, L2-normalized),
each with its tenant, which every read and delete names (``fusion.TenantIndex`` is one
tenant's view); their text is indexed by the FTS5 table ``chunks_fts``, which triggers keep in
sync.

- **Semantic search is exact**: each vector store's embedding matrix is kept in memory (numpy,
  float32) and a query is one matrix-vector product plus a partial sort. Measured against
  sqlite-vec (``bench/index_bench.py``, figures and reasons in bench/README.md, "File search
  index"): a whole search takes ~0.6 ms at 10k and ~11 ms at 100k chunks of 384 dimensions,
  8-16x less than sqlite-vec's vec0 KNN alone, and needs no SQLite extension (the Python here
  cannot even load one) nor a second copy of the vectors (``vector_index.matrix``, shared with
  ``PgArrayIndex``). Products over ``THREAD_MIN_ROWS`` rows run in a worker thread (BLAS
  releases the GIL), not in the event loop.
- **The cache** holds one matrix per (vector store, tenant, dimension), least recently used
  first out past ``cache_bytes``. Every write to a store's chunks sets a new random version in
  ``chunk_versions`` in the same transaction; a search reads it (one primary-key lookup) and
  reloads the matrix when its copy is of another version, so writes by other processes on the
  same file are seen too. This process's own writes patch its cached matrix instead of
  dropping it (remove the file's rows, append the new ones), so ingesting files while
  searching does not reload the whole store after each file.
- **Keyword search** is FTS5 ``MATCH`` with ``bm25()``; the user's query becomes quoted
  phrases OR-ed (``fusion.query_terms``), so no input is FTS5 syntax. **Hybrid** fuses both
  rankings by reciprocal rank (``fusion.fuse_hits``). Scores: see ``app.files.fusion``.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import secrets
from collections.abc import AsyncIterator, Sequence
from typing import Any

import numpy as np
from sqlalchemy import Delete, delete, insert, select, text
from sqlalchemy.dialects.sqlite import insert as sqlite_insert
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from app.files.fusion import (
    keyword_score,
    query_terms,
)
from app.files.ports import IndexedChunk, SearchHit
from app.store import tables
from app.store.engine import SQLITE_BEGIN, json_dumps
from app.store.inline import InlineSqliteReader, inline_database_path
from app.store.tables import chunk_versions
from app.store.vector_index.matrix import (
    FloatArray,
    Matrix,
    MatrixCache,
    MatrixIndex,
    MatrixKey,
    matrix_of,
)

logger = logging.getLogger(__name__)

DEFAULT_CACHE_BYTES = 1 << 30

_KEYWORD_SQL = text(
    "SELECT c.file_id, c.position, c.text, -bm25(chunks_fts) AS relevance "
    "FROM chunks_fts JOIN chunks AS c ON c.id = chunks_fts.rowid "
    "WHERE chunks_fts MATCH :match AND c.vector_store_id = :vector_store_id "
    "AND c.tenant = :tenant "
    "AND (:file_ids IS NULL OR c.file_id IN (SELECT value FROM json_each(:file_ids))) "
    "ORDER BY bm25(chunks_fts), c.id LIMIT :limit"
)
# Small single-statement reads, run inline when possible (``_fetch``).
_BY_IDS_SQL = (
    "SELECT id, file_id, position, text FROM chunks WHERE id IN (SELECT value FROM json_each(?))"
)
_VERSION_SQL = "SELECT version FROM chunk_versions WHERE vector_store_id = ?"
_LOAD_SQL = "SELECT id, file_id, embedding FROM chunks WHERE vector_store_id = ? AND tenant = ?"


def encode_embedding(embedding: Sequence[float]) -> bytes:
    """An embedding as stored in ``chunks.embedding`` on SQLite (float32 little-endian)."""
    vector = np.asarray(embedding, dtype="<f4")
    if vector.ndim != 1 or vector.size == 0:
        raise ValueError("an embedding is a non-empty list of floats")
    return vector.tobytes()


def _build_matrix(version: int | None, dim: int, rows: Sequence[Sequence[Any]]) -> Matrix:
    """A matrix from (id, file_id, embedding blob) rows; rows of another dimension are left
    out (a store whose embedder changed holds both until its files are re-indexed)."""
    size = 4 * dim
    kept = [row for row in rows if len(row[2]) == size]
    vectors = np.frombuffer(b"".join(row[2] for row in kept), dtype="<f4").reshape(len(kept), dim)
    return matrix_of(version, [row[0] for row in kept], [row[1] for row in kept], vectors)


class SqliteVectorIndex(MatrixIndex):
    """The ``VectorIndexes`` port on the SQLite engine of the store (``create_engine_for``).

    The engine is the caller's; ``cache_bytes`` bounds the cached embedding matrices."""

    def __init__(
        self,
        engine: AsyncEngine,
        *,
        cache_bytes: int = DEFAULT_CACHE_BYTES,
        inline_reads: bool = True,
    ) -> None:
        """``inline_reads``: on a SQLite file, run the version check and the fetch of the hits'
        texts on a ``sqlite3`` connection of the calling thread (``store.inline``), as the
        response store does, instead of through aiosqlite's thread."""
        if engine.dialect.name != "sqlite":
            raise ValueError("SqliteVectorIndex needs a SQLite engine")
        self._engine = engine
        self._writer = engine.execution_options(**{SQLITE_BEGIN: "BEGIN IMMEDIATE"})
        self._write_lock = asyncio.Lock()
        # Single-statement reads: no transaction (one round trip less to aiosqlite's thread).
        self._reader = engine.execution_options(**{SQLITE_BEGIN: None})
        self._cache = MatrixCache(cache_bytes)
        path = inline_database_path(engine.url) if inline_reads else None
        self._inline = InlineSqliteReader(path) if path else None

    async def aclose(self) -> None:
        """Close the inline readers' connections (the engine is the caller's)."""
        if self._inline is not None:
            self._inline.close()

    async def _fetch(self, sql: str, args: tuple[Any, ...]) -> list[Any]:
        """Rows of a small read: inline, or through aiosqlite when the database is busy (or
        is not a file)."""
        if self._inline is not None:
            rows = self._inline.fetch(sql, args)
            if rows is not None:
                return rows
        async with self._reader.connect() as conn:
            driver: Any = (await conn.get_raw_connection()).driver_connection
            return list(await driver.execute_fetchall(sql, args))

    # ---------------------------------------------------------------- writes

    @contextlib.asynccontextmanager
    async def _write(
        self, vector_store_id: str
    ) -> AsyncIterator[tuple[AsyncConnection, int | None]]:
        """A write transaction on a store's chunks (write lock first); yields the store's
        version before it, for ``_patch``."""
        # One writer at a time in this process: SQLite has one write lock per database, and
        # concurrent writers on the pool's connections would time out on it ("database is
        # locked") instead of queueing.
        async with self._write_lock, self._writer.begin() as conn:
            yield conn, await _version(conn, vector_store_id)

    async def _set_version(self, conn: AsyncConnection, vector_store_id: str) -> int:
        version = secrets.randbits(62)
        statement = sqlite_insert(chunk_versions).values(
            vector_store_id=vector_store_id, version=version
        )
        await conn.execute(
            statement.on_conflict_do_update(
                index_elements=["vector_store_id"], set_={"version": version}
            )
        )
        return version

    async def replace_file_chunks(
        self, vector_store_id: str, file_id: str, chunks: list[IndexedChunk], *, tenant: str
    ) -> None:
        blobs = [encode_embedding(chunk.embedding) for chunk in chunks]
        rows = [
            {
                "vector_store_id": vector_store_id,
                "file_id": file_id,
                "tenant": tenant,
                "position": chunk.position,
                "text": chunk.text,
                "tokens": chunk.tokens,
                "embedding": blob,
            }
            for chunk, blob in zip(chunks, blobs, strict=True)
        ]
        ids: list[int] = []
        table = tables.chunks
        async with self._write(vector_store_id) as (conn, old):
            new = await self._set_version(conn, vector_store_id)
            await conn.execute(_delete_file(vector_store_id, file_id, tenant))
            if rows:
                await conn.execute(insert(table), rows)
                result = await conn.execute(
                    select(table.c.id)
                    .where(
                        table.c.vector_store_id == vector_store_id,
                        table.c.file_id == file_id,
                        table.c.tenant == tenant,
                    )
                    .order_by(table.c.id)
                )
                ids = [int(row_id) for row_id in result.scalars()]
        rows_by_id = _patch_rows(ids, blobs)
        await self._cache.patch(vector_store_id, (old, new), file_id, rows_by_id, tenant=tenant)

    async def delete_file(self, vector_store_id: str, file_id: str, *, tenant: str) -> None:
        async with self._write(vector_store_id) as (conn, old):
            new = await self._set_version(conn, vector_store_id)
            await conn.execute(_delete_file(vector_store_id, file_id, tenant))
        await self._cache.patch(vector_store_id, (old, new), file_id, [], tenant=tenant)

    async def delete_store(self, vector_store_id: str, *, tenant: str) -> None:
        chunks = tables.chunks
        async with self._write(vector_store_id) as (conn, _old):
            await conn.execute(
                delete(chunks).where(
                    chunks.c.vector_store_id == vector_store_id, chunks.c.tenant == tenant
                )
            )
            await conn.execute(
                delete(chunk_versions).where(chunk_versions.c.vector_store_id == vector_store_id)
            )
        self._cache.drop_store(vector_store_id)

    # ---------------------------------------------------------------- reads

    async def file_chunks(self, vector_store_id: str, file_id: str, *, tenant: str) -> list[str]:
        table = tables.chunks
        async with self._reader.connect() as conn:
            result = await conn.execute(
                select(table.c.text)
                .where(
                    table.c.vector_store_id == vector_store_id,
                    table.c.file_id == file_id,
                    table.c.tenant == tenant,
                )
                .order_by(table.c.position, table.c.id)
            )
            return [str(chunk_text) for chunk_text in result.scalars()]

    async def _rows_by_ids(self, ids: list[int]) -> dict[int, Sequence[Any]]:
        fetched = await self._fetch(_BY_IDS_SQL, (json_dumps(ids),))
        return {int(row[0]): row for row in fetched}

    async def keyword(
        self,
        vector_store_id: str,
        query: str,
        limit: int,
        file_ids: list[str] | None = None,
        *,
        tenant: str,
    ) -> list[SearchHit]:
        """The ``limit`` best full-text matches of ``query`` (BM25) among ``tenant``'s chunks,
        best first."""
        terms = query_terms(query)
        if not terms:
            return []
        match = " OR ".join(f'"{term}"' for term in terms)
        params = {
            "match": match,
            "vector_store_id": vector_store_id,
            "tenant": tenant,
            "file_ids": None if file_ids is None else json_dumps(list(file_ids)),
            "limit": limit,
        }
        async with self._reader.connect() as conn:
            result = await conn.execute(_KEYWORD_SQL, params)
            return [
                SearchHit(str(file_id), int(position), str(chunk_text), keyword_score(relevance))
                for file_id, position, chunk_text, relevance in result
            ]

    async def _matrix(self, key: MatrixKey) -> Matrix:
        vector_store_id, tenant, dim = key
        rows = await self._fetch(_VERSION_SQL, (vector_store_id,))
        version = int(rows[0][0]) if rows else None
        entry = self._cache.get(key)
        if entry is not None and entry.version == version:
            return entry
        async with self._cache.lock(key):
            entry = self._cache.get(key)
            if entry is not None and entry.version == version:
                return entry  # loaded by the search that held the lock
            async with self._engine.begin() as conn:  # one snapshot: version and rows
                version = await _version(conn, vector_store_id)
                raw = await conn.get_raw_connection()
                driver = raw.driver_connection
                assert driver is not None
                rows = await driver.execute_fetchall(_LOAD_SQL, (vector_store_id, tenant))
            entry = await asyncio.to_thread(_build_matrix, version, dim, rows)
            self._cache.put(key, entry)
            logger.debug(
                "embedding matrix loaded",
                extra={"vector_store_id": vector_store_id, "rows": entry.ids.shape[0]},
            )
            return entry


def _delete_file(vector_store_id: str, file_id: str, tenant: str) -> Delete:
    table = tables.chunks
    return delete(table).where(
        table.c.vector_store_id == vector_store_id,
        table.c.file_id == file_id,
        table.c.tenant == tenant,
    )


def _patch_rows(ids: list[int], blobs: list[bytes]) -> list[tuple[int, FloatArray]]:
    """The rows a write just committed, (chunk id, vector), for the cache's patch."""
    return [
        (chunk_id, np.frombuffer(blob, dtype="<f4"))
        for chunk_id, blob in zip(ids, blobs, strict=True)
    ]


async def _version(conn: AsyncConnection, vector_store_id: str) -> int | None:
    version = await conn.scalar(
        select(chunk_versions.c.version).where(chunk_versions.c.vector_store_id == vector_store_id)
    )
    return None if version is None else int(version)
