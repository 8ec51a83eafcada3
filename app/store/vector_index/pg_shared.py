"""What both PostgreSQL chunk indexes share (``PgVectorIndex``, ``PgArrayIndex``): deletes,
a file's chunks, the full-text ranking and the advisory locks of writers.

**Keyword search** uses the generated ``tsv`` column (``to_tsvector('simple', text)``, GIN
index, migration 0002) matched with ``websearch_to_tsquery('simple', ...)`` of the user's
terms, quoted and OR-ed (``fusion.query_terms``), ranked by ``ts_rank_cd``: no extension is
needed for it.
"""

from __future__ import annotations

import orjson
from sqlalchemy import TextClause, text
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from app.files.fusion import keyword_score, query_terms
from app.files.ports import SearchHit

# Every statement names the tenant whose chunks it reads or deletes.
DELETE_FILE = text(
    "DELETE FROM chunks WHERE vector_store_id = :vector_store_id AND file_id = :file_id "
    "AND tenant = :tenant"
)
DELETE_STORE = text(
    "DELETE FROM chunks WHERE vector_store_id = :vector_store_id AND tenant = :tenant"
)
IN_FILES = "AND file_id IN (SELECT json_array_elements_text(CAST(:file_ids AS json))) "

_LOCK = text("SELECT pg_advisory_xact_lock(hashtextextended(:key, 0))")
_FILE_CHUNKS = text(
    "SELECT text FROM chunks WHERE vector_store_id = :vector_store_id AND file_id = :file_id "
    "AND tenant = :tenant ORDER BY position, id"
)
_KEYWORD = (
    "SELECT file_id, position, text, ts_rank_cd(tsv, query) AS relevance "
    "FROM chunks, websearch_to_tsquery('simple', :query) AS query "
    "WHERE vector_store_id = :vector_store_id AND tenant = :tenant AND tsv @@ query "
    "{files}ORDER BY relevance DESC, id LIMIT :limit"
)
_KEYWORD_SQL = text(_KEYWORD.format(files=""))
_KEYWORD_IN_FILES_SQL = text(_KEYWORD.format(files=IN_FILES))


async def lock(conn: AsyncConnection, key: str) -> None:
    """A transaction-scoped advisory lock on ``key`` (waits for the holder to commit)."""
    await conn.execute(_LOCK, {"key": key})


def restricted(
    everywhere: TextClause,
    in_files: TextClause,
    file_ids: list[str] | None,
    params: dict[str, object],
) -> TextClause:
    """The statement for a search of all files or of ``file_ids`` (``IN_FILES``)."""
    if file_ids is None:
        return everywhere
    params["file_ids"] = orjson.dumps(list(file_ids)).decode()
    return in_files


async def file_chunks(
    engine: AsyncEngine, vector_store_id: str, file_id: str, tenant: str
) -> list[str]:
    """The texts of a file's chunks, in order."""
    async with engine.connect() as conn:
        result = await conn.execute(
            _FILE_CHUNKS, {"vector_store_id": vector_store_id, "file_id": file_id, "tenant": tenant}
        )
        return [str(chunk_text) for chunk_text in result.scalars()]


async def keyword_hits(
    engine: AsyncEngine,
    vector_store_id: str,
    query: str,
    limit: int,
    file_ids: list[str] | None,
    tenant: str,
) -> list[SearchHit]:
    """The ``limit`` best full-text matches of ``query`` (``ts_rank_cd``) among ``tenant``'s
    chunks, best first."""
    terms = query_terms(query)
    if not terms:
        return []
    params: dict[str, object] = {
        "vector_store_id": vector_store_id,
        "tenant": tenant,
        "query": " or ".join(f'"{term}"' for term in terms),
        "limit": limit,
    }
    statement = restricted(_KEYWORD_SQL, _KEYWORD_IN_FILES_SQL, file_ids, params)
    async with engine.connect() as conn:
        result = await conn.execute(statement, params)
        return [
            SearchHit(str(file_id), int(position), str(chunk_text), keyword_score(relevance))
            for file_id, position, chunk_text, relevance in result
        ]
