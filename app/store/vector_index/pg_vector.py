"""``PgVectorIndex``: the ``VectorIndexes`` port on PostgreSQL with pgvector.

Used where ``chunks.embedding`` is pgvector's ``vector`` (``app.store.pgvector``; without
pgvector it is ``real[]`` and ``PgArrayIndex`` serves file search).

- **Semantic**: pgvector's cosine distance ``<=>``, an exact scan of the vector store's chunks
  of the tenant (``ORDER BY embedding <=> query LIMIT n``). ``chunks.embedding`` is a
  ``vector`` without a fixed dimension, so it cannot carry an HNSW or IVFFlat index (both
  need ``vector(384)`` or the like): one per embedding size would be a migration per
  embedder, and an approximate index would need ``hnsw.ef_search`` tuning with a vector
  store filter. The exact scan costs ~13 ms at 10k and ~90 ms at 100k chunks per store
  (bench/README.md, "File search index"), with the vectors kept in the rows (``SET STORAGE
  MAIN``, migration 0002: out of line in TOAST it was 6x slower). Rows of another dimension
  than the query's are skipped.
- **Keyword**: the generated ``tsv`` column, ranked by ``ts_rank_cd`` (``pg_shared``).
- **Hybrid**: both rankings fused by reciprocal rank (``fusion.fuse_hits``).

Vectors travel as pgvector's text form (``[0.1,0.2,...]``, orjson) with an explicit cast, so
no codec has to be registered on the connections. pgvector may live in any schema: its type,
operator and functions are named with the schema found in ``pg_extension`` (first use).
Writes of one file are serialized by a transaction-scoped advisory lock on (store, file): two
concurrent ``replace_file_chunks`` of the same file cannot leave both sets of chunks.
"""

from __future__ import annotations

import orjson
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from app.files.fusion import RankedIndex, semantic_score
from app.files.ports import IndexedChunk, SearchHit
from app.store.pgvector import PGVECTOR_INSTALL_HINT
from app.store.vector_index import pg_shared
from app.store.vector_index.pg_shared import DELETE_FILE, DELETE_STORE, IN_FILES, restricted

_EXTENSION_SCHEMA = text(
    "SELECT quote_ident(n.nspname) FROM pg_extension AS e "
    "JOIN pg_namespace AS n ON n.oid = e.extnamespace WHERE e.extname = 'vector'"
)


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
            "INSERT INTO chunks (vector_store_id, file_id, tenant, position, text, tokens, "
            "embedding) VALUES (:vector_store_id, :file_id, :tenant, :position, :text, :tokens, "
            f"CAST(:embedding AS {vector}))"
        )
        semantic = (
            "SELECT file_id, position, text, "
            f"embedding OPERATOR({schema}.<=>) CAST(:embedding AS {vector}) AS distance "
            "FROM chunks WHERE vector_store_id = :vector_store_id AND tenant = :tenant "
            f"AND {schema}.vector_dims(embedding) = :dims "
            "{files}ORDER BY distance, id LIMIT :limit"
        )
        self.semantic = text(semantic.format(files=""))
        self.semantic_in_files = text(semantic.format(files=IN_FILES))


class PgVectorIndex(RankedIndex):
    """The ``VectorIndexes`` port on a PostgreSQL engine (``create_engine_for``) whose database
    has pgvector and whose ``chunks.embedding`` is its ``vector`` (``respgate migrate`` switches
    it where the server has pgvector). The engine is the caller's."""

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
                    f"the pgvector extension is not installed in this database: "
                    f"{PGVECTOR_INSTALL_HINT}"
                )
            self._sql = _Statements(str(schema))
        return self._sql

    # ---------------------------------------------------------------- writes

    async def replace_file_chunks(
        self, vector_store_id: str, file_id: str, chunks: list[IndexedChunk], *, tenant: str
    ) -> None:
        rows = [
            {
                "vector_store_id": vector_store_id,
                "file_id": file_id,
                "tenant": tenant,
                "position": chunk.position,
                "text": chunk.text,
                "tokens": chunk.tokens,
                "embedding": vector_literal(chunk.embedding),
            }
            for chunk in chunks
        ]
        keys = {"vector_store_id": vector_store_id, "file_id": file_id, "tenant": tenant}
        async with self._engine.begin() as conn:
            sql = await self._statements(conn)
            await self._lock_file(conn, vector_store_id, file_id)
            await conn.execute(DELETE_FILE, keys)
            if rows:
                await conn.execute(sql.insert, rows)

    async def delete_file(self, vector_store_id: str, file_id: str, *, tenant: str) -> None:
        keys = {"vector_store_id": vector_store_id, "file_id": file_id, "tenant": tenant}
        async with self._engine.begin() as conn:
            await self._lock_file(conn, vector_store_id, file_id)
            await conn.execute(DELETE_FILE, keys)

    async def delete_store(self, vector_store_id: str, *, tenant: str) -> None:
        async with self._engine.begin() as conn:
            await conn.execute(DELETE_STORE, {"vector_store_id": vector_store_id, "tenant": tenant})

    @staticmethod
    async def _lock_file(conn: AsyncConnection, vector_store_id: str, file_id: str) -> None:
        await pg_shared.lock(conn, f"respgate-chunks:{vector_store_id}:{file_id}")

    # ---------------------------------------------------------------- reads

    async def file_chunks(self, vector_store_id: str, file_id: str, *, tenant: str) -> list[str]:
        return await pg_shared.file_chunks(self._engine, vector_store_id, file_id, tenant)

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
        params: dict[str, object] = {
            "vector_store_id": vector_store_id,
            "tenant": tenant,
            "embedding": vector_literal(embedding),
            "dims": len(embedding),
            "limit": limit,
        }
        async with self._engine.connect() as conn:
            sql = await self._statements(conn)
            statement = restricted(sql.semantic, sql.semantic_in_files, file_ids, params)
            result = await conn.execute(statement, params)
            return [
                SearchHit(
                    str(file_id), int(position), str(chunk_text), semantic_score(1 - distance)
                )
                for file_id, position, chunk_text, distance in result
            ]

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
