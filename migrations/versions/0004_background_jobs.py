"""Background responses: their job records and their streams' event logs.

- ``background_jobs``: one row per ``background: true`` response: the request to run, the
  response as it stands, its status, and the lease (``owner``, ``lease_until`` in ms) of the
  process that runs it (``app.store.sql_jobs``).
- ``background_events``: each event of a background response's stream by sequence number, for
  ``GET /v1/responses/{id}?stream=true&starting_after=N``; purged after a retention period.

Revision ID: 0004
Revises: 0003
Create Date: 2026-11-25
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0004"
down_revision: str | Sequence[str] | None = "0003"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

ID = sa.String(length=128)


def upgrade() -> None:
    op.create_table(
        "background_jobs",
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
        sa.PrimaryKeyConstraint("response_id", name=op.f("pk_background_jobs")),
    )
    op.create_index(
        op.f("ix_background_jobs_status_lease_until"),
        "background_jobs",
        ["status", "lease_until"],
    )
    op.create_index(op.f("ix_background_jobs_finished_at"), "background_jobs", ["finished_at"])
    op.create_table(
        "background_events",
        sa.Column("response_id", ID, nullable=False),
        sa.Column("sequence_number", sa.Integer(), nullable=False),
        sa.Column("event", sa.JSON(), nullable=False),
        sa.PrimaryKeyConstraint(
            "response_id", "sequence_number", name=op.f("pk_background_events")
        ),
    )


def downgrade() -> None:
    op.drop_table("background_events")
    op.drop_index(op.f("ix_background_jobs_finished_at"), table_name="background_jobs")
    op.drop_index(op.f("ix_background_jobs_status_lease_until"), table_name="background_jobs")
    op.drop_table("background_jobs")
