"""``FileBatchesService``: file batches of a vector store
(``/v1/vector_stores/{id}/file_batches``): create (each file ingested in the background), read,
cancel, list a batch's files. A batch's status and counts are derived from its files. Each is
the caller's ``tenant``'s: another tenant's store, batch or file is as unknown as a missing one."""

from __future__ import annotations

import dataclasses

from app.core.ids import uuid7_hex
from app.core.ports import Page
from app.files.attach import FileEntry, StoreIngestion
from app.files.catalog import Catalogs, StoreCatalog
from app.files.checks import chunking_or_400
from app.files.paging import Cursor, all_records
from app.files.ports import StoredFileBatch, StoredVectorStoreFile
from app.files.store_files import list_store_files
from app.files.wire import batch_object
from app.protocol.json_types import JsonObject


class FileBatchesService:
    def __init__(self, catalogs: Catalogs, ingestion: StoreIngestion) -> None:
        self._catalogs = catalogs
        self._ingestion = ingestion

    async def create_batch(
        self, vector_store_id: str, entries: list[FileEntry], *, tenant: str
    ) -> JsonObject:
        catalog = self._catalogs.of(tenant)
        chunkings = [chunking_or_400(e.chunking_strategy, e.param) for e in entries]
        await catalog.require_active_store(vector_store_id)
        await catalog.require_files([e.file_id for e in entries], "file_ids")
        async with catalog.lock:
            await catalog.require_store(vector_store_id)
            batch = StoredFileBatch(
                id=f"vsfb_{uuid7_hex()}",
                vector_store_id=vector_store_id,
                created_at=catalog.now(),
                status="in_progress",
                file_ids=list(dict.fromkeys(e.file_id for e in entries)),
            )
            await catalog.files.put_file_batch(batch)
            entries_with_chunking = zip(entries, chunkings, strict=True)
            await self._ingestion.attach(catalog, vector_store_id, entries_with_chunking)
        return await _batch_object(catalog, batch)

    async def get_batch(self, vector_store_id: str, batch_id: str, *, tenant: str) -> JsonObject:
        catalog = self._catalogs.of(tenant)
        batch = await catalog.require_batch(vector_store_id, batch_id)
        return await _batch_object(catalog, batch)

    async def cancel_batch(self, vector_store_id: str, batch_id: str, *, tenant: str) -> JsonObject:
        """Stop the batch's files that are still being ingested (they become ``cancelled``);
        a batch that has finished stays as it is."""
        catalog = self._catalogs.of(tenant)
        async with catalog.lock:
            batch = await catalog.require_batch(vector_store_id, batch_id)
            pending = await _records(catalog, batch, status="in_progress")
            for record in pending:
                await self._ingestion.queue.cancel(vector_store_id, record.file_id)
                await catalog.index.delete_file(vector_store_id, record.file_id)
                cancelled = dataclasses.replace(record, status="cancelled", usage_bytes=0)
                await catalog.files.put_vector_store_file(cancelled)
            if pending:
                batch = dataclasses.replace(batch, status="cancelled")
                await catalog.files.put_file_batch(batch)
                await catalog.sync_store(vector_store_id, 0)
        return await _batch_object(catalog, batch)

    async def list_batch_files(
        self,
        vector_store_id: str,
        batch_id: str,
        cursor: Cursor,
        *,
        status: str | None,
        tenant: str,
    ) -> Page:
        catalog = self._catalogs.of(tenant)
        batch = await catalog.require_batch(vector_store_id, batch_id)
        return await list_store_files(
            catalog.files, vector_store_id, cursor, status=status, file_ids=batch.file_ids
        )


async def _records(
    catalog: StoreCatalog, batch: StoredFileBatch, *, status: str | None = None
) -> list[StoredVectorStoreFile]:
    return [
        record
        async for record in all_records(
            catalog.files, batch.vector_store_id, status=status, file_ids=batch.file_ids
        )
    ]


async def _batch_object(catalog: StoreCatalog, batch: StoredFileBatch) -> JsonObject:
    return batch_object(batch, await _records(catalog, batch))
