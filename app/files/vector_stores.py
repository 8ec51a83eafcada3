"""``VectorStoresService``: the Vector Stores API (``/v1/vector_stores``) over a FileStore, a
BlobStore, a VectorIndex and an Embedder, as one service per concept sharing one ``Catalogs``
(every tenant's records, the lock, the clock; each call is one tenant's: ``Catalogs.of``) and
one ``StoreIngestion`` (the background queue):

- ``stores`` (``files.stores.StoresService``): the vector stores;
- ``store_files`` (``files.store_files.StoreFilesService``): their files, and a deleted file's
  removal from every store (the Files API's ``FileDetacher``);
- ``batches`` (``files.batches.FileBatchesService``): file batches;
- ``searcher`` (``files.search.SearchService``): search (the file_search tool's too).

This class builds them and owns the ingestion's lifecycle (resume at start-up, wait, close).
"""

from __future__ import annotations

import time
from collections.abc import Callable

from app.files.attach import StoreIngestion
from app.files.batches import FileBatchesService
from app.files.catalog import Catalogs
from app.files.ingest import IngestOptions, IngestQueue
from app.files.ports import BlobStore, Embedder, FileStores, VectorIndexes
from app.files.search import SearchService
from app.files.store_files import StoreFilesService
from app.files.stores import StoresService


class VectorStoresService:
    def __init__(
        self,
        files: FileStores,
        blobs: BlobStore,
        index: VectorIndexes,
        embedder: Embedder,
        clock: Callable[[], float] = time.time,
        *,
        ingest: IngestOptions | None = None,
    ) -> None:
        catalogs = Catalogs(files, index, clock)
        self._ingestion = StoreIngestion(catalogs, blobs, embedder, ingest)
        self.stores = StoresService(catalogs, self._ingestion)
        self.store_files = StoreFilesService(catalogs, self._ingestion)
        self.batches = FileBatchesService(catalogs, self._ingestion)
        self.searcher = SearchService(catalogs, embedder)

    @property
    def ingest(self) -> IngestQueue:
        """The background ingestion tasks."""
        return self._ingestion.queue

    async def resume_pending(self) -> int:
        """Ingest again the files a previous run left ``in_progress``, each in its store's
        tenant (call at startup)."""
        return await self._ingestion.resume_pending()

    async def wait_idle(self) -> None:
        """Until no ingestion is pending (for tests and orderly shutdowns)."""
        await self._ingestion.queue.wait_idle()

    async def aclose(self) -> None:
        await self._ingestion.queue.aclose()
