"""``StoreIngestion``: attaching files to a vector store and detaching them, over the
``IngestQueue`` (``files.ingest``).

Attaching records a file ``in_progress`` and hands it to the queue; the queue's tasks report
their outcome back here (``record_outcome``), which records the file's status and the store's
usage. All of it runs under the catalog's lock, and ingestion tasks are cancelled only under it,
so an outcome is never half recorded.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from app.files.catalog import StoreCatalog
from app.files.ingest import IngestOptions, IngestOutcome, IngestQueue
from app.files.paging import all_records, all_stores
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
        catalog: StoreCatalog,
        blobs: BlobStore,
        embedder: Embedder,
        options: IngestOptions | None = None,
    ) -> None:
        self._catalog = catalog
        self.queue = IngestQueue(
            catalog.files, blobs, catalog.index, embedder, self._record_outcome, options
        )

    async def attach(
        self, vector_store_id: str, entries: Iterable[tuple[FileEntry, JsonObject]]
    ) -> list[StoredVectorStoreFile]:
        """Record each file (with its chunking) ``in_progress`` and queue it, then refresh the
        store once (under the lock). A file already in the store keeps its record unless its
        last ingestion failed or was cancelled."""
        files = self._catalog.files
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
                created_at=self._catalog.now(),
                status="in_progress",
                last_error=None,
                attributes=entry.attributes,
                chunking_strategy=chunking,
                usage_bytes=0,
            )
            await files.put_vector_store_file(record)
            await self.queue.submit(vector_store_id, entry.file_id, chunking)
            freed += old.usage_bytes if old else 0
            attached = True
            records.append(record)
        if attached:
            await self._catalog.sync_store(vector_store_id, -freed)
        return records

    async def detach(self, vector_store_id: str, record: StoredVectorStoreFile) -> None:
        """Take a file out of a store: its ingestion, its chunks, its record (under the lock)."""
        await self.queue.cancel(vector_store_id, record.file_id)
        await self._catalog.index.delete_file(vector_store_id, record.file_id)
        await self._catalog.files.delete_vector_store_file(vector_store_id, record.file_id)
        await self._catalog.sync_store(vector_store_id, -record.usage_bytes)

    async def resume_pending(self) -> int:
        """Ingest again the files a previous run left ``in_progress`` (call at startup)."""
        files = self._catalog.files
        resumed = 0
        async with self._catalog.lock:
            async for store in all_stores(files):
                async for record in all_records(files, store.id, status="in_progress"):
                    if not self.queue.is_pending(store.id, record.file_id):
                        await self.queue.submit(store.id, record.file_id, record.chunking_strategy)
                        resumed += 1
        return resumed

    async def _record_outcome(
        self, vector_store_id: str, file_id: str, outcome: IngestOutcome
    ) -> None:
        """An ingestion task's end (``IngestQueue``'s ``finish``)."""
        catalog = self._catalog
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
