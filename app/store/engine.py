"""Async engines for the store: an embedded SQLite file (default) or PostgreSQL.

``create_engine_for(url)`` understands ``sqlite+aiosqlite:///path`` and
``postgresql+asyncpg://...``. JSON columns go through orjson both ways (key order preserved).

SQLite connections run in WAL mode with ``synchronous=NORMAL``, foreign keys on and a busy
timeout. The sqlite3 driver's own transaction handling is switched off and SQLAlchemy's
``begin`` emits the statement named by the :data:`SQLITE_BEGIN` execution option (default
``BEGIN``, i.e. deferred): writers ask for ``BEGIN IMMEDIATE`` so that they take the write lock
before their first read (no lock upgrade, no ``SQLITE_BUSY`` half-way through a transaction),
and single-statement readers may pass ``None`` to run without an explicit transaction.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

import orjson
from sqlalchemy import event
from sqlalchemy.engine import Connection, make_url
from sqlalchemy.ext.asyncio import AsyncEngine, create_async_engine

from app.store.tables import USE_PGVECTOR, metadata

logger = logging.getLogger(__name__)

# Execution option read by the SQLite ``begin`` hook: the statement that opens a transaction
# ("BEGIN", "BEGIN IMMEDIATE") or None for none (autocommit, one statement at a time).
SQLITE_BEGIN = "respgate_sqlite_begin"

SQLITE_BUSY_TIMEOUT_MS = 10_000
SQLITE_PRAGMAS = (
    # First: the others may need a lock (journal_mode while another connection writes), and
    # without a busy timeout a new connection then fails at once with "database is locked".
    f"PRAGMA busy_timeout={SQLITE_BUSY_TIMEOUT_MS}",
    "PRAGMA journal_mode=WAL",
    "PRAGMA synchronous=NORMAL",
    "PRAGMA foreign_keys=ON",
    "PRAGMA temp_store=MEMORY",
    "PRAGMA cache_size=-32768",  # 32 MiB page cache per connection
)

# A gateway holds a connection only for the few statements of one store call, so a fixed pool
# serves many concurrent requests; past it, requests wait for a connection (pool_timeout, 30 s)
# rather than open overflow connections: under sustained load those are opened and closed
# again per checkout, which cut get_response throughput at c=32 by 3x (PostgreSQL: a new
# backend each time; SQLite: aiosqlite starts a thread per connection).
POSTGRES_POOL_SIZE = 20
POSTGRES_MAX_OVERFLOW = 0
SQLITE_POOL_SIZE = 8
SQLITE_MAX_OVERFLOW = 0


def json_dumps(value: Any) -> str:
    """Serialize a JSON column value (orjson; the stdlib for what orjson refuses, e.g. big ints)."""
    try:
        return orjson.dumps(value).decode()
    except TypeError:
        return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


def json_loads(text: str | bytes) -> Any:
    return orjson.loads(text)


def default_database_url(data_dir: Path) -> str:
    """The embedded database: ``respgate.db`` in ``data_dir``."""
    return f"sqlite+aiosqlite:///{(Path(data_dir) / 'respgate.db').resolve()}"


def create_engine_for(url: str) -> AsyncEngine:
    """An engine for a ``sqlite+aiosqlite`` or ``postgresql+asyncpg`` URL."""
    parsed = make_url(url)
    backend = parsed.get_backend_name()
    if backend == "sqlite":
        return _create_sqlite_engine(url)
    if backend == "postgresql":
        return create_async_engine(
            url,
            json_serializer=json_dumps,
            json_deserializer=json_loads,
            pool_size=POSTGRES_POOL_SIZE,
            max_overflow=POSTGRES_MAX_OVERFLOW,
            # No pre-ping: it is a round trip on every checkout (~0.3 ms here, as much as a
            # whole get_response). After a server restart the first statement on each stale
            # connection fails, SQLAlchemy then invalidates the whole pool, and later
            # checkouts get fresh connections.
            pool_recycle=1800,
        )
    raise ValueError(f"unsupported database URL {parsed.render_as_string(hide_password=True)!r}")


def _create_sqlite_engine(url: str) -> AsyncEngine:
    parsed = make_url(url)
    database = parsed.database or ""
    in_memory = database in ("", ":memory:") or parsed.query.get("mode") == "memory"
    pool: dict[str, Any] = {}
    if not in_memory:  # in memory: one connection (StaticPool), no pool sizes
        pool = {"pool_size": SQLITE_POOL_SIZE, "max_overflow": SQLITE_MAX_OVERFLOW}
        if not database.startswith("file:"):
            Path(database).expanduser().parent.mkdir(parents=True, exist_ok=True)
    engine = create_async_engine(
        url,
        json_serializer=json_dumps,
        json_deserializer=json_loads,
        **pool,
        # No ROLLBACK when a connection goes back to the pool: every transaction on it was
        # opened by ``_on_sqlite_begin`` and is ended by SQLAlchemy (commit, or rollback on
        # error), and the driver never opens one itself; the reset would be a wasted
        # round trip to the connection's thread on every checkout.
        pool_reset_on_return=None,
    )
    event.listen(engine.sync_engine, "connect", _on_sqlite_connect)
    event.listen(engine.sync_engine, "begin", _on_sqlite_begin)
    return engine


def _on_sqlite_connect(dbapi_connection: Any, _record: Any) -> None:
    # Let SQLAlchemy (``_on_sqlite_begin``) decide when and how a transaction begins.
    dbapi_connection.isolation_level = None
    cursor = dbapi_connection.cursor()
    try:
        for pragma in SQLITE_PRAGMAS:
            cursor.execute(pragma)
    finally:
        cursor.close()


def _on_sqlite_begin(connection: Connection) -> None:
    statement = connection.get_execution_options().get(SQLITE_BEGIN, "BEGIN")
    if statement:
        connection.exec_driver_sql(statement)


async def create_schema(engine: AsyncEngine, *, pgvector: bool = True) -> None:
    """Create every table (tests and benchmarks; deployments run the Alembic migrations).

    PostgreSQL: ``chunks.embedding`` becomes pgvector's ``vector`` where the server has the
    extension, as ``respgate migrate`` does, unless ``pgvector`` is False (then ``real[]``).
    Tables that exist are left as they are."""
    async with engine.begin() as conn:
        if not pgvector:
            await conn.execution_options(**{USE_PGVECTOR: False})
        await conn.run_sync(metadata.create_all)
