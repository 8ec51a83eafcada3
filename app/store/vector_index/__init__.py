"""The chunk indexes behind ``app.files.ports.VectorIndex``, in the store's database.

``choice.open_vector_index`` picks one by the database: ``sqlite.SqliteVectorIndex`` (exact
search over an in-memory matrix cache, FTS5), on PostgreSQL ``pg_vector.PgVectorIndex``
(pgvector) or ``pg_array.PgArrayIndex`` (exact search in the gateway over ``real[]``);
``pg_shared`` holds what both PostgreSQL indexes share, ``matrix`` the exact search's numpy
helpers. Import the submodules themselves: numpy loads only with file search.
"""
