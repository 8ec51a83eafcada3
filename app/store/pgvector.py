"""pgvector in the store's PostgreSQL database: whether it is there, and ``chunks.embedding``'s
switch to its ``vector`` type.

Only file search's chunk index uses pgvector; everything else works on any PostgreSQL >= 13.
Migration 0002 creates ``chunks.embedding`` as ``real[]``, which needs no extension; then
``respgate migrate`` (``app.store.migrate.upgrade_to_head``, on every run) and ``create_schema``
call :func:`use_pgvector_for_embeddings`, which turns the column into pgvector's ``vector``
when the server has the extension: ``CREATE EXTENSION IF NOT EXISTS vector`` (in a savepoint:
without the privilege to create it, the column stays ``real[]`` and a warning says so), then
``ALTER TABLE chunks ALTER COLUMN embedding TYPE vector USING embedding::vector`` (pgvector's
cast from ``real[]``; existing chunks are converted in place). So installing pgvector later
and running ``respgate migrate`` again switches a deployment over (gateways running meanwhile
pick their index at start-up: restart them).

At start-up the gateway picks its index by the column's type (:func:`read_pgvector_state`):
``vector`` -> ``PgVectorIndex``, ``real[]`` -> ``PgArrayIndex`` (exact search in the gateway).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from sqlalchemy import text
from sqlalchemy.engine import Connection
from sqlalchemy.exc import DBAPIError

logger = logging.getLogger(__name__)

# How to get the extension, for messages.
PGVECTOR_INSTALL_HINT = (
    "install pgvector on the PostgreSQL server (Debian/Ubuntu: `apt install "
    "postgresql-<major>-pgvector`; Docker: a `pgvector/pgvector:pg<major>` image) and run "
    "`respgate migrate` again"
)
# Which type ``chunks.embedding`` has (pg_type.typname): pgvector's, or the plain array.
VECTOR_COLUMN = "vector"
ARRAY_COLUMN = "_float4"

_STATE = text(
    "SELECT "
    "(SELECT quote_ident(n.nspname) FROM pg_extension AS e "
    " JOIN pg_namespace AS n ON n.oid = e.extnamespace WHERE e.extname = 'vector'), "
    "EXISTS (SELECT 1 FROM pg_available_extensions WHERE name = 'vector'), "
    "(SELECT t.typname FROM pg_attribute AS a JOIN pg_type AS t ON t.oid = a.atttypid "
    " WHERE a.attrelid = to_regclass('chunks') AND a.attname = 'embedding' "
    " AND NOT a.attisdropped)"
)
_CREATE_EXTENSION = "CREATE EXTENSION IF NOT EXISTS vector"
# pgvector's type is stored out of line (TOAST) as soon as a row passes ~2 KB, which a
# 384-dimension chunk with its text does: every distance then costs a TOAST fetch. MAIN keeps
# vectors in the row (the text and tsvector move out first): the exact scan of 100k chunks
# went from ~550 to ~80 ms (bench/README.md, "File search index"). Changing the column's type
# resets its storage, so this follows every switch.
EMBEDDING_STORAGE_MAIN = "ALTER TABLE chunks ALTER COLUMN embedding SET STORAGE MAIN"


@dataclass(frozen=True, slots=True)
class PgVectorState:
    """What the database offers file search."""

    schema: str | None  # where the extension is installed (quoted), None when it is not
    available: bool  # the server has the extension's files (pg_available_extensions)
    column: str | None  # chunks.embedding's pg_type name, None without a chunks table

    @property
    def uses_pgvector(self) -> bool:
        return self.column == VECTOR_COLUMN

    def reason(self) -> str:
        """Why the chunk index is what it is, for the start-up log."""
        if self.uses_pgvector:
            return "chunks.embedding is a pgvector column"
        if self.schema is not None or self.available:
            return (
                "pgvector is on the server but chunks.embedding is still real[]: run "
                "`respgate migrate` to switch it (existing chunks are converted)"
            )
        return f"the pgvector extension is not on this PostgreSQL server; {PGVECTOR_INSTALL_HINT}"


def read_pgvector_state(connection: Connection) -> PgVectorState:
    schema, available, column = connection.execute(_STATE).one()
    return PgVectorState(
        None if schema is None else str(schema),
        bool(available),
        None if column is None else str(column),
    )


def create_pgvector_extension(connection: Connection) -> str | None:
    """The (quoted) schema of the ``vector`` extension, created first when the server has it
    and it is not in the database yet; None when it cannot be had (a warning says why when the
    server has it but this role may not create it). Call inside a transaction."""
    state = read_pgvector_state(connection)
    if state.schema is not None or not state.available:
        return state.schema
    try:
        with connection.begin_nested():
            connection.exec_driver_sql(_CREATE_EXTENSION)
    except DBAPIError as exc:
        logger.warning(
            "the pgvector extension is on the server but cannot be created in this database "
            "(%s); file search keeps its exact index in the gateway. Have a superuser run "
            "`CREATE EXTENSION vector` in this database, then `respgate migrate` again.",
            str(exc.orig).strip() if exc.orig is not None else exc,
        )
        return None
    return read_pgvector_state(connection).schema


def use_pgvector_for_embeddings(connection: Connection) -> bool:
    """Switch ``chunks.embedding`` from ``real[]`` to pgvector's ``vector`` when the extension
    can be had (see the module's docstring); True when it switched now. Call inside a
    transaction, after the chunks table exists."""
    state = read_pgvector_state(connection)
    if state.column != ARRAY_COLUMN:
        return False
    schema = create_pgvector_extension(connection)
    if schema is None:
        return False
    connection.exec_driver_sql(
        f"ALTER TABLE chunks ALTER COLUMN embedding TYPE {schema}.vector "
        f"USING embedding::{schema}.vector"
    )
    connection.exec_driver_sql(EMBEDDING_STORAGE_MAIN)
    logger.info(
        "chunks.embedding switched from real[] to pgvector's vector: restart running gateways "
        "so that file search uses the pgvector index"
    )
    return True
