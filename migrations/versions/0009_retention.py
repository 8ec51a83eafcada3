"""Retention (``[retention]``, ``respgate purge``; ``app.store.retention``): conversations record
their last activity, the purge's lookups are indexed (expired responses by age, the
conversations that hold an item, the responses left in a chain, stale tool sessions), and the
items a purge has yet to sweep are kept in ``purge_candidates``.

Revision ID: 0009
Revises: 0008
Create Date: 2026-12-02
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0009"
down_revision: str | Sequence[str] | None = "0008"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

# (index name, table, columns)
_INDEXES = (
    ("ix_responses_created_at", "responses", ["created_at"]),
    ("ix_responses_root_id", "responses", ["root_id"]),
    ("ix_conversations_last_active_at", "conversations", ["last_active_at"]),
    ("ix_conversation_items_item_id", "conversation_items", ["item_id"]),
    ("ix_tool_sessions_updated_at", "tool_sessions", ["updated_at"]),
)


def upgrade() -> None:
    with op.batch_alter_table("conversations") as batch:
        batch.add_column(sa.Column("last_active_at", sa.BigInteger(), nullable=True))
    # Existing conversations: last active when they were created (the best the rows know).
    op.execute("UPDATE conversations SET last_active_at = created_at")
    for name, table, columns in _INDEXES:
        op.create_index(op.f(name), table, columns, unique=False)
    op.create_table(
        "purge_candidates",
        sa.Column("tenant", sa.String(length=128), nullable=False),
        sa.Column("item_id", sa.String(length=128), nullable=False),
        sa.Column("token", sa.String(length=32), nullable=False),
        sa.PrimaryKeyConstraint("tenant", "item_id", name=op.f("pk_purge_candidates")),
    )


def downgrade() -> None:
    op.drop_table("purge_candidates")
    for name, table, _ in reversed(_INDEXES):
        op.drop_index(op.f(name), table_name=table)
    with op.batch_alter_table("conversations") as batch:
        batch.drop_column("last_active_at")
