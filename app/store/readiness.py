"""Whether the SQL store can serve, for ``GET /ready`` (``core.ports.StoreReadiness``).

One cheap round trip through the store's engine, bounded by ``READY_TIMEOUT``: ``SELECT 1`` on
SQLite, the session's ``transaction_read_only`` on PostgreSQL (a standby, or a database set
read-only, cannot store anything). An embedded SQLite file is also checked where a query cannot
tell: whether its file and directory may be written (a read-only mount says no even to root)
and whether its file system has room left. The answer is a fixed reason, never the driver's
error text; the error itself is logged.
"""

from __future__ import annotations

import asyncio
import logging
import os
from pathlib import Path

from sqlalchemy import text

from app.errors import StorageUnavailableError
from app.store.engine import SQLITE_BEGIN
from app.store.inline import inline_database_path
from app.store.sql_database import SqlDatabase

logger = logging.getLogger(__name__)

# Under what a readiness probe waits (Kubernetes: 1 s by default); a pool that has no free
# connection for this long is reported as not answering too.
READY_TIMEOUT = 1.0
# Less room than this on the SQLite file's file system: a write may fail any moment.
MIN_FREE_BYTES = 1024 * 1024

NOT_ANSWERING = "the database is not answering"
READ_ONLY_DATABASE = "the database is read-only"
READ_ONLY_FILE = "the database file or its directory is read-only"
DISK_FULL = "the database's disk is full"


async def readiness_problem(db: SqlDatabase) -> str | None:
    """None when ``db`` answers and can write, else why not."""
    query = "SELECT 1" if db.is_sqlite else "SELECT current_setting('transaction_read_only')"
    engine = db.engine.execution_options(**{SQLITE_BEGIN: None})
    try:
        async with asyncio.timeout(READY_TIMEOUT):
            for attempt in range(2):
                try:
                    async with engine.connect() as conn:
                        answer = await conn.scalar(text(query))
                    break
                except StorageUnavailableError:
                    # A pooled connection the server closed (a restart) fails once; SQLAlchemy
                    # then drops the pool, and the next connection is a fresh one.
                    if attempt:
                        raise
    except Exception as exc:  # TimeoutError, StorageUnavailableError, anything: not ready
        logger.warning("readiness: the store does not answer: %s", _root_cause(exc))
        return NOT_ANSWERING
    if answer == "on":
        return READ_ONLY_DATABASE
    path = inline_database_path(db.engine.url) if db.is_sqlite else None
    return None if path is None else _file_problem(Path(path))


def _root_cause(exc: BaseException) -> str:
    while exc.__cause__ is not None:
        exc = exc.__cause__
    return f"{type(exc).__name__}: {exc}"


def _file_problem(path: Path) -> str | None:
    """A SQLite file's: writable (with its directory, where the journal goes), and room left."""
    for target in (path, path.parent):
        if target.exists() and not os.access(target, os.W_OK):
            return READ_ONLY_FILE
    stat = os.statvfs(path.parent)
    # Root may write into the blocks reserved for it.
    free_blocks = stat.f_bfree if os.geteuid() == 0 else stat.f_bavail
    if free_blocks * stat.f_frsize < MIN_FREE_BYTES:
        return DISK_FULL
    return None
