"""``PgArrayIndex``: the ``VectorIndexes`` port on PostgreSQL without pgvector.

Used where ``chunks.embedding`` is a plain ``real[]`` (a server without pgvector; see
``app.store.pgvector``), so file search works on any PostgreSQL >= 13.

- **Semantic search is exact, in the gateway**, as in ``SqliteVectorIndex``: each vector
  store's embeddings are loaded once into a numpy matrix (``app.store.vector_index.matrix``), cached
  by the store's version in ``chunk_versions`` (one primary-key read per search tells whether
  the copy is current; writes by other gateway processes are seen), and patched by this
  process's own writes. A search is then a matrix-vector product plus a read of the hits'
  texts; the first search of a store in a process reads all its embeddings (10k chunks of 384
  dimensions: ~0.7 s, then ~20 ms a search, on 2 busy cores; pgvector scans them in the
  database instead, and needs no memory in the gateway). Chunks of another dimension than the
  query's, or of another tenant, are left out.
- **Keyword search**: the ``tsv`` column, as ``PgVectorIndex`` (``pg_shared``).
- **Hybrid**: both rankings fused by reciprocal rank (``fusion.fuse_hits``).

Writes of one vector store are serialized by a transaction-scoped advisory lock on the store,
so that the version a write replaces is exact: the cache patches rely on it.
"""

from __future__ import annotations

import asyncio
import logging
import secrets
from collections.abc import Sequence
from typing import Any

import numpy as np
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from app.files.ports import IndexedChunk, SearchHit
from app.store.vector_index import pg_shared
from app.store.vector_index.matrix import (
    THREAD_MIN_ROWS,
    FloatArray,
    Matrix,
    MatrixCache,
    MatrixIndex,
    MatrixKey,
    matrix_of,
)
from app.store.vector_index.pg_shared import DELETE_FILE, DELETE_STORE

logger = logging.getLogger(__name__)

DEFAULT_CACHE_BYTES = 1 << 30

_VERSION = text("SELECT version FROM chunk_versions WHERE vector_store_id = :vector_store_id")
_SET_VERSION = text(
    "INSERT INTO chunk_versions (vector_store_id, version) VALUES (:vector_store_id, :version) "
    "ON CONFLICT (vector_store_id) DO UPDATE SET version = excluded.version"
)
_DELETE_VERSION = text("DELETE FROM chunk_versions WHERE vector_store_id = :vector_store_id")
_INSERT = text(
    "INSERT INTO chunks (vector_store_id, file_id, tenant, position, text, tokens, embedding) "
    "VALUES (:vector_store_id, :file_id, :tenant, :position, :text, :tokens, "
    "CAST(:embedding AS real[]))"
)
_FILE_IDS = text(
    "SELECT id FROM chunks WHERE vector_store_id = :vector_store_id AND file_id = :file_id "
    "AND tenant = :tenant ORDER BY id"
)
_LOAD = text(
    "SELECT id, file_id, embedding FROM chunks WHERE vector_store_id = :vector_store_id "
    "AND tenant = :tenant AND cardinality(embedding) = :dims"
)
_BY_IDS = text(
    "SELECT id, file_id, position, text FROM chunks WHERE id = ANY(CAST(:ids AS integer[]))"
)


def _vector(embedding: Sequence[float]) -> FloatArray:
    vector = np.asarray(embedding, dtype=np.float32)
    if vector.ndim != 1 or vector.size == 0:
        raise ValueError("an embedding is a non-empty list of floats")
    return vector


def _build_matrix(version: int | None, dim: int, rows: Sequence[Sequence[Any]]) -> Matrix:
    """A matrix from (id, file_id, embedding as a list) rows, all of ``dim`` values."""
    vectors = np.asarray([row[2] for row in rows], dtype=np.float32).reshape(len(rows), dim)
    return matrix_of(version, [row[0] for row in rows], [row[1] for row in rows], vectors)


class PgArrayIndex(MatrixIndex):
    """The ``VectorIndexes`` port on a PostgreSQL engine (``create_engine_for``) whose
    ``chunks.embedding`` is ``real[]``. The engine is the caller's; ``cache_bytes`` bounds the
    cached embedding matrices."""

    def __init__(self, engine: AsyncEngine, *, cache_bytes: int = DEFAULT_CACHE_BYTES) -> None:
        if engine.dialect.name != "postgresql":
            raise ValueError("PgArrayIndex needs a PostgreSQL engine")
        self._engine = engine
        # A matrix and the version it belongs to are read in one snapshot.
        self._snapshot = engine.execution_options(isolation_level="REPEATABLE READ")
        self._cache = MatrixCache(cache_bytes)

    # ---------------------------------------------------------------- writes

    async def replace_file_chunks(
        self, vector_store_id: str, file_id: str, chunks: list[IndexedChunk], *, tenant: str
    ) -> None:
        vectors = [_vector(chunk.embedding) for chunk in chunks]
        rows = [
            {
                "vector_store_id": vector_store_id,
                "file_id": file_id,
                "tenant": tenant,
                "position": chunk.position,
                "text": chunk.text,
                "tokens": chunk.tokens,
                "embedding": vector.tolist(),
            }
            for chunk, vector in zip(chunks, vectors, strict=True)
        ]
        ids: list[int] = []
        keys = {"vector_store_id": vector_store_id, "file_id": file_id, "tenant": tenant}
        async with self._engine.begin() as conn:
            versions = await self._new_version(conn, vector_store_id)
            await conn.execute(DELETE_FILE, keys)
            if rows:
                await conn.execute(_INSERT, rows)
                ids = [
                    int(chunk_id) for chunk_id in (await conn.execute(_FILE_IDS, keys)).scalars()
                ]
        rows_by_id = list(zip(ids, vectors, strict=True))
        await self._cache.patch(vector_store_id, versions, file_id, rows_by_id, tenant=tenant)

    async def delete_file(self, vector_store_id: str, file_id: str, *, tenant: str) -> None:
        keys = {"vector_store_id": vector_store_id, "file_id": file_id, "tenant": tenant}
        async with self._engine.begin() as conn:
            versions = await self._new_version(conn, vector_store_id)
            await conn.execute(DELETE_FILE, keys)
        await self._cache.patch(vector_store_id, versions, file_id, [], tenant=tenant)

    async def delete_store(self, vector_store_id: str, *, tenant: str) -> None:
        async with self._engine.begin() as conn:
            await pg_shared.lock(conn, _store_lock(vector_store_id))
            await conn.execute(DELETE_STORE, {"vector_store_id": vector_store_id, "tenant": tenant})
            await conn.execute(_DELETE_VERSION, {"vector_store_id": vector_store_id})
        self._cache.drop_store(vector_store_id)

    async def _new_version(
        self, conn: AsyncConnection, vector_store_id: str
    ) -> tuple[int | None, int]:
        """Lock the store's chunks for this transaction and give them a new version; returns
        (the version before, the new one)."""
        await pg_shared.lock(conn, _store_lock(vector_store_id))
        old = await conn.scalar(_VERSION, {"vector_store_id": vector_store_id})
        new = secrets.randbits(62)
        await conn.execute(_SET_VERSION, {"vector_store_id": vector_store_id, "version": new})
        return (None if old is None else int(old)), new

    # ---------------------------------------------------------------- reads

    async def file_chunks(self, vector_store_id: str, file_id: str, *, tenant: str) -> list[str]:
        return await pg_shared.file_chunks(self._engine, vector_store_id, file_id, tenant)

    async def _rows_by_ids(self, ids: list[int]) -> dict[int, Sequence[Any]]:
        async with self._engine.connect() as conn:
            return {int(row[0]): row for row in await conn.execute(_BY_IDS, {"ids": ids})}

    async def keyword(
        self,
        vector_store_id: str,
        query: str,
        limit: int,
        file_ids: list[str] | None = None,
        *,
        tenant: str,
    ) -> list[SearchHit]:
        """The ``limit`` best full-text matches of ``query`` (``ts_rank_cd``), best first."""
        return await pg_shared.keyword_hits(
            self._engine, vector_store_id, query, limit, file_ids, tenant
        )

    async def _matrix(self, key: MatrixKey) -> Matrix:
        vector_store_id = key[0]
        async with self._engine.connect() as conn:
            version = await conn.scalar(_VERSION, {"vector_store_id": vector_store_id})
        entry = self._cache.get(key)
        if entry is not None and entry.version == version:
            return entry
        async with self._cache.lock(key):
            entry = self._cache.get(key)
            if entry is not None and entry.version == version:
                return entry  # loaded by the search that held the lock
            entry = await self._load(key)
            self._cache.put(key, entry)
            return entry

    async def _load(self, key: MatrixKey) -> Matrix:
        vector_store_id, tenant, dim = key
        params = {"vector_store_id": vector_store_id, "tenant": tenant, "dims": dim}
        async with self._snapshot.begin() as conn:
            version = await conn.scalar(_VERSION, params)
            rows = (await conn.execute(_LOAD, params)).all()
        version = None if version is None else int(version)
        if len(rows) >= THREAD_MIN_ROWS:
            entry = await asyncio.to_thread(_build_matrix, version, dim, rows)
        else:
            entry = _build_matrix(version, dim, rows)
        logger.debug(
            "embedding matrix loaded",
            extra={"vector_store_id": vector_store_id, "rows": entry.ids.shape[0]},
        )
        return entry


def _store_lock(vector_store_id: str) -> str:
    return f"respgate-chunks:{vector_store_id}"
