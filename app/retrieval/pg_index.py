"""``PgVectorIndex``: the ``VectorIndex`` port on PostgreSQL with pgvector.

- **Semantic**: pgvector's cosine distance ``<=>``, an exact scan of the vector store's chunks
  (``ORDER BY embedding <=> query LIMIT n``). ``chunks.embedding`` is a ``vector`` without a
  fixed dimension, so it cannot carry an HNSW or IVFFlat index (both need ``vector(384)`` or
  the like): one per embedding size would be a migration per embedder, and an approximate
  index would need ``hnsw.ef_search`` tuning with a vector store filter. The exact scan costs
  ~13 ms at 10k and ~90 ms at 100k chunks per store (bench/README.md, "File search index"),
  with the vectors kept in the rows (``SET STORAGE MAIN``, migration 0002: out of line in
  TOAST it was 6x slower). Rows of another dimension than the query's are skipped.
- **Keyword**: the generated ``tsv`` column (``to_tsvector('simple', text)``, GIN index)
  matched with ``websearch_to_tsquery('simple', ...)`` of the user's terms, quoted and OR-ed
  (``fusion.query_terms``), ranked by ``ts_rank_cd``.
- **Hybrid**: both rankings fused by reciprocal rank (``fusion.fuse_hits``).

Vectors travel as pgvector's text form (``[0.1,0.2,...]``, orjson) with an explicit cast, so
no codec has to be registered on the connections. pgvector may live in any schema: its type,
operator and functions are named with the schema found in ``pg_extension`` (first use).
Writes of one file are serialized by a transaction-scoped advisory lock on (store, file): two
concurrent ``replace_file_chunks`` of the same file cannot leave both sets of chunks.
"""

from __future__ import annotations

import orjson
from sqlalchemy import TextClause, text
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from app.core.ports import IndexedChunk, SearchHit
from app.retrieval.fusion import (
    RankedIndex,
    keyword_score,
    query_terms,
    semantic_score,
)

_EXTENSION_SCHEMA = text(
    "SELECT quote_ident(n.nspname) FROM pg_extension AS e "
    "JOIN pg_namespace AS n ON n.oid = e.extnamespace WHERE e.extname = 'vector'"
)
_LOCK_FILE = text("SELECT pg_advisory_xact_lock(hashtextextended(:key, 0))")
_DELETE_FILE = text(
    "DELETE FROM chunks WHERE vector_store_id = :vector_store_id AND file_id = :file_id"
)
_DELETE_STORE = text("DELETE FROM chunks WHERE vector_store_id = :vector_store_id")
_FILE_CHUNKS = text(
    "SELECT text FROM chunks WHERE vector_store_id = :vector_store_id AND file_id = :file_id "
    "ORDER BY position, id"
)
_IN_FILES = "AND file_id IN (SELECT json_array_elements_text(CAST(:file_ids AS json))) "


def vector_literal(embedding: list[float]) -> str:
    """pgvector's text form of a vector."""
    if not embedding:
        raise ValueError("an embedding is a non-empty list of floats")
    return orjson.dumps(embedding, option=orjson.OPT_SERIALIZE_NUMPY).decode()


class _Statements:
    """The statements that name pgvector's objects, qualified with its schema."""

    def __init__(self, schema: str) -> None:
        vector = f"{schema}.vector"
        self.insert = text(
            "INSERT INTO chunks (vector_store_id, file_id, position, text, tokens, embedding) "
            "VALUES (:vector_store_id, :file_id, :position, :text, :tokens, "
            f"CAST(:embedding AS {vector}))"
        )
        semantic = (
            "SELECT file_id, position, text, "
            f"embedding OPERATOR({schema}.<=>) CAST(:embedding AS {vector}) AS distance "
            "FROM chunks WHERE vector_store_id = :vector_store_id "
            f"AND {schema}.vector_dims(embedding) = :dims "
            "{files}ORDER BY distance, id LIMIT :limit"
        )
        keyword = (
            "SELECT file_id, position, text, ts_rank_cd(tsv, query) AS relevance "
            "FROM chunks, websearch_to_tsquery('simple', :query) AS query "
            "WHERE vector_store_id = :vector_store_id AND tsv @@ query "
            "{files}ORDER BY relevance DESC, id LIMIT :limit"
        )
        self.semantic = text(semantic.format(files=""))
        self.semantic_in_files = text(semantic.format(files=_IN_FILES))
        self.keyword = text(keyword.format(files=""))
        self.keyword_in_files = text(keyword.format(files=_IN_FILES))


class PgVectorIndex(RankedIndex):
    """The ``VectorIndex`` port on a PostgreSQL engine (``create_engine_for``) whose database
    has the pgvector extension (migration 0002 creates it). The engine is the caller's."""

    def __init__(self, engine: AsyncEngine) -> None:
        if engine.dialect.name != "postgresql":
            raise ValueError("PgVectorIndex needs a PostgreSQL engine")
        self._engine = engine
        self._sql: _Statements | None = None

    async def _statements(self, conn: AsyncConnection) -> _Statements:
        if self._sql is None:
            schema = await conn.scalar(_EXTENSION_SCHEMA)
            if schema is None:
                raise RuntimeError(
                    "the pgvector extension is not installed in this database "
                    "(run `respgate migrate`, which creates it)"
                )
            self._sql = _Statements(str(schema))
        return self._sql

    # ---------------------------------------------------------------- writes

    async def replace_file_chunks(
        self, vector_store_id: str, file_id: str, chunks: list[IndexedChunk]
    ) -> None:
        rows = [
            {
                "vector_store_id": vector_store_id,
                "file_id": file_id,
                "position": chunk.position,
                "text": chunk.text,
                "tokens": chunk.tokens,
                "embedding": vector_literal(chunk.embedding),
            }
            for chunk in chunks
        ]
        async with self._engine.begin() as conn:
            sql = await self._statements(conn)
            await self._lock_file(conn, vector_store_id, file_id)
            await conn.execute(
                _DELETE_FILE, {"vector_store_id": vector_store_id, "file_id": file_id}
            )
            if rows:
                await conn.execute(sql.insert, rows)

    async def delete_file(self, vector_store_id: str, file_id: str) -> None:
        async with self._engine.begin() as conn:
            await self._lock_file(conn, vector_store_id, file_id)
            await conn.execute(
                _DELETE_FILE, {"vector_store_id": vector_store_id, "file_id": file_id}
            )

    async def delete_store(self, vector_store_id: str) -> None:
        async with self._engine.begin() as conn:
            await conn.execute(_DELETE_STORE, {"vector_store_id": vector_store_id})

    @staticmethod
    async def _lock_file(conn: AsyncConnection, vector_store_id: str, file_id: str) -> None:
        await conn.execute(_LOCK_FILE, {"key": f"respgate-chunks:{vector_store_id}:{file_id}"})

    # ---------------------------------------------------------------- reads

    async def file_chunks(self, vector_store_id: str, file_id: str) -> list[str]:
        async with self._engine.connect() as conn:
            result = await conn.execute(
                _FILE_CHUNKS, {"vector_store_id": vector_store_id, "file_id": file_id}
            )
            return [str(chunk_text) for chunk_text in result.scalars()]

    async def semantic(
        self,
        vector_store_id: str,
        embedding: list[float],
        limit: int,
        file_ids: list[str] | None = None,
    ) -> list[SearchHit]:
        """The ``limit`` chunks nearest to ``embedding`` (exact), best first."""
        params: dict[str, object] = {
            "vector_store_id": vector_store_id,
            "embedding": vector_literal(embedding),
            "dims": len(embedding),
            "limit": limit,
        }
        async with self._engine.connect() as conn:
            sql = await self._statements(conn)
            statement = _restricted(sql.semantic, sql.semantic_in_files, file_ids, params)
            result = await conn.execute(statement, params)
            return [
                SearchHit(
                    str(file_id), int(position), str(chunk_text), semantic_score(1 - distance)
                )
                for file_id, position, chunk_text, distance in result
            ]

    async def keyword(
        self, vector_store_id: str, query: str, limit: int, file_ids: list[str] | None = None
    ) -> list[SearchHit]:
        """The ``limit`` best full-text matches of ``query`` (``ts_rank_cd``), best first."""
        terms = query_terms(query)
        if not terms:
            return []
        params: dict[str, object] = {
            "vector_store_id": vector_store_id,
            "query": " or ".join(f'"{term}"' for term in terms),
            "limit": limit,
        }
        async with self._engine.connect() as conn:
            sql = await self._statements(conn)
            statement = _restricted(sql.keyword, sql.keyword_in_files, file_ids, params)
            result = await conn.execute(statement, params)
            return [
                SearchHit(str(file_id), int(position), str(chunk_text), keyword_score(relevance))
                for file_id, position, chunk_text, relevance in result
            ]


def _restricted(
    everywhere: TextClause,
    in_files: TextClause,
    file_ids: list[str] | None,
    params: dict[str, object],
) -> TextClause:
    if file_ids is None:
        return everywhere
    params["file_ids"] = orjson.dumps(list(file_ids)).decode()
    return in_files
