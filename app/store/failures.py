"""Storage failures: the driver's errors that mean "the storage is unavailable", raised to the
rest of the gateway as ``app.errors.StorageUnavailableError`` (HTTP 503 ``storage_unavailable``,
a fixed message; the driver's error is its ``__cause__``, logged, never sent).

Unavailable means the operation could not be carried out whatever it was: the database cannot
be reached or its connection broke (PostgreSQL gone, a terminated backend, the pool timing
out), or it cannot write (disk full, read-only data directory or database, I/O error). Errors
that depend on the statement (a constraint, a syntax error) are left as they are: bugs.

Where the translation happens, once per path an error can take:

- every statement and connection through SQLAlchemy: a ``handle_error`` listener on the engine
  (``guard_engine``; ``SqlDatabase`` and ``SqlFileStores`` install it), which costs nothing
  until an error happens;
- the paths that bypass SQLAlchemy call ``translated``: the driver-level fast reads
  (``SqlDatabase.fetch``), the inline SQLite reads (``inline.py``), the SQLite writer thread
  (``sqlite_writer.py``) and the blob files (``blobs.py``).
"""

from __future__ import annotations

import errno
import sqlite3
from typing import Any

from sqlalchemy import event
from sqlalchemy import exc as sa_exc
from sqlalchemy.engine import ExceptionContext
from sqlalchemy.ext.asyncio import AsyncEngine

from app.errors import StorageUnavailableError

# SQLite's primary result codes for a database that cannot be used as it is, whatever the
# statement: full, read-only, I/O error, cannot open, corrupt or not a database, busy or
# locked past the busy timeout, out of memory, access refused by the file system.
_SQLITE_UNAVAILABLE = frozenset(
    {
        sqlite3.SQLITE_FULL,
        sqlite3.SQLITE_READONLY,
        sqlite3.SQLITE_IOERR,
        sqlite3.SQLITE_CANTOPEN,
        sqlite3.SQLITE_CORRUPT,
        sqlite3.SQLITE_NOTADB,
        sqlite3.SQLITE_BUSY,
        sqlite3.SQLITE_LOCKED,
        sqlite3.SQLITE_NOMEM,
        sqlite3.SQLITE_PERM,
        sqlite3.SQLITE_AUTH,
        sqlite3.SQLITE_PROTOCOL,
    }
)
# PostgreSQL SQLSTATE classes: 08 connection exception, 53 insufficient resources (disk full,
# out of memory, too many connections), 57 operator intervention (admin shutdown, a terminated
# backend, cannot connect now), 58 system error (I/O); and 25006, a read-only transaction (a
# standby, or ``default_transaction_read_only``); 55000 when connecting to a database that
# does not accept connections.
_PG_CLASSES = ("08", "53", "57", "58")
_PG_STATES = frozenset({"25006", "55000"})
_OS_ERRNOS = frozenset(
    {
        errno.ENOSPC,
        errno.EROFS,
        errno.EDQUOT,
        errno.EIO,
        errno.EACCES,
        errno.EPERM,
        errno.EMFILE,
        errno.ENFILE,
    }
)


def is_unavailable(exc: BaseException) -> bool:
    """Whether ``exc`` (or an exception it was raised from) says the storage is unavailable."""
    seen = 0
    current: BaseException | None = exc
    while current is not None and seen < 8:
        if _says_unavailable(current):
            return True
        seen += 1
        orig = getattr(current, "orig", None)
        nxt = orig if isinstance(orig, BaseException) and orig is not current else None
        current = nxt or current.__cause__
    return False


def _says_unavailable(exc: BaseException) -> bool:
    if isinstance(exc, StorageUnavailableError):
        return True
    if isinstance(exc, sa_exc.DBAPIError):
        return exc.connection_invalidated or isinstance(exc, sa_exc.InterfaceError)
    if isinstance(exc, (sa_exc.TimeoutError, sa_exc.DisconnectionError)):
        return True  # the pool found no connection in time, or a connection went
    if isinstance(exc, sqlite3.Error):
        code = getattr(exc, "sqlite_errorcode", None)
        return isinstance(code, int) and code & 0xFF in _SQLITE_UNAVAILABLE
    state = _sqlstate(exc)
    if state is not None:
        return state[:2] in _PG_CLASSES or state in _PG_STATES
    if type(exc).__module__.startswith("asyncpg") and type(exc).__name__ in (
        "InterfaceError",
        "ConnectionDoesNotExistError",
        "ConnectionFailureError",
    ):
        return True  # asyncpg's "connection is closed" family: no SQLSTATE
    if isinstance(exc, (ConnectionError, TimeoutError)):
        return True
    return isinstance(exc, OSError) and exc.errno in _OS_ERRNOS


def _sqlstate(exc: BaseException) -> str | None:
    state: Any = getattr(exc, "sqlstate", None) or getattr(exc, "pgcode", None)
    return state if isinstance(state, str) and len(state) == 5 else None


def translated(exc: BaseException) -> BaseException:
    """What to raise for ``exc``: a ``StorageUnavailableError`` (caused by it) when it says the
    storage is unavailable, else ``exc`` itself. ``raise translated(exc) from exc``."""
    if isinstance(exc, StorageUnavailableError) or not is_unavailable(exc):
        return exc
    return StorageUnavailableError()


def guard_engine(engine: AsyncEngine) -> None:
    """Make ``engine`` raise ``StorageUnavailableError`` for the errors that say the storage is
    unavailable (on any statement, and when connecting); once per engine."""
    sync_engine = engine.sync_engine
    if not event.contains(sync_engine, "handle_error", _on_error):
        event.listen(sync_engine, "handle_error", _on_error)


def _on_error(context: ExceptionContext) -> BaseException | None:
    if not isinstance(context.original_exception, Exception):
        # A cancellation (the task was cancelled mid-statement) or an exit stays what it is:
        # turned into an error, a cancelled loop would take it for a failure and go on.
        return None
    if context.is_disconnect or context.connection is None:
        # The connection broke, or none could be made (SQLAlchemy invalidates it either way).
        return StorageUnavailableError()
    original = context.original_exception
    if is_unavailable(original):
        return StorageUnavailableError()
    return None
