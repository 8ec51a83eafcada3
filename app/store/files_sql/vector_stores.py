"""``SqlVectorStores``: the vector stores part of ``SqlFileStore`` (``vector_stores``), one
tenant's.

``delete_vector_store`` also deletes the store's file rows and file batches; its chunks are
the ``VectorIndex``'s."""

from __future__ import annotations

from typing import Any

from sqlalchemy import Row, delete, insert, select, update

from app.files.ports import StoredVectorStore
from app.store.files_sql.base import PageRequest, SqlTables, page
from app.store.tables import vector_store_file_batches, vector_store_files, vector_stores


class SqlVectorStores(SqlTables):
    async def create_vector_store(self, store: StoredVectorStore) -> None:
        async with self._write() as conn:
            await conn.execute(
                insert(vector_stores).values(**_store_row(store), tenant=self._tenant)
            )

    async def get_vector_store(self, vector_store_id: str) -> StoredVectorStore | None:
        query = select(vector_stores).where(
            vector_stores.c.id == vector_store_id, self._owned(vector_stores)
        )
        async with self._read() as conn:
            row = (await conn.execute(query)).first()
        return None if row is None else _store(row)

    async def update_vector_store(self, store: StoredVectorStore) -> None:
        values = _store_row(store)
        del values["id"]
        async with self._write() as conn:
            await conn.execute(
                update(vector_stores)
                .where(vector_stores.c.id == store.id, self._owned(vector_stores))
                .values(**values)
            )

    async def list_vector_stores(
        self, *, after: str | None, limit: int, order: str
    ) -> list[StoredVectorStore]:
        request = PageRequest(after, limit, order)
        owned = self._owned(vector_stores)
        async with self._read() as conn:
            query = await page(
                conn,
                select(vector_stores).where(owned),
                vector_stores,
                vector_stores.c.id,
                request,
                owned,
            )
            rows = (await conn.execute(query)).all()
        return [_store(row) for row in rows]

    async def delete_vector_store(self, vector_store_id: str) -> bool:
        async with self._write() as conn:
            for table in (vector_store_files, vector_store_file_batches):
                await conn.execute(
                    delete(table).where(
                        table.c.vector_store_id == vector_store_id, self._owned(table)
                    )
                )
            result = await conn.execute(
                delete(vector_stores).where(
                    vector_stores.c.id == vector_store_id, self._owned(vector_stores)
                )
            )
            return bool(result.rowcount)


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
