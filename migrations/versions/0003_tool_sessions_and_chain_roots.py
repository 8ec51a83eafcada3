"""Tool engine sessions and the root of each ``previous_response_id`` chain.

- ``tool_sessions``: one tool engine session's JSON state by session id (a conversation's id,
  or the id of the first response of a chain), ``app.store.sql_tool_sessions``.
- ``responses.root_id``: the first response of the response's chain. Nullable: rows written
  before this revision keep NULL and read as their own root: no tool session existed before
  it, so a chain continued from such a row starts its session there.

Revision ID: 0003
Revises: 0002
Create Date: 2026-11-25
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0003"
down_revision: str | Sequence[str] | None = "0002"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

ID = sa.String(length=128)


def upgrade() -> None:
    op.create_table(
        "tool_sessions",
        sa.Column("session_id", ID, nullable=False),
        sa.Column("state", sa.JSON(), nullable=False),
        sa.Column("created_at", sa.BigInteger(), nullable=False),
        sa.Column("updated_at", sa.BigInteger(), nullable=False),
        sa.PrimaryKeyConstraint("session_id", name=op.f("pk_tool_sessions")),
    )
    op.add_column("responses", sa.Column("root_id", ID, nullable=True))


def downgrade() -> None:
    op.drop_column("responses", "root_id")
    op.drop_table("tool_sessions")
