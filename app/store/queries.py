"""The SQLAlchemy Core statements of ``SqlResponseStore``, built once per dialect.

Lists of ids travel as ONE parameter, a JSON array text (``json_each`` on SQLite,
``json_array_elements_text`` on PostgreSQL), never as an expanded ``IN (:a, :b, ...)``: the
statement is the same for 1 or 40,000 ids (one cached compilation, one prepared statement)
and never hits a bound-parameter limit (asyncpg: 32,767). It is also cheaper to bind than a
``text[]`` (asyncpg, 1,000 ids: 1.7 ms instead of 3.7 ms for ``unnest(:ids::varchar[])``,
measured while writing this). Not ``id = ANY(:ids)``: with a parameter (the generic plans of
prepared statements) that is a linear search of the array per row, quadratic in the history.

Every statement that reads or locks rows names the caller's tenant (``:tenant``): items are
keyed by (tenant, id), and the other tables are filtered by their ``tenant`` column, so a row
of another tenant is never found.
"""

from __future__ import annotations

import gc
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy import (
    BigInteger,
    ColumnElement,
    Insert,
    Integer,
    ScalarSelect,
    Select,
    String,
    Table,
    Text,
    Update,
    and_,
    bindparam,
    cast,
    func,
    select,
    type_coerce,
    update,
)
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.engine import Dialect
from sqlalchemy.sql.compiler import Compiled, SQLCompiler

from app.protocol.json_types import JsonObject
from app.store.engine import json_loads
from app.store.tables import (
    background_jobs,
    conversation_items,
    conversations,
    items,
    responses,
    tool_sessions,
)

# Decoding more JSON text than this at once pauses the cyclic GC (``decode_objects``).
GC_PAUSE_MIN_CHARS = 64 * 1024


@dataclass(frozen=True, slots=True)
class Queries:
    insert_items: Insert
    """Insert-if-absent (``ON CONFLICT (tenant, id) DO NOTHING``), executemany."""
    payloads_by_ids: Select[Any]
    """``:tenant``, ``:ids`` (JSON array) -> the distinct stored payload texts joined by
    commas, or NULL."""
    existing_ids: Select[Any]
    """``:tenant``, ``:ids`` (JSON array) -> the stored ones."""
    in_conversation: Select[Any]
    """``:tenant``, ``:conversation_id``, ``:ids`` (JSON array) -> one of them in it, if any."""
    reserve_one: Update
    """``:for_tenant``, ``:conversation_id``, ``:count``, ``:now`` -> ``next_position`` after
    adding ``count`` (``last_active_at`` set to ``now``)."""
    reserve_many: Update
    """``:for_tenant``, ``:counts`` (JSON object {id: count}), ``:now`` -> (id, next_position) of
    each one bumped (``last_active_at`` set to ``now``)."""
    lock_many: Select[Any] | None
    """PostgreSQL: row-lock the conversations of ``:for_tenant``, ``:counts`` in id order (no
    deadlock)."""
    get_response: Select[Any]
    """``:tenant``, ``:response_id`` -> response, checkpoint_ids, input_item_ids (JSON texts),
    conversation_id, created_at, root_id (NULL: the response is its own root)."""
    get_conversation: Select[Any]
    """``:tenant``, ``:conversation_id`` -> created_at, metadata (JSON text)."""
    conversation_items: Select[Any]
    """``:tenant``, ``:conversation_id`` -> (conversation id, payload text or NULL) by
    position; no row when the conversation does not exist, one NULL payload when it is empty."""
    conversation_item: Select[Any]
    """``:tenant``, ``:conversation_id``, ``:item_id`` -> the payload text, if the item is in
    it."""
    get_tool_session: Select[Any]
    """``:tenant``, ``:session_id`` -> the tool engine session's state (JSON text)."""
    get_job: Select[Any]
    """``:tenant``, ``:response_id`` -> the background job's columns (JSON columns as text)."""


def build_queries(dialect: str) -> Queries:
    payload = _as_text(dialect, items.c.payload)
    aggregate = (
        func.group_concat(payload, ",", type_=Text)
        if dialect == "sqlite"
        else func.string_agg(payload, ",", type_=Text)
    )
    conversation_id = bindparam("conversation_id", type_=String)
    tenant = bindparam("tenant", type_=String)
    # In UPDATE statements ``:tenant`` would name the column's new value: ``:for_tenant``.
    for_tenant = bindparam("for_tenant", type_=String)
    keys = _json_object_entries(dialect, "counts")
    entries = _json_object_entries(dialect, "counts")
    count = select(cast(entries.c.value, Integer)).where(entries.c.key == conversations.c.id)
    in_counts = and_(
        conversations.c.id.in_(select(keys.c.key).scalar_subquery()),
        conversations.c.tenant == for_tenant,
    )
    insert = sqlite.insert(items) if dialect == "sqlite" else postgresql.insert(items)
    return Queries(
        insert_items=insert.on_conflict_do_nothing(index_elements=[items.c.tenant, items.c.id]),
        payloads_by_ids=select(aggregate).where(
            items.c.tenant == tenant, items.c.id.in_(_json_ids(dialect, "ids"))
        ),
        existing_ids=select(items.c.id).where(
            items.c.tenant == tenant, items.c.id.in_(_json_ids(dialect, "ids"))
        ),
        in_conversation=select(conversation_items.c.item_id)
        .where(
            conversation_items.c.tenant == tenant,
            conversation_items.c.conversation_id == conversation_id,
            conversation_items.c.item_id.in_(_json_ids(dialect, "ids")),
        )
        .limit(1),
        reserve_one=update(conversations)
        .where(conversations.c.id == conversation_id, conversations.c.tenant == for_tenant)
        .values(
            next_position=conversations.c.next_position + bindparam("count", type_=Integer),
            last_active_at=bindparam("now", type_=BigInteger),
        )
        .returning(conversations.c.next_position),
        reserve_many=update(conversations)
        .where(in_counts)
        .values(
            next_position=conversations.c.next_position + count.scalar_subquery(),
            last_active_at=bindparam("now", type_=BigInteger),
        )
        .returning(conversations.c.id, conversations.c.next_position),
        lock_many=None
        if dialect == "sqlite"
        else select(conversations.c.id)
        .where(in_counts)
        .order_by(conversations.c.id)
        .with_for_update(),
        get_response=select(
            _as_text(dialect, responses.c.response),
            _as_text(dialect, responses.c.checkpoint_ids),
            _as_text(dialect, responses.c.input_item_ids),
            responses.c.conversation_id,
            responses.c.created_at,
            responses.c.root_id,
        ).where(
            responses.c.id == bindparam("response_id", type_=String), responses.c.tenant == tenant
        ),
        get_conversation=select(
            conversations.c.created_at, _as_text(dialect, conversations.c.metadata)
        ).where(conversations.c.id == conversation_id, conversations.c.tenant == tenant),
        conversation_items=select(conversations.c.id, payload)
        .select_from(conversations)
        .outerjoin(conversation_items, conversation_items.c.conversation_id == conversations.c.id)
        .outerjoin(items, item_of(conversation_items))
        .where(conversations.c.id == conversation_id, conversations.c.tenant == tenant)
        .order_by(conversation_items.c.position),
        conversation_item=select(payload)
        .select_from(conversation_items)
        .join(items, item_of(conversation_items))
        .where(
            conversation_items.c.tenant == tenant,
            conversation_items.c.conversation_id == conversation_id,
            conversation_items.c.item_id == bindparam("item_id", type_=String),
        )
        .limit(1),
        get_tool_session=select(_as_text(dialect, tool_sessions.c.state)).where(
            tool_sessions.c.tenant == tenant,
            tool_sessions.c.session_id == bindparam("session_id", type_=String),
        ),
        get_job=select(
            background_jobs.c.response_id,
            background_jobs.c.status,
            _as_text(dialect, background_jobs.c.request),
            _as_text(dialect, background_jobs.c.response),
            background_jobs.c.resumable,
            background_jobs.c.owner,
            background_jobs.c.lease_until,
            background_jobs.c.attempts,
            background_jobs.c.created_at,
            background_jobs.c.finished_at,
            background_jobs.c.tenant,
        ).where(
            background_jobs.c.response_id == bindparam("response_id", type_=String),
            background_jobs.c.tenant == tenant,
        ),
    )


def item_of(rows: Table) -> ColumnElement[bool]:
    """The join of a table of item ids (``conversation_items``) to their items: the same
    tenant's item of that id."""
    return and_(items.c.tenant == rows.c.tenant, items.c.id == rows.c.item_id)


def decode_objects(texts: Sequence[str]) -> list[JsonObject]:
    """Decode JSON object texts at once (one ``orjson.loads`` of ``[a,b,...]``).

    For big inputs the cyclic GC is paused meanwhile: a 1,000-item history is ~5,000 new
    containers, whose allocation alone triggers several collections (each promoting the
    half-built result to older generations, and every few a full collection of the process);
    that doubled the decoding time in ``bench/store_bench.py``. Decoding JSON creates no
    reference cycles, so nothing is lost.
    """
    if not texts:
        return []
    joined = texts[0] if len(texts) == 1 else ",".join(texts)
    if len(joined) < GC_PAUSE_MIN_CHARS or not gc.isenabled():
        return list(json_loads(f"[{joined}]"))
    gc.disable()
    try:
        return list(json_loads(f"[{joined}]"))
    finally:
        gc.enable()


def position_rows(
    tenant: str, conversation_id: str, start: int, item_ids: Sequence[str]
) -> list[dict[str, Any]]:
    return [
        {
            "conversation_id": conversation_id,
            "position": start + offset,
            "item_id": item_id,
            "tenant": tenant,
        }
        for offset, item_id in enumerate(item_ids)
    ]


@dataclass(frozen=True, slots=True)
class DriverStatement:
    """A Core statement compiled once to its driver's SQL, run on the driver connection.

    The hot single-statement reads (rehydration: ``get_response`` + ``load_items``) skip
    SQLAlchemy's execution layer: through it, every statement costs four round trips to
    aiosqlite's connection thread (cursor, execute, fetch, close) and, on asyncpg, a pile of
    Python per call; on the driver it is one ``execute_fetchall`` / ``fetch``: 2.5-3.3x
    the ``get_response`` calls per second at c=32 (SQLite and PostgreSQL; the ablation rows
    of ``bench/store_bench.py``). The statement is still built with SQLAlchemy Core.
    """

    sql: str
    names: tuple[str, ...]
    defaults: dict[str, Any]

    def args(self, values: dict[str, Any]) -> tuple[Any, ...]:
        return tuple(values[n] if n in values else self.defaults[n] for n in self.names)


def compile_for_driver(statement: Select[Any], dialect: Dialect) -> DriverStatement:
    compiled = _sql_compiler(statement.compile(dialect=dialect))
    return DriverStatement(
        sql=compiled.string,
        names=tuple(compiled.positiontup or ()),
        defaults={name: bind.effective_value for name, bind in compiled.binds.items()},
    )


def _sql_compiler(compiled: Compiled) -> SQLCompiler:
    assert isinstance(compiled, SQLCompiler)
    return compiled


def _as_text(dialect: str, column: ColumnElement[Any]) -> ColumnElement[str]:
    """A JSON column as its stored text (decoded by the caller, all at once)."""
    if dialect == "postgresql":
        return cast(column, Text)
    return type_coerce(column, Text)


def _json_ids(dialect: str, name: str) -> ScalarSelect[Any]:
    """The elements of the JSON array parameter ``name``, as a subquery for ``IN``."""
    param = bindparam(name, type_=String)
    if dialect == "sqlite":
        return select(func.json_each(param).table_valued("value").c.value).scalar_subquery()
    return select(func.json_array_elements_text(cast(param, postgresql.JSON))).scalar_subquery()


def _json_object_entries(dialect: str, name: str) -> Any:
    """The (key, value) rows of the JSON object parameter ``name``."""
    param = bindparam(name, type_=String)
    if dialect == "sqlite":
        return func.json_each(param).table_valued("key", "value")
    return func.json_each_text(cast(param, postgresql.JSON)).table_valued("key", "value")
