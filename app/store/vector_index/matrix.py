"""Exact semantic search in the gateway: a vector store's embeddings as one numpy matrix.

Used by the indexes that keep the embeddings in a plain column and search them here rather
than in the database: ``SqliteVectorIndex`` (BLOBs) and ``PgArrayIndex`` (PostgreSQL
``real[]``, when pgvector is not there). A query is one matrix-vector product plus a partial
sort (~0.6 ms at 10k and ~11 ms at 100k chunks of 384 dimensions, bench/README.md, "File
search index"); products over ``THREAD_MIN_ROWS`` rows run in a worker thread (BLAS releases
the GIL), not in the event loop.

The matrices are cached per (vector store, tenant, dimension): a matrix holds only the chunks
of the tenant that searched (a store's chunks are all its owner's), least recently used first
out past a byte budget, each tagged with the store's version in ``chunk_versions`` when it was
read: every write to a store's chunks sets a new random version in the same transaction, so a
search sees with one primary-key read whether its copy is current, whoever wrote. An index's
own writes patch its cached matrices (``patched``) instead of dropping them.
"""

from __future__ import annotations

import asyncio
from abc import abstractmethod
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from app.files.fusion import RankedIndex, semantic_hits
from app.files.ports import SearchHit

# Matrix products (and cache patches) over this many rows leave the event loop.
THREAD_MIN_ROWS = 20_000

FloatArray = npt.NDArray[np.float32]
IntArray = npt.NDArray[np.int64]


@dataclass(frozen=True, slots=True)
class Matrix:
    """A vector store's embeddings of one dimension, as loaded at ``version``."""

    version: int | None
    ids: IntArray
    files: npt.NDArray[np.int32]  # codes into file_names
    file_names: tuple[str, ...]
    vectors: FloatArray

    @property
    def nbytes(self) -> int:
        return int(self.vectors.nbytes + self.ids.nbytes + self.files.nbytes)

    def file_rows(self, file_ids: Sequence[str]) -> npt.NDArray[np.intp]:
        wanted = set(file_ids)
        codes = [code for code, name in enumerate(self.file_names) if name in wanted]
        return np.flatnonzero(np.isin(self.files, np.asarray(codes, dtype=np.int32)))

    def top(self, query: FloatArray, rows: npt.NDArray[np.intp] | None, k: int) -> list[int]:
        """Row numbers of the ``k`` best cosine similarities, best first (restricted to
        ``rows`` when given)."""
        vectors = self.vectors if rows is None else self.vectors[rows]
        if vectors.shape[0] == 0 or k <= 0:
            return []
        scores = vectors @ query
        if k < scores.shape[0]:
            best = np.argpartition(-scores, k - 1)[:k]
        else:
            best = np.arange(scores.shape[0])
        best = best[np.argsort(-scores[best], kind="stable")]
        picked = best if rows is None else rows[best]
        return [int(row) for row in picked]

    def without_file(self, file_id: str) -> Matrix:
        if file_id not in self.file_names:
            return self
        keep = self.files != self.file_names.index(file_id)
        return Matrix(
            self.version, self.ids[keep], self.files[keep], self.file_names, self.vectors[keep]
        )

    def with_rows(self, file_id: str, ids: Sequence[int], vectors: FloatArray) -> Matrix:
        names = self.file_names
        if file_id not in names:
            names = (*names, file_id)
        code = names.index(file_id)
        return Matrix(
            self.version,
            np.concatenate([self.ids, np.asarray(ids, dtype=np.int64)]),
            np.concatenate([self.files, np.full(len(ids), code, dtype=np.int32)]),
            names,
            np.concatenate([self.vectors, vectors]),
        )

    def at_version(self, version: int | None) -> Matrix:
        return Matrix(version, self.ids, self.files, self.file_names, self.vectors)


def matrix_of(
    version: int | None, ids: Sequence[int], file_ids: Sequence[str], vectors: FloatArray
) -> Matrix:
    """A matrix of rows (chunk id, file id, vector); ``vectors`` is (rows, dimension)."""
    names: dict[str, int] = {}
    codes = np.fromiter(
        (names.setdefault(file_id, len(names)) for file_id in file_ids),
        dtype=np.int32,
        count=len(file_ids),
    )
    return Matrix(
        version,
        np.asarray(ids, dtype=np.int64),
        codes,
        tuple(names),
        np.asarray(vectors, dtype=np.float32),
    )


def patched(
    entry: Matrix, file_id: str, ids: Sequence[int], vectors: FloatArray, version: int
) -> Matrix:
    """``entry`` with the file's rows replaced by ``ids``/``vectors`` (of ``entry``'s
    dimension), at ``version``."""
    matrix = entry.without_file(file_id)
    if len(ids):
        matrix = matrix.with_rows(file_id, ids, vectors)
    return matrix.at_version(version)


async def top_rows(
    matrix: Matrix, query: FloatArray, limit: int, file_ids: Sequence[str] | None
) -> tuple[list[int], list[float]]:
    """The chunk ids of the ``limit`` rows nearest to ``query`` (of the files ``file_ids``
    when given), best first, with their cosine similarities."""
    rows = None if file_ids is None else matrix.file_rows(file_ids)
    size = matrix.ids.shape[0] if rows is None else rows.shape[0]
    if size == 0:
        return [], []
    if size >= THREAD_MIN_ROWS:
        best = await asyncio.to_thread(matrix.top, query, rows, limit)
    else:
        best = matrix.top(query, rows, limit)
    scores: list[float] = (matrix.vectors[best] @ query).tolist()
    return [int(matrix.ids[row]) for row in best], scores


def query_vector(embedding: Sequence[float]) -> FloatArray:
    query = np.asarray(embedding, dtype=np.float32)
    if query.ndim != 1 or query.size == 0:
        raise ValueError("the query embedding is a non-empty list of floats")
    return query


# (vector store, tenant, dimension)
MatrixKey = tuple[str, str, int]


class MatrixCache:
    """(vector store, tenant, dim) -> matrix, least recently used evicted past ``max_bytes``
    (the matrix just used always stays)."""

    def __init__(self, max_bytes: int) -> None:
        self._max_bytes = max_bytes
        self._entries: OrderedDict[MatrixKey, Matrix] = OrderedDict()
        self._locks: dict[MatrixKey, asyncio.Lock] = {}

    def get(self, key: MatrixKey) -> Matrix | None:
        entry = self._entries.get(key)
        if entry is not None:
            self._entries.move_to_end(key)
        return entry

    def put(self, key: MatrixKey, entry: Matrix) -> None:
        self._entries[key] = entry
        self._entries.move_to_end(key)
        total = sum(matrix.nbytes for matrix in self._entries.values())
        while total > self._max_bytes and len(self._entries) > 1:
            _old_key, old = self._entries.popitem(last=False)
            total -= old.nbytes

    def lock(self, key: MatrixKey) -> asyncio.Lock:
        return self._locks.setdefault(key, asyncio.Lock())

    def store_keys(self, vector_store_id: str) -> list[MatrixKey]:
        return [key for key in self._entries if key[0] == vector_store_id]

    def drop_store(self, vector_store_id: str) -> None:
        for key in self.store_keys(vector_store_id):
            del self._entries[key]
            self._locks.pop(key, None)

    async def patch(
        self,
        vector_store_id: str,
        versions: tuple[int | None, int],
        file_id: str,
        rows: Sequence[tuple[int, FloatArray]],
        *,
        tenant: str,
    ) -> None:
        """Bring ``tenant``'s cached matrices of the store from ``versions[0]`` to
        ``versions[1]`` (a write of the tenant just committed: the file's rows are now
        ``rows``, (chunk id, vector)); a matrix of another version or tenant is left to be
        reloaded."""
        old, new = versions
        for key in self.store_keys(vector_store_id):
            entry = self.get(key)
            if entry is None or entry.version != old or key[1] != tenant:
                continue
            dim = key[2]
            kept = [(chunk_id, vector) for chunk_id, vector in rows if vector.shape[0] == dim]
            ids = [chunk_id for chunk_id, _ in kept]
            vectors = (
                np.stack([vector for _, vector in kept]).astype(np.float32, copy=False)
                if kept
                else np.zeros((0, dim), dtype=np.float32)
            )
            if entry.ids.shape[0] >= THREAD_MIN_ROWS:
                new_entry = await asyncio.to_thread(patched, entry, file_id, ids, vectors, new)
            else:
                new_entry = patched(entry, file_id, ids, vectors, new)
            self.put(key, new_entry)


class MatrixIndex(RankedIndex):
    """A ``RankedIndex`` whose semantic ranking is exact, over a store's cached matrix: what
    ``SqliteVectorIndex`` and ``PgArrayIndex`` share. Each says how it reads the matrix and
    the chunks' rows by id."""

    @abstractmethod
    async def _matrix(self, key: MatrixKey) -> Matrix:
        """The store's chunks of the tenant and dimension ``key`` names (cached)."""

    @abstractmethod
    async def _rows_by_ids(self, ids: list[int]) -> Mapping[int, Sequence[Any]]:
        """Each chunk's row ``(id, file_id, position, text)`` by id (a deleted one: none)."""

    async def semantic(
        self,
        vector_store_id: str,
        embedding: list[float],
        limit: int,
        file_ids: list[str] | None = None,
        *,
        tenant: str,
    ) -> list[SearchHit]:
        """The ``limit`` chunks of ``tenant`` nearest to ``embedding`` (exact), best first."""
        query = query_vector(embedding)
        matrix = await self._matrix((vector_store_id, tenant, int(query.size)))
        ids, scores = await top_rows(matrix, query, limit, file_ids)
        if not ids:
            return []
        return semantic_hits(ids, scores, await self._rows_by_ids(ids))
