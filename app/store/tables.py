"""The schema. Alembic migrations in migrations/ build exactly this (``target_metadata``), plus
the chunk index's full-text objects that the metadata cannot describe (created by DDL events
here too; ``include_name`` keeps them out of alembic's comparisons, and ``compare_type`` accepts
either form of ``chunks.embedding`` on PostgreSQL: ``real[]``, or pgvector's ``vector``).

Every row belongs to a tenant (``tenant``, ``app.core.tenancy``; rows from before migration
0006 belong to ``DEFAULT_TENANT``): every read filters by it. Items are stored once per tenant,
keyed by (tenant, public id): a client-chosen id (``msg_1``) is the client's own. A response
keeps its continuation checkpoint as an ordered JSON list of item ids, and a conversation its
items as ordered rows, so that rehydrating any history is one bulk read by ids, never a walk
up ``previous_response_id``; likewise a response records its chain's first response
(``root_id``), whose id names the chain's tool engine session (``tool_sessions``).
JSON columns use the ``json`` type (not ``jsonb``) so that objects come back with their keys
in the order they were written: ``GET /v1/responses/{id}`` returns what the stream carried.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from sqlalchemy import (
    DDL,
    JSON,
    BigInteger,
    Boolean,
    Column,
    ForeignKey,
    Index,
    Integer,
    LargeBinary,
    MetaData,
    String,
    Table,
    Text,
    event,
)
from sqlalchemy.dialects import postgresql
from sqlalchemy.dialects.postgresql import base as postgresql_base
from sqlalchemy.engine import Connection, Dialect
from sqlalchemy.types import TypeDecorator, TypeEngine, UserDefinedType

from app.store.pgvector import EMBEDDING_STORAGE_MAIN, use_pgvector_for_embeddings

# Version of the item payload layout; bump it with a migration that rewrites old payloads.
ITEM_SCHEMA_VERSION = 1

metadata = MetaData(
    naming_convention={
        "ix": "ix_%(table_name)s_%(column_0_N_name)s",
        "uq": "uq_%(table_name)s_%(column_0_N_name)s",
        "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
        "pk": "pk_%(table_name)s",
    }
)

ID = String(128)
# The owner of a row (``app.core.tenancy``): a project's name, or a JWT claim's value.
TENANT = String(128)

items = Table(
    "items",
    metadata,
    Column("tenant", TENANT, primary_key=True),
    Column("id", ID, primary_key=True),
    Column("type", String(64), nullable=False),
    Column("schema_version", Integer, nullable=False, default=ITEM_SCHEMA_VERSION),
    Column("created_at", BigInteger, nullable=False),
    Column("payload", JSON, nullable=False),
)

responses = Table(
    "responses",
    metadata,
    Column("id", ID, primary_key=True),
    Column("created_at", BigInteger, nullable=False),
    Column("status", String(32), nullable=False),
    Column("model", String(256), nullable=False),
    # Not foreign keys: a parent may be deleted while its children stay continuable.
    Column("previous_response_id", ID, nullable=True),
    Column("conversation_id", ID, nullable=True),
    Column("checkpoint_ids", JSON, nullable=False),
    Column("input_item_ids", JSON, nullable=False),
    Column("response", JSON, nullable=False),
    # The first response of its ``previous_response_id`` chain (its own id for a root; NULL in
    # rows written before migration 0003, which read as their own id): the chain's tool
    # engine session id.
    Column("root_id", ID, nullable=True),
    Column("tenant", TENANT, nullable=False),
)

conversations = Table(
    "conversations",
    metadata,
    Column("id", ID, primary_key=True),
    Column("created_at", BigInteger, nullable=False),
    Column("metadata", JSON, nullable=False),
    # Next free position: appends take positions by bumping it in the same transaction.
    Column("next_position", Integer, nullable=False, default=0),
    Column("tenant", TENANT, nullable=False),
    # The last write to it (created, items appended, a response in it, metadata updated):
    # retention's "last activity" (``app.store.retention``). NULL in rows from before
    # migration 0009 that it did not fill: read as ``created_at``.
    Column("last_active_at", BigInteger, nullable=True),
)

conversation_items = Table(
    "conversation_items",
    metadata,
    Column(
        "conversation_id",
        ID,
        ForeignKey("conversations.id", ondelete="CASCADE"),
        primary_key=True,
    ),
    Column("position", Integer, primary_key=True),
    Column("item_id", ID, nullable=False),
    # The conversation's tenant: its items are that tenant's ``items`` rows.
    Column("tenant", TENANT, nullable=False),
)

Index(None, conversation_items.c.conversation_id, conversation_items.c.item_id)
Index(None, responses.c.conversation_id)
# Retention (``app.store.retention``, migration 0009): expired rows by age, the references to
# an item from conversations, a chain's remaining responses.
Index(None, responses.c.created_at)
Index(None, responses.c.root_id)
Index(None, conversations.c.last_active_at)
Index(None, conversation_items.c.item_id)

# Retention (``app.store.retention``): the items of responses and conversations a purge removed
# that its sweep has not checked yet, written in the transaction that removed them, so that a
# purge interrupted before its sweep leaves them to the next one. ``token`` is the writing
# transaction's: a sweep deletes a row only as it read it (not one another purge wrote again).
purge_candidates = Table(
    "purge_candidates",
    metadata,
    Column("tenant", TENANT, primary_key=True),
    Column("item_id", ID, primary_key=True),
    Column("token", String(32), nullable=False),
)

# One tool engine session's state (``app.core.engines.ToolSessionStore``), by tenant and
# session id: a conversation's id or a chain's root response id. Not a foreign key (a chain's
# root response may be deleted while its children continue); deleting a conversation deletes
# its session.
tool_sessions = Table(
    "tool_sessions",
    metadata,
    Column("tenant", TENANT, primary_key=True),
    Column("session_id", ID, primary_key=True),
    Column("state", JSON, nullable=False),
    Column("created_at", BigInteger, nullable=False),
    Column("updated_at", BigInteger, nullable=False),
)

Index(None, tool_sessions.c.updated_at)

# Background responses (``app.core.jobs``): one job record per ``background: true`` response,
# with the lease of the process that runs it (``lease_until`` in milliseconds since the epoch),
# and the response's stream as an event log by sequence number. Not foreign keys: a job outlives
# a deleted response row (it answers ``GET`` for failed and cancelled responses, which have
# none), and event logs are purged on their own (``purge_finished``).
background_jobs = Table(
    "background_jobs",
    metadata,
    Column("response_id", ID, primary_key=True),
    Column("status", String(32), nullable=False),
    Column("request", JSON, nullable=False),
    Column("response", JSON, nullable=False),
    Column("resumable", Boolean, nullable=False),
    Column("owner", String(128), nullable=True),
    Column("lease_until", BigInteger, nullable=False),
    Column("attempts", Integer, nullable=False),
    Column("created_at", BigInteger, nullable=False),
    Column("finished_at", BigInteger, nullable=True),
    Column("checkpoint", JSON, nullable=True),  # the tool loop's last (core.checkpoint)
    # Whose response it is (``owner`` is the process holding the lease): a process that takes
    # the job over runs and stores it for this tenant.
    Column("tenant", TENANT, nullable=False),
)

Index(None, background_jobs.c.status, background_jobs.c.lease_until)
Index(None, background_jobs.c.finished_at)

background_events = Table(
    "background_events",
    metadata,
    Column("response_id", ID, primary_key=True),
    Column("sequence_number", Integer, primary_key=True),
    Column("event", JSON, nullable=False),
    Column("tenant", TENANT, nullable=False),
)


# Gateway API keys (``app.core.api_keys``): never the key, its SHA-256 (unique: the lookup) and
# a display prefix; a revoked key keeps its row (``revoked_at``, seconds since the epoch).
api_keys = Table(
    "api_keys",
    metadata,
    Column("id", ID, primary_key=True),
    Column("tenant", String(128), nullable=False),
    Column("name", String(256), nullable=False),
    Column("key_hash", String(64), nullable=False, unique=True),
    Column("prefix", String(32), nullable=False),
    Column("created_at", BigInteger, nullable=False),
    Column("revoked_at", BigInteger, nullable=True),
)


# ------------------------------------------------------------------ files and vector stores
#
# Every row has its tenant (``app.files.ports``: one tenant's view sees only its rows); a
# vector store's files, batches and chunks have their store's (migration 0007). No foreign
# keys: ``SqlFileStore`` deletes a file's or a vector store's rows itself, and the chunks
# belong to the vector index (``app.store.vector_index``), which deletes them on its own.

files = Table(
    "files",
    metadata,
    Column("id", ID, primary_key=True),
    Column("filename", String(1024), nullable=False),
    Column("purpose", String(64), nullable=False),
    Column("bytes", BigInteger, nullable=False),
    Column("created_at", BigInteger, nullable=False),
    Column("expires_at", BigInteger, nullable=True),
    Column("status", String(32), nullable=False),
    Column("tenant", TENANT, nullable=False),
)

vector_stores = Table(
    "vector_stores",
    metadata,
    Column("id", ID, primary_key=True),
    Column("name", String(1024), nullable=True),
    Column("created_at", BigInteger, nullable=False),
    Column("metadata", JSON, nullable=False),
    Column("expires_after", JSON, nullable=True),
    Column("expires_at", BigInteger, nullable=True),
    Column("last_active_at", BigInteger, nullable=False),
    Column("status", String(32), nullable=False),
    Column("usage_bytes", BigInteger, nullable=False),
    Column("tenant", TENANT, nullable=False),
)

vector_store_files = Table(
    "vector_store_files",
    metadata,
    Column("vector_store_id", ID, primary_key=True),
    Column("file_id", ID, primary_key=True),
    Column("created_at", BigInteger, nullable=False),
    Column("status", String(32), nullable=False),
    Column("last_error", JSON, nullable=True),
    Column("attributes", JSON, nullable=False),
    Column("chunking_strategy", JSON, nullable=False),
    Column("usage_bytes", BigInteger, nullable=False),
    Column("tenant", TENANT, nullable=False),
)

vector_store_file_batches = Table(
    "vector_store_file_batches",
    metadata,
    Column("id", ID, primary_key=True),
    Column("vector_store_id", ID, nullable=False),
    Column("created_at", BigInteger, nullable=False),
    Column("status", String(32), nullable=False),
    Column("file_ids", JSON, nullable=False),
    Column("tenant", TENANT, nullable=False),
)


class PgVector(UserDefinedType[Any]):
    """pgvector's ``vector`` without a fixed dimension (an HNSW or IVFFlat index would need
    one: ``vector(384)``); the index binds and reads it as text (``[0.1,0.2,...]``)."""

    cache_ok = True

    def get_col_spec(self, **_kw: Any) -> str:
        return "vector"


# Reflection (alembic's comparisons) knows the type then; pgvector's own package, when
# installed, registers its type under the same name first.
postgresql_base.ischema_names.setdefault("vector", PgVector)


class Embedding(TypeDecorator[Any]):
    """A chunk's embedding (already L2-normalized). On SQLite a BLOB of float32 little-endian
    values; on PostgreSQL created as ``real[]`` (no extension needed), and switched to
    pgvector's ``vector`` where the server has it (``app.store.pgvector``): either is this
    column (``compare_type``). The vector index reads the column in its backend's format."""

    impl = LargeBinary
    cache_ok = True

    def load_dialect_impl(self, dialect: Dialect) -> TypeEngine[Any]:
        if dialect.name == "postgresql":
            return dialect.type_descriptor(postgresql.ARRAY(postgresql.REAL()))
        return dialect.type_descriptor(LargeBinary())


chunks = Table(
    "chunks",
    metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("vector_store_id", ID, nullable=False),
    Column("file_id", ID, nullable=False),
    Column("position", Integer, nullable=False),
    Column("text", Text, nullable=False),
    Column("tokens", Integer, nullable=False),
    Column("embedding", Embedding, nullable=False),
    Column("tenant", TENANT, nullable=False),
    # SQLite: ids are never reused (AUTOINCREMENT), so that a cached id never names another
    # chunk later.
    sqlite_autoincrement=True,
)

# The embedded index (``app.store.vector_index.sqlite``) caches each vector store's embedding
# matrix in memory; every write to a store's chunks sets a new random ``version`` for it in
# the same transaction, so a process sees with one primary-key read whether its copy is
# current, whoever wrote (several processes may share one SQLite file).
chunk_versions = Table(
    "chunk_versions",
    metadata,
    Column("vector_store_id", ID, primary_key=True),
    Column("version", BigInteger, nullable=False),
)

# The lists are one tenant's: its rows by (created_at, id).
Index(None, files.c.tenant, files.c.created_at, files.c.id)
Index(None, vector_stores.c.tenant, vector_stores.c.created_at, vector_stores.c.id)
Index(None, vector_store_files.c.vector_store_id, vector_store_files.c.status)
Index(None, vector_store_files.c.file_id)
Index(None, vector_store_file_batches.c.vector_store_id)
Index(None, chunks.c.vector_store_id, chunks.c.file_id)

# What the metadata cannot describe, created by migration 0002 (and by ``create_all`` through
# the DDL events below, for tests and benchmarks), the same statements in both places:
#
# - SQLite: the FTS5 index of the chunks' text, an external-content table kept in sync with
#   ``chunks`` by triggers;
# - PostgreSQL: a generated ``tsvector`` column with a GIN index, the embeddings kept in the
#   rows, and ``chunks.embedding`` switched to pgvector's type where the server has it.
CHUNKS_FTS = "chunks_fts"
SQLITE_CHUNKS_FTS_DDL = (
    f"CREATE VIRTUAL TABLE {CHUNKS_FTS} USING fts5(text, content='chunks', content_rowid='id')",
    f"""CREATE TRIGGER chunks_fts_insert AFTER INSERT ON chunks BEGIN
  INSERT INTO {CHUNKS_FTS}(rowid, text) VALUES (new.id, new.text);
END""",
    f"""CREATE TRIGGER chunks_fts_delete AFTER DELETE ON chunks BEGIN
  INSERT INTO {CHUNKS_FTS}({CHUNKS_FTS}, rowid, text) VALUES ('delete', old.id, old.text);
END""",
    f"""CREATE TRIGGER chunks_fts_update AFTER UPDATE ON chunks BEGIN
  INSERT INTO {CHUNKS_FTS}({CHUNKS_FTS}, rowid, text) VALUES ('delete', old.id, old.text);
  INSERT INTO {CHUNKS_FTS}(rowid, text) VALUES (new.id, new.text);
END""",
)
SQLITE_CHUNKS_FTS_DROP = f"DROP TABLE IF EXISTS {CHUNKS_FTS}"
# FTS5's shadow tables of chunks_fts (SQLite creates and drops them with it).
SQLITE_FTS_TABLES = frozenset(
    {CHUNKS_FTS, *(f"{CHUNKS_FTS}_{part}" for part in ("data", "idx", "docsize", "config"))}
)

PG_TSV_COLUMN = "tsv"
PG_TSV_INDEX = "ix_chunks_tsv"
PG_CHUNKS_DDL = (
    f"ALTER TABLE chunks ADD COLUMN {PG_TSV_COLUMN} tsvector "
    "GENERATED ALWAYS AS (to_tsvector('simple', text)) STORED",
    f"CREATE INDEX {PG_TSV_INDEX} ON chunks USING gin ({PG_TSV_COLUMN})",
    EMBEDDING_STORAGE_MAIN,
)
# Execution option of the connection given to ``create_all``: False keeps ``chunks.embedding``
# a ``real[]`` even where pgvector could be used (tests of the index without pgvector).
USE_PGVECTOR = "respgate_use_pgvector"


def _ddl(statement: str, dialect: str) -> DDL:
    return DDL(statement).execute_if(dialect=dialect)  # type: ignore[no-untyped-call]


def _use_pgvector(_target: Table, connection: Connection, **_kw: Any) -> None:
    if connection.dialect.name == "postgresql" and connection.get_execution_options().get(
        USE_PGVECTOR, True
    ):
        use_pgvector_for_embeddings(connection)


for _statement in PG_CHUNKS_DDL:
    event.listen(chunks, "after_create", _ddl(_statement, "postgresql"))
event.listen(chunks, "after_create", _use_pgvector)
for _statement in SQLITE_CHUNKS_FTS_DDL:
    event.listen(chunks, "after_create", _ddl(_statement, "sqlite"))
event.listen(chunks, "before_drop", _ddl(SQLITE_CHUNKS_FTS_DROP, "sqlite"))


def include_name(name: str | None, type_: str, parent_names: Mapping[str, str | None]) -> bool:
    """Alembic's ``include_name`` hook (autogenerate, ``alembic check``, the migration tests):
    leaves out the objects above that the metadata does not describe, so that comparing a
    migrated database with the metadata finds nothing on either dialect."""
    if type_ == "table":
        return name not in SQLITE_FTS_TABLES
    if type_ == "column":
        return not (parent_names.get("table_name") == chunks.name and name == PG_TSV_COLUMN)
    if type_ == "index":
        return name != PG_TSV_INDEX
    return True


def compare_type(
    _context: Any,
    inspected_column: Any,
    metadata_column: Column[Any],
    inspected_type: TypeEngine[Any],
    _metadata_type: TypeEngine[Any],
) -> bool | None:
    """Alembic's ``compare_type`` hook: on PostgreSQL ``chunks.embedding`` is either of its
    two forms (``real[]``, or pgvector's ``vector`` after the switch); None lets alembic
    compare every other column."""
    if metadata_column.table.name != chunks.name or metadata_column.name != "embedding":
        return None
    # PgVector, or the ``pgvector`` package's own type where that package is installed
    if isinstance(inspected_type, PgVector) or type(inspected_type).__name__.upper() == "VECTOR":
        return False
    if isinstance(inspected_type, postgresql.ARRAY):
        return not isinstance(inspected_type.item_type, postgresql.REAL)
    return None
