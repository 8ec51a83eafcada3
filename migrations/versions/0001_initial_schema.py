"""Initial schema: items, responses, conversations, conversation_items.

Revision ID: 0001
Revises:
Create Date: 2026-11-22
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0001"
down_revision: str | Sequence[str] | None = None
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

ID = sa.String(length=128)


def upgrade() -> None:
    op.create_table(
        "items",
        sa.Column("id", ID, nullable=False),
        sa.Column("type", sa.String(length=64), nullable=False),
        sa.Column("schema_version", sa.Integer(), nullable=False),
        sa.Column("created_at", sa.BigInteger(), nullable=False),
        sa.Column("payload", sa.JSON(), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_items")),
    )
    op.create_table(
        "responses",
        sa.Column("id", ID, nullable=False),
        sa.Column("created_at", sa.BigInteger(), nullable=False),
        sa.Column("status", sa.String(length=32), nullable=False),
        sa.Column("model", sa.String(length=256), nullable=False),
        sa.Column("previous_response_id", ID, nullable=True),
        sa.Column("conversation_id", ID, nullable=True),
        sa.Column("checkpoint_ids", sa.JSON(), nullable=False),
        sa.Column("input_item_ids", sa.JSON(), nullable=False),
        sa.Column("response", sa.JSON(), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_responses")),
    )
    op.create_index(
        op.f("ix_responses_conversation_id"), "responses", ["conversation_id"], unique=False
    )
    op.create_table(
        "conversations",
        sa.Column("id", ID, nullable=False),
        sa.Column("created_at", sa.BigInteger(), nullable=False),
        sa.Column("metadata", sa.JSON(), nullable=False),
        sa.Column("next_position", sa.Integer(), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_conversations")),
    )
    op.create_table(
        "conversation_items",
        sa.Column("conversation_id", ID, nullable=False),
        sa.Column("position", sa.Integer(), nullable=False),
        sa.Column("item_id", ID, nullable=False),
        sa.ForeignKeyConstraint(
            ["conversation_id"],
            ["conversations.id"],
            name=op.f("fk_conversation_items_conversation_id_conversations"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("conversation_id", "position", name=op.f("pk_conversation_items")),
    )
    op.create_index(
        op.f("ix_conversation_items_conversation_id_item_id"),
        "conversation_items",
        ["conversation_id", "item_id"],
        unique=False,
    )


def downgrade() -> None:
    op.drop_index(
        op.f("ix_conversation_items_conversation_id_item_id"), table_name="conversation_items"
    )
    op.drop_table("conversation_items")
    op.drop_table("conversations")
    op.drop_index(op.f("ix_responses_conversation_id"), table_name="responses")
    op.drop_table("responses")
    op.drop_table("items")
