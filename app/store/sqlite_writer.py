"""Whole write transactions on one ``sqlite3`` connection, in one thread hop each.

Through SQLAlchemy on aiosqlite every statement of a transaction (``BEGIN``, each insert,
``COMMIT``) is its own trip to aiosqlite's thread and back; a stored response took ~2 ms of
CPU at c=1 that way. Here the whole transaction runs as one function on a dedicated writer
thread (bench/README.md, "Store write").
"""

from __future__ import annotations

import asyncio
import contextlib
import sqlite3
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

from sqlalchemy import exc as sa_exc

from app.core.store_errors import ConversationNotFoundError
from app.store.failures import translated

T = TypeVar("T")

INSERT_ITEM = (
    "INSERT INTO items (tenant, id, type, schema_version, created_at, payload) "
    "VALUES (?, ?, ?, ?, ?, ?) ON CONFLICT DO NOTHING"
)
INSERT_RESPONSE = (
    "INSERT INTO responses (id, created_at, status, model, previous_response_id, "
    "conversation_id, checkpoint_ids, input_item_ids, response, root_id, tenant) "
    "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
)
RESERVE_POSITIONS = (
    "UPDATE conversations SET next_position = next_position + ?, last_active_at = ? "
    "WHERE id = ? AND tenant = ? RETURNING next_position"
)
INSERT_CONVERSATION_ITEM = (
    "INSERT INTO conversation_items (conversation_id, position, item_id, tenant) "
    "VALUES (?, ?, ?, ?)"
)


class SqliteWriter:
    """A ``sqlite3`` connection owned by one thread; ``transaction`` runs a function in
    ``BEGIN IMMEDIATE`` … ``COMMIT`` (``ROLLBACK`` when it raises) on that thread."""

    def __init__(self, path: str) -> None:
        self._path = path
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="respgate-sqlite")
        self._connection: sqlite3.Connection | None = None
        self._closed = False

    def _connect(self) -> sqlite3.Connection:
        if self._connection is None:
            connection = sqlite3.connect(
                self._path, timeout=10.0, isolation_level=None, check_same_thread=False
            )
            connection.execute("PRAGMA journal_mode=WAL")
            connection.execute("PRAGMA synchronous=NORMAL")
            connection.execute("PRAGMA foreign_keys=ON")
            self._connection = connection
        return self._connection

    def _run(self, body: Callable[[sqlite3.Connection], T]) -> T:
        connection = self._connect()
        connection.execute("BEGIN IMMEDIATE")
        try:
            result = body(connection)
            connection.execute("COMMIT")
        except BaseException:
            # SQLite may have rolled back already (a full disk, an I/O error): then there is
            # nothing to roll back, and the error to report is the first one.
            if connection.in_transaction:
                with contextlib.suppress(sqlite3.Error):
                    connection.execute("ROLLBACK")
            raise
        return result

    async def transaction(self, body: Callable[[sqlite3.Connection], T]) -> T:
        """Run ``body`` in one transaction; driver errors surface as SQLAlchemy's, as they do
        from the rest of the store, and those saying the storage is unavailable (disk full,
        read-only) as ``StorageUnavailableError`` (``failures.py``)."""
        loop = asyncio.get_running_loop()
        try:
            return await loop.run_in_executor(self._executor, self._run, body)
        except sqlite3.IntegrityError as exc:
            raise sa_exc.IntegrityError("sqlite write transaction", None, exc) from exc
        except sqlite3.Error as exc:
            unavailable = translated(exc)
            if unavailable is not exc:
                raise unavailable from exc
            if isinstance(exc, sqlite3.OperationalError):
                raise sa_exc.OperationalError("sqlite write transaction", None, exc) from exc
            raise

    async def aclose(self) -> None:
        """Close the connection and stop the thread; calling it again does nothing."""
        if self._closed:
            return
        self._closed = True

        def close() -> None:
            if self._connection is not None:
                self._connection.close()
                self._connection = None

        loop = asyncio.get_running_loop()
        await loop.run_in_executor(self._executor, close)
        self._executor.shutdown(wait=True)


def write_saves(
    connection: sqlite3.Connection,
    items: Sequence[tuple[Any, ...]],
    responses: Sequence[tuple[Any, ...]],
    appends: dict[tuple[str, str], list[str]],
) -> None:
    """Insert items (if absent) and responses, and append to conversations (by tenant and
    conversation id: another tenant's conversation is not found): one batch."""
    if items:
        connection.executemany(INSERT_ITEM, items)
    connection.executemany(INSERT_RESPONSE, responses)
    now = int(time.time())
    for tenant, conversation_id in sorted(appends):
        item_ids = appends[tenant, conversation_id]
        reserve = (len(item_ids), now, conversation_id, tenant)
        row = connection.execute(RESERVE_POSITIONS, reserve).fetchone()
        if row is None:
            raise ConversationNotFoundError(conversation_id)
        start = int(row[0]) - len(item_ids)
        connection.executemany(
            INSERT_CONVERSATION_ITEM,
            [
                (conversation_id, start + offset, item_id, tenant)
                for offset, item_id in enumerate(item_ids)
            ],
        )
