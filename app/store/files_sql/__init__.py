"""``SqlFileStore``: the ``FileStore`` port on SQLAlchemy Core (SQLite or PostgreSQL).

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

from app.store.files_sql.files import SqlFiles
from app.store.files_sql.store_files import SqlVectorStoreFiles
from app.store.files_sql.vector_stores import SqlVectorStores

__all__ = ["SqlFileStore"]


class SqlFileStore(SqlFiles, SqlVectorStores, SqlVectorStoreFiles):
    """Files, vector stores and their files on an engine from ``create_engine_for``: the
    three parts of this package together.

    The engine is the caller's (it may be shared with the response store): ``SqlFileStore``
    never disposes of it."""
