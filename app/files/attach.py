"""``StoreIngestion``: attaching files to a vector store and detaching them, over the
``IngestQueue`` (``files.ingest``).

Attaching records a file ``in_progress`` and hands it to the queue with its store's tenant;
the queue's tasks report their outcome back here (``record_outcome``), which records the file's
status and the store's usage through that tenant's catalog. All of it runs under the catalogs'
lock, and ingestion tasks are cancelled only under it, so an outcome is never half recorded.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from app.files.catalog import Catalogs, StoreCatalog
from app.files.ingest import IngestOptions, IngestOutcome, IngestQueue
from app.files.ports import BlobStore, Embedder, StoredVectorStoreFile
from app.protocol.json_types import JsonObject


@dataclass(frozen=True, slots=True)
class FileEntry:
    """One file to add to a store: its attributes (checked) and chunking strategy (as sent;
    a 400 about it names ``param``)."""

    file_id: str
    attributes: dict[str, Any]
    chunking_strategy: Any = None
    param: str = "chunking_strategy"


class StoreIngestion:
    def __init__(
        self,
        catalogs: Catalogs,
        blobs: BlobStore,
        embedder: Embedder,
        options: IngestOptions | None = None,
    ) -> None:
        self._catalogs = catalogs
        self.queue = IngestQueue(
            catalogs.files, blobs, catalogs.index, embedder, self._record_outcome, options
        )

    async def attach(
        self,
        catalog: StoreCatalog,
        vector_store_id: str,
        entries: Iterable[tuple[FileEntry, JsonObject]],
    ) -> list[StoredVectorStoreFile]:
        """Record each file (with its chunking) ``in_progress`` in the tenant's store (the
        caller found both, under the lock) and queue it, then refresh the store once. A file
        already in the store keeps its record unless its last ingestion failed or was
        cancelled."""
        files = catalog.files
        records: list[StoredVectorStoreFile] = []
        freed = 0
        attached = False
        for entry, chunking in entries:
            old = await files.get_vector_store_file(vector_store_id, entry.file_id)
            if old is not None and old.status in ("in_progress", "completed"):
                records.append(old)
                continue
            record = StoredVectorStoreFile(
                vector_store_id=vector_store_id,
                file_id=entry.file_id,
                created_at=catalog.now(),
                status="in_progress",
                last_error=None,
                attributes=entry.attributes,
                chunking_strategy=chunking,
                usage_bytes=0,
            )
            await files.put_vector_store_file(record)
            await self.queue.submit(vector_store_id, entry.file_id, chunking, tenant=catalog.tenant)
            freed += old.usage_bytes if old else 0
            attached = True
            records.append(record)
        if attached:
            await catalog.sync_store(vector_store_id, -freed)
        return records

    async def detach(
        self, catalog: StoreCatalog, vector_store_id: str, record: StoredVectorStoreFile
    ) -> None:
        """Take a file out of the tenant's store: its ingestion, its chunks, its record (under
        the lock)."""
        await self.queue.cancel(vector_store_id, record.file_id)
        await catalog.index.delete_file(vector_store_id, record.file_id)
        await catalog.files.delete_vector_store_file(vector_store_id, record.file_id)
        await catalog.sync_store(vector_store_id, -record.usage_bytes)

    async def resume_pending(self) -> int:
        """Ingest again the files a previous run left ``in_progress``, each as its store's
        tenant's (call at startup)."""
        resumed = 0
        async with self._catalogs.lock:
            for tenant, record in await self._catalogs.files.unfinished_ingestions():
                store_id, file_id = record.vector_store_id, record.file_id
                if not self.queue.is_pending(store_id, file_id):
                    await self.queue.submit(
                        store_id, file_id, record.chunking_strategy, tenant=tenant
                    )
                    resumed += 1
        return resumed

    async def _record_outcome(
        self, vector_store_id: str, file_id: str, outcome: IngestOutcome, *, tenant: str
    ) -> None:
        """An ingestion task's end (``IngestQueue``'s ``finish``), in its store's tenant."""
        catalog = self._catalogs.of(tenant)
        async with catalog.lock:
            record = await catalog.files.get_vector_store_file(vector_store_id, file_id)
            if record is None or record.status != "in_progress":
                # Detached (or its store deleted) while ingesting: leave no chunks behind.
                await catalog.index.delete_file(vector_store_id, file_id)
                return
            # The store's usage first: a client that sees the file completed (polling, as
            # the SDKs' ``*_and_poll`` do) then sees the store's usage with it.
            await catalog.sync_store(vector_store_id, outcome.usage_bytes)
            await catalog.files.put_vector_store_file(
                dataclasses.replace(
                    record,
                    status=outcome.status,
                    last_error=outcome.last_error,
                    usage_bytes=outcome.usage_bytes,
                )
            )
            await catalog.sync_store(vector_store_id, 0)
