"""``StoreFilesService``: the files of a vector store (``/v1/vector_stores/{id}/files``): add
one (it is ingested in the background), list, read, update its attributes, detach it, read its
chunks; and take a deleted file out of every store (the Files API's ``FileDetacher``). Each
is the caller's ``tenant``'s: another tenant's store or file is as unknown as a missing one."""

from __future__ import annotations

import dataclasses
from typing import Any

from app.core.ports import Page
from app.files.attach import FileEntry, StoreIngestion
from app.files.catalog import Catalogs
from app.files.checks import chunking_or_400
from app.files.paging import Cursor, all_stores, window
from app.files.ports import FileStore, StoredVectorStoreFile
from app.files.wire import deleted, file_object
from app.protocol.json_types import JsonObject


async def list_store_files(
    files: FileStore,
    vector_store_id: str,
    cursor: Cursor,
    *,
    status: str | None,
    file_ids: list[str] | None,
) -> Page:
    """A page of a store's files (with ``status``, among ``file_ids``) as OpenAI objects."""

    async def fetch(after: str | None, limit: int, order: str) -> list[StoredVectorStoreFile]:
        return await files.list_vector_store_files(
            vector_store_id,
            status=status,
            after=after,
            limit=limit,
            order=order,
            file_ids=file_ids,
        )

    rows, has_more = await window(fetch, cursor, lambda r: r.file_id)
    return Page(items=[file_object(r) for r in rows], has_more=has_more)


class StoreFilesService:
    def __init__(self, catalogs: Catalogs, ingestion: StoreIngestion) -> None:
        self._catalogs = catalogs
        self._ingestion = ingestion

    async def add_file(self, vector_store_id: str, entry: FileEntry, *, tenant: str) -> JsonObject:
        catalog = self._catalogs.of(tenant)
        chunking = chunking_or_400(entry.chunking_strategy, entry.param)
        await catalog.require_active_store(vector_store_id)
        await catalog.require_files([entry.file_id], "file_id")
        async with catalog.lock:
            await catalog.require_store(vector_store_id)
            (record,) = await self._ingestion.attach(catalog, vector_store_id, [(entry, chunking)])
        return file_object(record)

    async def list_files(
        self, vector_store_id: str, cursor: Cursor, *, status: str | None, tenant: str
    ) -> Page:
        catalog = self._catalogs.of(tenant)
        await catalog.require_store(vector_store_id)
        return await list_store_files(
            catalog.files, vector_store_id, cursor, status=status, file_ids=None
        )

    async def get_file(self, vector_store_id: str, file_id: str, *, tenant: str) -> JsonObject:
        catalog = self._catalogs.of(tenant)
        return file_object(await catalog.require_record(vector_store_id, file_id))

    async def update_file(
        self, vector_store_id: str, file_id: str, attributes: dict[str, Any], *, tenant: str
    ) -> JsonObject:
        catalog = self._catalogs.of(tenant)
        async with catalog.lock:
            record = await catalog.require_record(vector_store_id, file_id)
            record = dataclasses.replace(record, attributes=attributes)
            await catalog.files.put_vector_store_file(record)
        return file_object(record)

    async def remove_file(self, vector_store_id: str, file_id: str, *, tenant: str) -> JsonObject:
        """Detach a file from the store: its chunks go, the file stays."""
        catalog = self._catalogs.of(tenant)
        async with catalog.lock:
            record = await catalog.require_record(vector_store_id, file_id)
            await self._ingestion.detach(catalog, vector_store_id, record)
        return deleted(file_id, "vector_store.file.deleted")

    async def file_content(self, vector_store_id: str, file_id: str, *, tenant: str) -> JsonObject:
        catalog = self._catalogs.of(tenant)
        await catalog.require_record(vector_store_id, file_id)
        chunks = await catalog.index.file_chunks(vector_store_id, file_id)
        return {
            "object": "vector_store.file_content.page",
            "data": [{"type": "text", "text": text} for text in chunks],
            "has_more": False,
            "next_page": None,
        }

    async def forget_file(self, file_id: str, *, tenant: str) -> None:
        """A file of ``tenant`` is being deleted: take it out of every store of the tenant (the
        only ones it can be in: ``files.files.FileDetacher``)."""
        catalog = self._catalogs.of(tenant)
        async with catalog.lock:
            await self._ingestion.queue.cancel_file(file_id)
            async for store in all_stores(catalog.files):
                record = await catalog.files.get_vector_store_file(store.id, file_id)
                if record is not None:
                    await self._ingestion.detach(catalog, store.id, record)
