"""``SqlVectorStoreFiles``: the files of a vector store and its file batches, the part of
``SqlFileStore`` on ``vector_store_files`` and ``vector_store_file_batches`` (one tenant's);
and ``unfinished_ingestions``, every tenant's files left ``in_progress`` (start-up)."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from sqlalchemy import Row, delete, func, select
from sqlalchemy.ext.asyncio import AsyncEngine

from app.files.ports import StoredFileBatch, StoredVectorStoreFile
from app.store.files_sql.base import PageRequest, SqlTables, page
from app.store.tables import files, vector_store_file_batches, vector_store_files

FILE_STATUSES = ("in_progress", "completed", "failed", "cancelled")


class SqlVectorStoreFiles(SqlTables):
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
                        self._owned(vector_store_files),
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
                vector_store_files.outerjoin(
                    files, (files.c.id == vector_store_files.c.file_id) & self._owned(files)
                )
            )
            .where(
                vector_store_files.c.vector_store_id == vector_store_id,
                vector_store_files.c.file_id.in_(wanted),
                self._owned(vector_store_files),
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
        in_store = (table.c.vector_store_id == vector_store_id) & self._owned(table)
        query = select(table).where(in_store)
        if status is not None:
            query = query.where(table.c.status == status)
        if file_ids is not None:
            query = query.where(table.c.file_id.in_(file_ids))
        request = PageRequest(after, limit, order)
        async with self._read() as conn:
            query = await page(conn, query, table, table.c.file_id, request, in_store)
            rows = (await conn.execute(query)).all()
        return [_store_file(row) for row in rows]

    async def delete_vector_store_file(self, vector_store_id: str, file_id: str) -> bool:
        async with self._write() as conn:
            result = await conn.execute(
                delete(vector_store_files).where(
                    vector_store_files.c.vector_store_id == vector_store_id,
                    vector_store_files.c.file_id == file_id,
                    self._owned(vector_store_files),
                )
            )
            return bool(result.rowcount)

    async def file_counts(self, vector_store_id: str) -> dict[str, int]:
        table = vector_store_files
        async with self._read() as conn:
            rows = (
                await conn.execute(
                    select(table.c.status, func.count())
                    .where(table.c.vector_store_id == vector_store_id, self._owned(table))
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
                        table.c.id == batch_id,
                        table.c.vector_store_id == vector_store_id,
                        self._owned(table),
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


async def unfinished_ingestions(engine: AsyncEngine) -> list[tuple[str, StoredVectorStoreFile]]:
    """Every tenant's vector store files still ``in_progress``, with their tenant, oldest
    first (one read, at start-up)."""
    table = vector_store_files
    query = (
        select(table)
        .where(table.c.status == "in_progress")
        .order_by(table.c.created_at, table.c.vector_store_id, table.c.file_id)
    )
    async with engine.connect() as conn:
        rows = (await conn.execute(query)).all()
    return [(row.tenant, _store_file(row)) for row in rows]


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
