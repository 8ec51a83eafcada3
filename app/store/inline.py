"""SQLite reads run inline, on a plain ``sqlite3`` connection of the calling thread.

aiosqlite runs every call on the connection's own thread; each call is a round trip between
threads, and a busy event loop makes that thread wait for the GIL and a CPU. For the store's
small indexed reads that round trip costs 10-100x the read itself: ``bench/store_bench.py``
measured 1.3k-3.8k rehydrations (``get_response`` + ``load_items``) per second at c=32
through aiosqlite, and 30k+ per second inline, on the same 2-CPU machine.

An inline read blocks the event loop for as long as SQLite takes: tens of microseconds for a
response row or a few items, ~1 ms for 1,000 items (about what decoding their JSON takes in
the loop anyway). Callers send bigger reads to aiosqlite's thread instead. The connection is
``query_only`` and never waits for a lock (busy timeout 0): in WAL mode readers are not
blocked by writers, and in the rare cases where SQLite reports the database busy (recovery,
an exclusive-mode writer), ``fetch`` returns ``None`` and the caller reads through aiosqlite,
which waits with ``busy_timeout`` off the loop.
"""

from __future__ import annotations

import sqlite3
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from sqlalchemy.engine import URL

from app.store.failures import translated


def inline_database_path(url: URL) -> str | None:
    """The file an inline reader may open, or None (in-memory or URI databases)."""
    database = url.database or ""
    if database in ("", ":memory:") or database.startswith("file:") or url.query:
        return None
    return str(Path(database).expanduser())


class InlineSqliteReader:
    """One read-only ``sqlite3`` connection per thread that reads through it."""

    def __init__(self, path: str) -> None:
        self._path = path
        self._local = threading.local()
        self._connections: list[sqlite3.Connection] = []
        self._guard = threading.Lock()
        self._closed = False

    def fetch(self, sql: str, args: Sequence[Any]) -> list[Any] | None:
        """The rows, or None when SQLite reports the database busy or locked."""
        if self._closed:
            return None
        try:
            return self._connection().execute(sql, args).fetchall()
        except sqlite3.OperationalError as exc:
            if exc.sqlite_errorcode in (sqlite3.SQLITE_BUSY, sqlite3.SQLITE_LOCKED):
                return None
            if exc.sqlite_errorcode & 0xFF == sqlite3.SQLITE_READONLY:
                raise  # a write on this query_only connection: a bug, not the storage
            raise translated(exc) from exc
        except sqlite3.DatabaseError as exc:  # corrupt, not a database
            raise translated(exc) from exc

    def close(self) -> None:
        with self._guard:
            self._closed = True
            connections, self._connections = self._connections, []
        for connection in connections:
            connection.close()

    def _connection(self) -> sqlite3.Connection:
        connection: sqlite3.Connection | None = getattr(self._local, "connection", None)
        if connection is None:
            connection = sqlite3.connect(
                self._path, timeout=0, isolation_level=None, check_same_thread=False
            )
            connection.execute("PRAGMA query_only=ON")
            with self._guard:
                self._connections.append(connection)
            self._local.connection = connection
        return connection
