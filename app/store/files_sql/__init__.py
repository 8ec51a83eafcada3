"""``SqlFileStores``: the ``FileStores`` port on SQLAlchemy Core (SQLite or PostgreSQL), whose
``for_tenant`` views are ``SqlFileStore``s (the ``FileStore`` port: one tenant's rows).

Metadata only: a file's bytes live in a ``BlobStore`` (``store.blobs``) and the chunks of a
vector store's files in the ``VectorIndex`` (``app.store.vector_index``), which deletes them itself.

One part per concept, each on the engine and transactions of ``base.SqlTables`` (which also
pages the lists, as OpenAI's list endpoints do):

- ``files``: ``SqlFiles``, the uploaded files (``delete_file`` also detaches the file from
  every vector store);
- ``vector_stores``: ``SqlVectorStores`` (``delete_vector_store`` deletes its file rows and
  batches);
- ``store_files``: ``SqlVectorStoreFiles``, the files of a vector store and its file batches.
"""

from __future__ import annotations

from sqlalchemy.ext.asyncio import AsyncEngine

from app.files.ports import StoredVectorStoreFile
from app.store.failures import guard_engine
from app.store.files_sql.base import check_dialect, writer_of
from app.store.files_sql.files import SqlFiles
from app.store.files_sql.store_files import SqlVectorStoreFiles, unfinished_ingestions
from app.store.files_sql.vector_stores import SqlVectorStores

__all__ = ["SqlFileStore", "SqlFileStores"]


class SqlFileStore(SqlFiles, SqlVectorStores, SqlVectorStoreFiles):
    """One tenant's files, vector stores and their files (``SqlFileStores.for_tenant``): the
    three parts of this package together, every statement scoped to the tenant."""


class SqlFileStores:
    """Every tenant's files, vector stores and their files on an engine from
    ``create_engine_for``, through ``for_tenant`` views.

    The engine is the caller's (it may be shared with the response store): it is never
    disposed of here."""

    def __init__(self, engine: AsyncEngine) -> None:
        check_dialect(engine)
        guard_engine(engine)  # storage failures raise StorageUnavailableError (failures.py)
        self._engine = engine
        self._writer = writer_of(engine)

    def for_tenant(self, tenant: str) -> SqlFileStore:
        return SqlFileStore(self._engine, self._writer, tenant)

    async def unfinished_ingestions(self) -> list[tuple[str, StoredVectorStoreFile]]:
        return await unfinished_ingestions(self._engine)

    async def aclose(self) -> None:
        """Nothing to release: the engine is the caller's."""
