"""Files and vector stores have an owner: a ``tenant`` column on ``files``, ``vector_stores``,
``vector_store_files``, ``vector_store_file_batches`` and ``chunks`` (a store's files, batches
and chunks have their store's tenant), and the lists' indexes lead with it.

Rows written before this revision belong to the embedded single-tenant default, ``"default"``
(``app.core.tenancy.DEFAULT_TENANT``, written out here as it is at this revision), so a gateway
that ran without authentication keeps every file and vector store it had.

The columns are added with that server default so existing rows get it; PostgreSQL then drops
the default (every write names its tenant). SQLite keeps it: dropping a column default there
means copying the table, and copying ``chunks`` would drop the triggers of its FTS5 index.

Revision ID: 0007
Revises: 0006
Create Date: 2026-12-02
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0007"
down_revision: str | Sequence[str] | None = "0006"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

TENANT = sa.String(length=128)
DEFAULT_TENANT = "default"
TABLES = ("files", "vector_stores", "vector_store_files", "vector_store_file_batches", "chunks")
# The lists of one tenant, by (created_at, id): replace the indexes of every row's.
LISTED = ("files", "vector_stores")


def upgrade() -> None:
    dialect = op.get_context().dialect.name
    for table in TABLES:
        # Only an added column (and indexes) in the batch: SQLite alters the table in place.
        with op.batch_alter_table(table) as batch:
            batch.add_column(
                sa.Column("tenant", TENANT, nullable=False, server_default=DEFAULT_TENANT)
            )
        if dialect == "postgresql":
            op.alter_column(table, "tenant", server_default=None)
    for table in LISTED:
        op.drop_index(op.f(f"ix_{table}_created_at_id"), table_name=table)
        op.create_index(
            op.f(f"ix_{table}_tenant_created_at_id"),
            table,
            ["tenant", "created_at", "id"],
            unique=False,
        )


def downgrade() -> None:
    for table in LISTED:
        op.drop_index(op.f(f"ix_{table}_tenant_created_at_id"), table_name=table)
        op.create_index(op.f(f"ix_{table}_created_at_id"), table, ["created_at", "id"])
    for table in TABLES:
        # Not in a batch: SQLite (3.35+) drops the column in place, keeping chunks' triggers.
        op.drop_column(table, "tenant")
