"""``SqlFiles``: the files part of ``SqlFileStore`` (the ``files`` table), one tenant's.

``delete_file`` also detaches the file from every vector store (its ``vector_store_files``
rows, all of its tenant); its bytes are the ``BlobStore``'s and its chunks the
``VectorIndex``'s."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from sqlalchemy import Row, delete, insert, select

from app.files.ports import StoredFile
from app.store.files_sql.base import PageRequest, SqlTables, page
from app.store.tables import files, vector_store_files


class SqlFiles(SqlTables):
    async def add_file(self, file: StoredFile) -> None:
        async with self._write() as conn:
            await conn.execute(insert(files).values(**_file_row(file), tenant=self._tenant))

    async def get_file(self, file_id: str) -> StoredFile | None:
        query = select(files).where(files.c.id == file_id, self._owned(files))
        async with self._read() as conn:
            row = (await conn.execute(query)).first()
        return None if row is None else _file(row)

    async def existing_file_ids(self, file_ids: Iterable[str]) -> set[str]:
        wanted = list(dict.fromkeys(file_ids))
        if not wanted:
            return set()
        async with self._read() as conn:
            result = await conn.execute(
                select(files.c.id).where(files.c.id.in_(wanted), self._owned(files))
            )
            return {str(file_id) for file_id in result.scalars()}

    async def list_files(
        self, *, purpose: str | None, after: str | None, limit: int, order: str
    ) -> list[StoredFile]:
        owned = self._owned(files)
        query = select(files).where(owned)
        if purpose is not None:
            query = query.where(files.c.purpose == purpose)
        request = PageRequest(after, limit, order)
        async with self._read() as conn:
            query = await page(conn, query, files, files.c.id, request, owned)
            rows = (await conn.execute(query)).all()
        return [_file(row) for row in rows]

    async def delete_file(self, file_id: str) -> bool:
        async with self._write() as conn:
            await conn.execute(
                delete(vector_store_files).where(
                    vector_store_files.c.file_id == file_id, self._owned(vector_store_files)
                )
            )
            result = await conn.execute(
                delete(files).where(files.c.id == file_id, self._owned(files))
            )
            return bool(result.rowcount)


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
