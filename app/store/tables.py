"""The schema. Alembic migrations in migrations/ build exactly this (``target_metadata``).

Items are stored once, keyed by their public id. A response keeps its continuation checkpoint
as an ordered JSON list of item ids, and a conversation its items as ordered rows, so that
rehydrating any history is one bulk read by ids, never a walk up ``previous_response_id``.
JSON columns use the ``json`` type (not ``jsonb``) so that objects come back with their keys
in the order they were written: ``GET /v1/responses/{id}`` returns what the stream carried.
"""

from __future__ import annotations

from sqlalchemy import (
    JSON,
    BigInteger,
    Column,
    ForeignKey,
    Index,
    Integer,
    MetaData,
    String,
    Table,
)

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

items = Table(
    "items",
    metadata,
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
)

conversations = Table(
    "conversations",
    metadata,
    Column("id", ID, primary_key=True),
    Column("created_at", BigInteger, nullable=False),
    Column("metadata", JSON, nullable=False),
    # Next free position: appends take positions by bumping it in the same transaction.
    Column("next_position", Integer, nullable=False, default=0),
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
)

Index(None, conversation_items.c.conversation_id, conversation_items.c.item_id)
Index(None, responses.c.conversation_id)
