"""Files, vector stores and the chunk index of file_search.

Tables: files, vector_stores, vector_store_files, vector_store_file_batches, chunks,
chunk_versions (the SQLite index's cache versions).

The chunk index differs by dialect:

- SQLite: ``chunks.embedding`` is a BLOB (float32 little-endian, L2-normalized) and the text is
  indexed by an external-content FTS5 table ``chunks_fts`` kept in sync by triggers.
- PostgreSQL: needs no extension. ``chunks.embedding`` is a ``real[]`` (searched exactly in
  the gateway, ``app.store.vector_index.pg_array``), kept in the row (``SET STORAGE MAIN``), and
  a generated ``tsv tsvector`` column (``to_tsvector('simple', text)``) with a GIN index
  serves full-text search. Where the server has pgvector, ``respgate migrate`` then switches
  ``chunks.embedding`` to pgvector's ``vector`` (``app.store.pgvector``, after the revisions,
  on every run: installing pgvector later and migrating again switches an existing database).
  Before this release, this revision created the ``vector`` extension and column itself; a
  database migrated then is already in the switched form.

The statements that the SQLAlchemy metadata cannot describe are shared with
``app.store.tables`` (its ``create_all`` DDL events), copied here as they are at this revision.

Revision ID: 0002
Revises: 0001
Create Date: 2026-11-22
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision: str = "0002"
down_revision: str | Sequence[str] | None = "0001"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

ID = sa.String(length=128)


SQLITE_FTS = (
    "CREATE VIRTUAL TABLE chunks_fts USING fts5(text, content='chunks', content_rowid='id')",
    """CREATE TRIGGER chunks_fts_insert AFTER INSERT ON chunks BEGIN
  INSERT INTO chunks_fts(rowid, text) VALUES (new.id, new.text);
END""",
    """CREATE TRIGGER chunks_fts_delete AFTER DELETE ON chunks BEGIN
  INSERT INTO chunks_fts(chunks_fts, rowid, text) VALUES ('delete', old.id, old.text);
END""",
    """CREATE TRIGGER chunks_fts_update AFTER UPDATE ON chunks BEGIN
  INSERT INTO chunks_fts(chunks_fts, rowid, text) VALUES ('delete', old.id, old.text);
  INSERT INTO chunks_fts(rowid, text) VALUES (new.id, new.text);
END""",
)
PG_CHUNKS = (
    "ALTER TABLE chunks ADD COLUMN tsv tsvector "
    "GENERATED ALWAYS AS (to_tsvector('simple', text)) STORED",
    "CREATE INDEX ix_chunks_tsv ON chunks USING gin (tsv)",
    # Embeddings stay in the row instead of TOAST (7x faster exact scans with pgvector).
    "ALTER TABLE chunks ALTER COLUMN embedding SET STORAGE MAIN",
)


def upgrade() -> None:
    dialect = op.get_context().dialect.name
    op.create_table(
        "files",
        sa.Column("id", ID, nullable=False),
        sa.Column("filename", sa.String(length=1024), nullable=False),
        sa.Column("purpose", sa.String(length=64), nullable=False),
        sa.Column("bytes", sa.BigInteger(), nullable=False),
        sa.Column("created_at", sa.BigInteger(), nullable=False),
        sa.Column("expires_at", sa.BigInteger(), nullable=True),
        sa.Column("status", sa.String(length=32), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_files")),
    )
    op.create_index(op.f("ix_files_created_at_id"), "files", ["created_at", "id"], unique=False)
    op.create_table(
        "vector_stores",
        sa.Column("id", ID, nullable=False),
        sa.Column("name", sa.String(length=1024), nullable=True),
        sa.Column("created_at", sa.BigInteger(), nullable=False),
        sa.Column("metadata", sa.JSON(), nullable=False),
        sa.Column("expires_after", sa.JSON(), nullable=True),
        sa.Column("expires_at", sa.BigInteger(), nullable=True),
        sa.Column("last_active_at", sa.BigInteger(), nullable=False),
        sa.Column("status", sa.String(length=32), nullable=False),
        sa.Column("usage_bytes", sa.BigInteger(), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_vector_stores")),
    )
    op.create_index(
        op.f("ix_vector_stores_created_at_id"),
        "vector_stores",
        ["created_at", "id"],
        unique=False,
    )
    op.create_table(
        "vector_store_files",
        sa.Column("vector_store_id", ID, nullable=False),
        sa.Column("file_id", ID, nullable=False),
        sa.Column("created_at", sa.BigInteger(), nullable=False),
        sa.Column("status", sa.String(length=32), nullable=False),
        sa.Column("last_error", sa.JSON(), nullable=True),
        sa.Column("attributes", sa.JSON(), nullable=False),
        sa.Column("chunking_strategy", sa.JSON(), nullable=False),
        sa.Column("usage_bytes", sa.BigInteger(), nullable=False),
        sa.PrimaryKeyConstraint("vector_store_id", "file_id", name=op.f("pk_vector_store_files")),
    )
    op.create_index(
        op.f("ix_vector_store_files_vector_store_id_status"),
        "vector_store_files",
        ["vector_store_id", "status"],
        unique=False,
    )
    op.create_index(
        op.f("ix_vector_store_files_file_id"), "vector_store_files", ["file_id"], unique=False
    )
    op.create_table(
        "vector_store_file_batches",
        sa.Column("id", ID, nullable=False),
        sa.Column("vector_store_id", ID, nullable=False),
        sa.Column("created_at", sa.BigInteger(), nullable=False),
        sa.Column("status", sa.String(length=32), nullable=False),
        sa.Column("file_ids", sa.JSON(), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_vector_store_file_batches")),
    )
    op.create_index(
        op.f("ix_vector_store_file_batches_vector_store_id"),
        "vector_store_file_batches",
        ["vector_store_id"],
        unique=False,
    )

    embedding: sa.types.TypeEngine[Any] = (
        postgresql.ARRAY(postgresql.REAL()) if dialect == "postgresql" else sa.LargeBinary()
    )
    op.create_table(
        "chunks",
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("vector_store_id", ID, nullable=False),
        sa.Column("file_id", ID, nullable=False),
        sa.Column("position", sa.Integer(), nullable=False),
        sa.Column("text", sa.Text(), nullable=False),
        sa.Column("tokens", sa.Integer(), nullable=False),
        sa.Column("embedding", embedding, nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_chunks")),
        sqlite_autoincrement=True,
    )
    op.create_index(
        op.f("ix_chunks_vector_store_id_file_id"),
        "chunks",
        ["vector_store_id", "file_id"],
        unique=False,
    )
    op.create_table(
        "chunk_versions",
        sa.Column("vector_store_id", ID, nullable=False),
        sa.Column("version", sa.BigInteger(), nullable=False),
        sa.PrimaryKeyConstraint("vector_store_id", name=op.f("pk_chunk_versions")),
    )
    if dialect == "postgresql":
        for statement in PG_CHUNKS:
            op.execute(statement)
    elif dialect == "sqlite":
        for statement in SQLITE_FTS:
            op.execute(statement)


def downgrade() -> None:
    # PostgreSQL: the vector extension, if any, stays (other objects may use it).
    dialect = op.get_context().dialect.name
    if dialect == "sqlite":
        op.execute("DROP TABLE IF EXISTS chunks_fts")  # its triggers go with chunks
    elif dialect == "postgresql":
        op.execute("DROP INDEX IF EXISTS ix_chunks_tsv")
    op.drop_table("chunk_versions")
    op.drop_index(op.f("ix_chunks_vector_store_id_file_id"), table_name="chunks")
    op.drop_table("chunks")
    op.drop_index(
        op.f("ix_vector_store_file_batches_vector_store_id"),
        table_name="vector_store_file_batches",
    )
    op.drop_table("vector_store_file_batches")
    op.drop_index(op.f("ix_vector_store_files_file_id"), table_name="vector_store_files")
    op.drop_index(
        op.f("ix_vector_store_files_vector_store_id_status"), table_name="vector_store_files"
    )
    op.drop_table("vector_store_files")
    op.drop_index(op.f("ix_vector_stores_created_at_id"), table_name="vector_stores")
    op.drop_table("vector_stores")
    op.drop_index(op.f("ix_files_created_at_id"), table_name="files")
    op.drop_table("files")
