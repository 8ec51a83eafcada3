"""Background jobs keep their tool loop's last checkpoint (``app.core.checkpoint``): a process
that takes a job over continues from the last completed tool round instead of from the start.

Revision ID: 0005
Revises: 0004
Create Date: 2026-11-25
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0005"
down_revision: str | Sequence[str] | None = "0004"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("background_jobs") as batch:
        batch.add_column(sa.Column("checkpoint", sa.JSON(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("background_jobs") as batch:
        batch.drop_column("checkpoint")
