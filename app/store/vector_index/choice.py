"""Which chunk index file search uses, by the store's database: SQLite's, or on PostgreSQL
pgvector's where ``chunks.embedding`` is a ``vector`` and the exact index in the gateway where
it is a ``real[]`` (no pgvector; see ``app.store.pgvector``). One log line says which and why.
"""

from __future__ import annotations

import logging

from sqlalchemy.ext.asyncio import AsyncEngine

from app.files.ports import VectorIndexes
from app.store.pgvector import read_pgvector_state

logger = logging.getLogger(__name__)


async def open_vector_index(engine: AsyncEngine) -> VectorIndexes:
    """The chunk index in ``engine``'s database (the engine is the caller's)."""
    if engine.dialect.name != "postgresql":
        from app.store.vector_index.sqlite import SqliteVectorIndex

        return SqliteVectorIndex(engine)
    async with engine.connect() as conn:
        state = await conn.run_sync(read_pgvector_state)
    if state.uses_pgvector:
        from app.store.vector_index.pg_vector import PgVectorIndex

        logger.info("file search index: pgvector (%s)", state.reason())
        return PgVectorIndex(engine)
    from app.store.vector_index.pg_array import PgArrayIndex

    log = logger.warning if state.schema is not None or state.available else logger.info
    log(
        "file search index: exact search in the gateway over real[] embeddings, not pgvector (%s)",
        state.reason(),
    )
    return PgArrayIndex(engine)
