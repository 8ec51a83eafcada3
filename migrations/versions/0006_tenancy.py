"""Tenancy: every row of the response store belongs to a tenant (``app.core.tenancy``).

- ``tenant`` (NOT NULL) on ``items``, ``responses``, ``conversations``, ``conversation_items``,
  ``tool_sessions``, ``background_jobs`` and ``background_events``; the rows already there
  belong to ``DEFAULT_TENANT`` ("default": the embedded single-tenant gateway, authentication
  off, keeps reading them). The column has no default afterwards: a write that forgets its
  tenant fails.
- Client-chosen item ids are per tenant: the key of ``items`` becomes (tenant, id), and of
  ``tool_sessions`` (tenant, session_id). The other tables keep their keys (gateway-made random
  ids) and are filtered by ``tenant`` on every read.

PostgreSQL alters the tables in place. SQLite copies each table once (batch mode), from the
0005 definitions below rather than from reflection, so that ``alembic upgrade --sql`` works too;
the migration engine runs with SQLite's foreign keys off, so copying ``conversations`` leaves
``conversation_items`` as it is.

A downgrade is refused while rows of another tenant exist (it would hand them to everyone).

Revision ID: 0006
Revises: 0005
Create Date: 2026-12-01
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import context, op
from alembic.util import CommandError

revision: str = "0006"
down_revision: str | Sequence[str] | None = "0005"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

# ``app.core.tenancy.DEFAULT_TENANT``, written out: a migration does not change with the code.
DEFAULT_TENANT = "default"
TENANT = sa.String(length=128)
ID = sa.String(length=128)

# table -> its primary key before this revision, and after (the same for most)
KEYS: dict[str, tuple[list[str], list[str]]] = {
    "items": (["id"], ["tenant", "id"]),
    "responses": (["id"], ["id"]),
    "conversations": (["id"], ["id"]),
    "conversation_items": (["conversation_id", "position"], ["conversation_id", "position"]),
    "tool_sessions": (["session_id"], ["tenant", "session_id"]),
    "background_jobs": (["response_id"], ["response_id"]),
    "background_events": (["response_id", "sequence_number"], ["response_id", "sequence_number"]),
}


def _tables_at_0005() -> dict[str, sa.Table]:
    """The tables as revisions 0001-0005 left them (SQLite's batch copies start from these)."""
    meta = sa.MetaData()
    tables = [
        sa.Table(
            "items",
            meta,
            sa.Column("id", ID, nullable=False),
            sa.Column("type", sa.String(length=64), nullable=False),
            sa.Column("schema_version", sa.Integer(), nullable=False),
            sa.Column("created_at", sa.BigInteger(), nullable=False),
            sa.Column("payload", sa.JSON(), nullable=False),
            sa.PrimaryKeyConstraint("id", name="pk_items"),
        ),
        sa.Table(
            "responses",
            meta,
            sa.Column("id", ID, nullable=False),
            sa.Column("created_at", sa.BigInteger(), nullable=False),
            sa.Column("status", sa.String(length=32), nullable=False),
            sa.Column("model", sa.String(length=256), nullable=False),
            sa.Column("previous_response_id", ID, nullable=True),
            sa.Column("conversation_id", ID, nullable=True),
            sa.Column("checkpoint_ids", sa.JSON(), nullable=False),
            sa.Column("input_item_ids", sa.JSON(), nullable=False),
            sa.Column("response", sa.JSON(), nullable=False),
            sa.Column("root_id", ID, nullable=True),
            sa.PrimaryKeyConstraint("id", name="pk_responses"),
            sa.Index("ix_responses_conversation_id", "conversation_id"),
        ),
        sa.Table(
            "conversations",
            meta,
            sa.Column("id", ID, nullable=False),
            sa.Column("created_at", sa.BigInteger(), nullable=False),
            sa.Column("metadata", sa.JSON(), nullable=False),
            sa.Column("next_position", sa.Integer(), nullable=False),
            sa.PrimaryKeyConstraint("id", name="pk_conversations"),
        ),
        sa.Table(
            "conversation_items",
            meta,
            sa.Column("conversation_id", ID, nullable=False),
            sa.Column("position", sa.Integer(), nullable=False),
            sa.Column("item_id", ID, nullable=False),
            sa.ForeignKeyConstraint(
                ["conversation_id"],
                ["conversations.id"],
                name="fk_conversation_items_conversation_id_conversations",
                ondelete="CASCADE",
            ),
            sa.PrimaryKeyConstraint("conversation_id", "position", name="pk_conversation_items"),
            sa.Index("ix_conversation_items_conversation_id_item_id", "conversation_id", "item_id"),
        ),
        sa.Table(
            "tool_sessions",
            meta,
            sa.Column("session_id", ID, nullable=False),
            sa.Column("state", sa.JSON(), nullable=False),
            sa.Column("created_at", sa.BigInteger(), nullable=False),
            sa.Column("updated_at", sa.BigInteger(), nullable=False),
            sa.PrimaryKeyConstraint("session_id", name="pk_tool_sessions"),
        ),
        sa.Table(
            "background_jobs",
            meta,
            sa.Column("response_id", ID, nullable=False),
            sa.Column("status", sa.String(length=32), nullable=False),
            sa.Column("request", sa.JSON(), nullable=False),
            sa.Column("response", sa.JSON(), nullable=False),
            sa.Column("resumable", sa.Boolean(), nullable=False),
            sa.Column("owner", sa.String(length=128), nullable=True),
            sa.Column("lease_until", sa.BigInteger(), nullable=False),
            sa.Column("attempts", sa.Integer(), nullable=False),
            sa.Column("created_at", sa.BigInteger(), nullable=False),
            sa.Column("finished_at", sa.BigInteger(), nullable=True),
            sa.Column("checkpoint", sa.JSON(), nullable=True),
            sa.PrimaryKeyConstraint("response_id", name="pk_background_jobs"),
            sa.Index("ix_background_jobs_status_lease_until", "status", "lease_until"),
            sa.Index("ix_background_jobs_finished_at", "finished_at"),
        ),
        sa.Table(
            "background_events",
            meta,
            sa.Column("response_id", ID, nullable=False),
            sa.Column("sequence_number", sa.Integer(), nullable=False),
            sa.Column("event", sa.JSON(), nullable=False),
            sa.PrimaryKeyConstraint("response_id", "sequence_number", name="pk_background_events"),
        ),
    ]
    return {table.name: table for table in tables}


def _with_tenant(table: sa.Table) -> sa.Table:
    """``table`` (0005) with the ``tenant`` column and its 0006 key (a downgrade's source)."""
    meta = sa.MetaData()
    copy = table.to_metadata(meta)
    old, new = KEYS[table.name]
    copy.append_column(sa.Column("tenant", TENANT, nullable=False, primary_key="tenant" in new))
    if old != new:  # replaces the table's key
        copy.append_constraint(sa.PrimaryKeyConstraint(*new, name=f"pk_{table.name}"))
    return copy


def _filled(table: sa.Table) -> sa.Table:
    """``table`` (0005) with the ``tenant`` column as the first copy added it."""
    meta = sa.MetaData()
    copy = table.to_metadata(meta)
    copy.append_column(sa.Column("tenant", TENANT, nullable=False, server_default=DEFAULT_TENANT))
    return copy


def upgrade() -> None:
    sqlite = op.get_context().dialect.name == "sqlite"
    tables = _tables_at_0005()
    for name, (old, new) in KEYS.items():
        if sqlite:
            # ALTER TABLE ADD COLUMN with a default (filling the rows), then one copy without
            # the default, with the new key.
            with op.batch_alter_table(name, copy_from=tables[name]) as batch:
                batch.add_column(
                    sa.Column("tenant", TENANT, nullable=False, server_default=DEFAULT_TENANT)
                )
            with op.batch_alter_table(
                name, copy_from=_filled(tables[name]), recreate="always"
            ) as batch:
                batch.alter_column("tenant", existing_type=TENANT, server_default=None)
                if old != new:
                    batch.drop_constraint(f"pk_{name}", type_="primary")
                    batch.create_primary_key(f"pk_{name}", new)
            continue
        op.add_column(
            name, sa.Column("tenant", TENANT, nullable=False, server_default=DEFAULT_TENANT)
        )
        op.alter_column(name, "tenant", existing_type=TENANT, server_default=None)
        if old != new:
            op.drop_constraint(f"pk_{name}", name, type_="primary")
            op.create_primary_key(f"pk_{name}", name, new)


def downgrade() -> None:
    if not context.is_offline_mode():
        _refuse_other_tenants()
    sqlite = op.get_context().dialect.name == "sqlite"
    tables = _tables_at_0005()
    for name, (old, new) in reversed(KEYS.items()):
        if sqlite:
            source = _with_tenant(tables[name])
            with op.batch_alter_table(name, copy_from=source, recreate="always") as batch:
                if old != new:
                    batch.drop_constraint(f"pk_{name}", type_="primary")
                    batch.create_primary_key(f"pk_{name}", old)
                batch.drop_column("tenant")
            continue
        if old != new:
            op.drop_constraint(f"pk_{name}", name, type_="primary")
            op.create_primary_key(f"pk_{name}", name, old)
        op.drop_column(name, "tenant")


def _refuse_other_tenants() -> None:
    """A downgrade would give every tenant's rows to everyone (and items of two tenants may
    share an id): refused while rows of another tenant than the default one exist."""
    bind = op.get_bind()
    for table in KEYS:
        found = bind.execute(
            sa.text(f"SELECT tenant FROM {table} WHERE tenant <> :tenant LIMIT 1"),
            {"tenant": DEFAULT_TENANT},
        ).first()
        if found is not None:
            raise CommandError(
                f"cannot downgrade below 0006: {table} holds rows of tenant {found[0]!r}; "
                "only the default tenant's rows can go back to a single-tenant store"
            )
