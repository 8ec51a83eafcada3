"""``SqlFileStore``: the ``FileStore`` port on SQLAlchemy Core (SQLite or PostgreSQL).

Metadata only: a file's bytes live in a ``BlobStore`` (``store.blobs``) and the chunks of a
vector store's files in the ``VectorIndex`` (``app.store.vector_index``), which deletes them itself.

- Lists page like OpenAI's list endpoints: ordered by ``created_at`` then id (descending for
  ``order="desc"``), ``after`` is the id of the last object of the previous page
  (``UnknownCursorError`` when it does not exist), and ``limit + 1`` rows come back so that
  the caller can tell ``has_more``.
- Every write is one transaction; on SQLite it takes the write lock first (``BEGIN
  IMMEDIATE``, as in ``store.sql``). These are not hot paths: plain SQLAlchemy statements.
- ``delete_file`` also detaches the file from every vector store; ``delete_vector_store``
  deletes its file rows and batches.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Iterable, Sequence
from typing import Any

from sqlalchemy import (
    ColumnElement,
    Row,
    Select,
    Table,
    and_,
    delete,
    func,
    insert,
    or_,
    select,
    update,
)
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from app.core.store_errors import UnknownCursorError
from app.files.ports import StoredFile, StoredFileBatch, StoredVectorStore, StoredVectorStoreFile
from app.store.engine import SQLITE_BEGIN
from app.store.tables import files, vector_store_file_batches, vector_store_files, vector_stores

FILE_STATUSES = ("in_progress", "completed", "failed", "cancelled")


class SqlFileStore:
    """Files, vector stores and their files on an engine from ``create_engine_for``.

    The engine is the caller's (it may be shared with the response store): ``SqlFileStore``
    never disposes of it."""

    def __init__(self, engine: AsyncEngine) -> None:
        self._engine = engine
        self._dialect = engine.dialect.name
        if self._dialect not in ("sqlite", "postgresql"):
            raise ValueError(f"unsupported dialect {self._dialect!r}")
        self._writer = engine.execution_options(**{SQLITE_BEGIN: "BEGIN IMMEDIATE"})

    async def aclose(self) -> None:
        """Nothing to release: the engine is the caller's."""

    @contextlib.asynccontextmanager
    async def _write(self) -> AsyncIterator[AsyncConnection]:
        async with self._writer.begin() as conn:
            yield conn

    @contextlib.asynccontextmanager
    async def _read(self) -> AsyncIterator[AsyncConnection]:
        async with self._engine.connect() as conn:
            yield conn

    def _upsert(self, table: Table, row: dict[str, Any], keys: Sequence[str]) -> Any:
        """``INSERT ... ON CONFLICT (keys) DO UPDATE`` setting every other column."""
        dialect_insert = postgresql.insert if self._dialect == "postgresql" else sqlite.insert
        statement = dialect_insert(table).values(**row)
        changed = {name: statement.excluded[name] for name in row if name not in keys}
        return statement.on_conflict_do_update(index_elements=list(keys), set_=changed)

    # ---------------------------------------------------------------- files

    async def add_file(self, file: StoredFile) -> None:
        async with self._write() as conn:
            await conn.execute(insert(files).values(**_file_row(file)))

    async def get_file(self, file_id: str) -> StoredFile | None:
        async with self._read() as conn:
            row = (await conn.execute(select(files).where(files.c.id == file_id))).first()
        return None if row is None else _file(row)

    async def existing_file_ids(self, file_ids: Iterable[str]) -> set[str]:
        wanted = list(dict.fromkeys(file_ids))
        if not wanted:
            return set()
        async with self._read() as conn:
            result = await conn.execute(select(files.c.id).where(files.c.id.in_(wanted)))
            return {str(file_id) for file_id in result.scalars()}

    async def list_files(
        self, *, purpose: str | None, after: str | None, limit: int, order: str
    ) -> list[StoredFile]:
        query = select(files)
        if purpose is not None:
            query = query.where(files.c.purpose == purpose)
        async with self._read() as conn:
            query = await _page(conn, query, files, files.c.id, after, limit, order)
            rows = (await conn.execute(query)).all()
        return [_file(row) for row in rows]

    async def delete_file(self, file_id: str) -> bool:
        async with self._write() as conn:
            await conn.execute(
                delete(vector_store_files).where(vector_store_files.c.file_id == file_id)
            )
            result = await conn.execute(delete(files).where(files.c.id == file_id))
            return bool(result.rowcount)

    # ---------------------------------------------------------------- vector stores

    async def create_vector_store(self, store: StoredVectorStore) -> None:
        async with self._write() as conn:
            await conn.execute(insert(vector_stores).values(**_store_row(store)))

    async def get_vector_store(self, vector_store_id: str) -> StoredVectorStore | None:
        async with self._read() as conn:
            row = (
                await conn.execute(
                    select(vector_stores).where(vector_stores.c.id == vector_store_id)
                )
            ).first()
        return None if row is None else _store(row)

    async def update_vector_store(self, store: StoredVectorStore) -> None:
        values = _store_row(store)
        del values["id"]
        async with self._write() as conn:
            await conn.execute(
                update(vector_stores).where(vector_stores.c.id == store.id).values(**values)
            )

    async def list_vector_stores(
        self, *, after: str | None, limit: int, order: str
    ) -> list[StoredVectorStore]:
        async with self._read() as conn:
            query = await _page(
                conn, select(vector_stores), vector_stores, vector_stores.c.id, after, limit, order
            )
            rows = (await conn.execute(query)).all()
        return [_store(row) for row in rows]

    async def delete_vector_store(self, vector_store_id: str) -> bool:
        async with self._write() as conn:
            await conn.execute(
                delete(vector_store_files).where(
                    vector_store_files.c.vector_store_id == vector_store_id
                )
            )
            await conn.execute(
                delete(vector_store_file_batches).where(
                    vector_store_file_batches.c.vector_store_id == vector_store_id
                )
            )
            result = await conn.execute(
                delete(vector_stores).where(vector_stores.c.id == vector_store_id)
            )
            return bool(result.rowcount)

    # ---------------------------------------------------------------- vector store files

    async def put_vector_store_file(self, record: StoredVectorStoreFile) -> None:
        row = {
            "vector_store_id": record.vector_store_id,
            "file_id": record.file_id,
            "created_at": record.created_at,
            "status": record.status,
            "last_error": record.last_error,
            "attributes": dict(record.attributes),
            "chunking_strategy": record.chunking_strategy,
            "usage_bytes": record.usage_bytes,
        }
        async with self._write() as conn:
            await conn.execute(
                self._upsert(vector_store_files, row, ("vector_store_id", "file_id"))
            )

    async def get_vector_store_file(
        self, vector_store_id: str, file_id: str
    ) -> StoredVectorStoreFile | None:
        async with self._read() as conn:
            row = (
                await conn.execute(
                    select(vector_store_files).where(
                        vector_store_files.c.vector_store_id == vector_store_id,
                        vector_store_files.c.file_id == file_id,
                    )
                )
            ).first()
        return None if row is None else _store_file(row)

    async def named_vector_store_files(
        self, vector_store_id: str, file_ids: Iterable[str]
    ) -> dict[str, tuple[StoredVectorStoreFile, str]]:
        wanted = list(dict.fromkeys(file_ids))
        if not wanted:
            return {}
        query = (
            select(vector_store_files, files.c.filename)
            .select_from(
                vector_store_files.outerjoin(files, files.c.id == vector_store_files.c.file_id)
            )
            .where(
                vector_store_files.c.vector_store_id == vector_store_id,
                vector_store_files.c.file_id.in_(wanted),
            )
        )
        async with self._read() as conn:
            rows = (await conn.execute(query)).all()
        return {row.file_id: (_store_file(row), row.filename or "") for row in rows}

    async def list_vector_store_files(
        self,
        vector_store_id: str,
        *,
        status: str | None,
        after: str | None,
        limit: int,
        order: str,
        file_ids: list[str] | None = None,
    ) -> list[StoredVectorStoreFile]:
        table = vector_store_files
        in_store = table.c.vector_store_id == vector_store_id
        query = select(table).where(in_store)
        if status is not None:
            query = query.where(table.c.status == status)
        if file_ids is not None:
            query = query.where(table.c.file_id.in_(file_ids))
        async with self._read() as conn:
            query = await _page(conn, query, table, table.c.file_id, after, limit, order, in_store)
            rows = (await conn.execute(query)).all()
        return [_store_file(row) for row in rows]

    async def delete_vector_store_file(self, vector_store_id: str, file_id: str) -> bool:
        async with self._write() as conn:
            result = await conn.execute(
                delete(vector_store_files).where(
                    vector_store_files.c.vector_store_id == vector_store_id,
                    vector_store_files.c.file_id == file_id,
                )
            )
            return bool(result.rowcount)

    async def file_counts(self, vector_store_id: str) -> dict[str, int]:
        table = vector_store_files
        async with self._read() as conn:
            rows = (
                await conn.execute(
                    select(table.c.status, func.count())
                    .where(table.c.vector_store_id == vector_store_id)
                    .group_by(table.c.status)
                )
            ).all()
        counts = dict.fromkeys(FILE_STATUSES, 0)
        for status, count in rows:
            counts[status] = int(count)
        counts["total"] = sum(int(count) for _status, count in rows)
        return counts

    # ---------------------------------------------------------------- file batches

    async def put_file_batch(self, batch: StoredFileBatch) -> None:
        row = {
            "id": batch.id,
            "vector_store_id": batch.vector_store_id,
            "created_at": batch.created_at,
            "status": batch.status,
            "file_ids": list(batch.file_ids),
        }
        async with self._write() as conn:
            await conn.execute(self._upsert(vector_store_file_batches, row, ("id",)))

    async def get_file_batch(self, vector_store_id: str, batch_id: str) -> StoredFileBatch | None:
        table = vector_store_file_batches
        async with self._read() as conn:
            row = (
                await conn.execute(
                    select(table).where(
                        table.c.id == batch_id, table.c.vector_store_id == vector_store_id
                    )
                )
            ).first()
        if row is None:
            return None
        return StoredFileBatch(
            id=row.id,
            vector_store_id=row.vector_store_id,
            created_at=int(row.created_at),
            status=row.status,
            file_ids=list(row.file_ids),
        )


async def _page(
    conn: AsyncConnection,
    query: Select[Any],
    table: Table,
    key: Any,
    after: str | None,
    limit: int,
    order: str,
    scope: ColumnElement[bool] | None = None,
) -> Select[Any]:
    """``query`` ordered by (created_at, ``key``), past ``after``, ``limit + 1`` rows.

    ``after`` names a row of ``table`` (within ``scope``); ``UnknownCursorError`` when there
    is none."""
    created_at = table.c.created_at
    descending = order == "desc"
    if after is not None:
        lookup = select(created_at).where(key == after)
        if scope is not None:
            lookup = lookup.where(scope)
        cursor = (await conn.execute(lookup)).first()
        if cursor is None:
            raise UnknownCursorError(after)
        (cursor_created_at,) = cursor
        if descending:
            past = or_(
                created_at < cursor_created_at, and_(created_at == cursor_created_at, key < after)
            )
        else:
            past = or_(
                created_at > cursor_created_at, and_(created_at == cursor_created_at, key > after)
            )
        query = query.where(past)
    ordering = (created_at.desc(), key.desc()) if descending else (created_at, key)
    return query.order_by(*ordering).limit(limit + 1)


def _file_row(file: StoredFile) -> dict[str, Any]:
    return {
        "id": file.id,
        "filename": file.filename,
        "purpose": file.purpose,
        "bytes": file.bytes,
        "created_at": file.created_at,
        "expires_at": file.expires_at,
        "status": file.status,
    }


def _file(row: Row[Any]) -> StoredFile:
    return StoredFile(
        id=row.id,
        filename=row.filename,
        purpose=row.purpose,
        bytes=int(row.bytes),
        created_at=int(row.created_at),
        expires_at=None if row.expires_at is None else int(row.expires_at),
        status=row.status,
    )


def _store_row(store: StoredVectorStore) -> dict[str, Any]:
    return {
        "id": store.id,
        "name": store.name,
        "created_at": store.created_at,
        "metadata": dict(store.metadata),
        "expires_after": store.expires_after,
        "expires_at": store.expires_at,
        "last_active_at": store.last_active_at,
        "status": store.status,
        "usage_bytes": store.usage_bytes,
    }


def _store(row: Row[Any]) -> StoredVectorStore:
    return StoredVectorStore(
        id=row.id,
        name=row.name,
        created_at=int(row.created_at),
        metadata=dict(row.metadata),
        expires_after=row.expires_after,
        expires_at=None if row.expires_at is None else int(row.expires_at),
        last_active_at=int(row.last_active_at),
        status=row.status,
        usage_bytes=int(row.usage_bytes),
    )


def _store_file(row: Row[Any]) -> StoredVectorStoreFile:
    return StoredVectorStoreFile(
        vector_store_id=row.vector_store_id,
        file_id=row.file_id,
        created_at=int(row.created_at),
        status=row.status,
        last_error=row.last_error,
        attributes=dict(row.attributes),
        chunking_strategy=row.chunking_strategy,
        usage_bytes=int(row.usage_bytes),
    )
