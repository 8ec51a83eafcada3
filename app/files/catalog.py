"""``Catalogs``: what every vector store service shares: every tenant's FileStores and
VectorIndexes, the clock, and the one lock under which every read-modify-write of a store or of
a store's file happens (so an ingestion outcome is never half recorded and ``usage_bytes`` does
not drift). ``Catalogs.of(tenant)`` is that tenant's ``StoreCatalog``: its views of the stores
(``FileStore``, ``VectorIndex``), so a service reaches no other tenant's records: another
tenant's id answers the 404 of an unknown one.

It looks records up (OpenAI's 404 when there is none), keeps a store's stored status and usage
current (``sync_store``), and builds a store's object (its ``status`` and ``file_counts`` are
derived from its files when it is read, ``expired`` once past ``expires_at``).
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Callable
from dataclasses import dataclass

from app.errors import InvalidRequestError
from app.files.checks import MissingObjectError, file_not_found, vector_store_not_found
from app.files.ports import (
    FileStore,
    FileStores,
    StoredFileBatch,
    StoredVectorStore,
    StoredVectorStoreFile,
    VectorIndex,
    VectorIndexes,
)
from app.files.wire import store_object
from app.protocol.json_types import JsonObject

DAY = 86_400


def expires_at(expires_after: JsonObject | None, anchor: int) -> int | None:
    """When a store with this ``expires_after`` policy, last active at ``anchor``, expires."""
    if not expires_after:
        return None
    return anchor + int(expires_after["days"]) * DAY


class Catalogs:
    """Every tenant's records, the clock and the one lock; ``of(tenant)`` for one tenant's."""

    def __init__(self, files: FileStores, index: VectorIndexes, clock: Callable[[], float]) -> None:
        self.files = files
        self.index = index
        self.clock = clock
        self.lock = asyncio.Lock()

    def of(self, tenant: str) -> StoreCatalog:
        return StoreCatalog(
            tenant,
            self.files.for_tenant(tenant),
            self.index.for_tenant(tenant),
            self.clock,
            self.lock,
        )


@dataclass(frozen=True, slots=True)
class StoreCatalog:
    """One tenant's records (views from ``Catalogs.of``), the clock and the shared lock."""

    tenant: str
    files: FileStore
    index: VectorIndex
    clock: Callable[[], float]
    lock: asyncio.Lock

    def now(self) -> int:
        return int(self.clock())

    def expired(self, store: StoredVectorStore) -> bool:
        return store.expires_at is not None and store.expires_at <= self.clock()

    async def require_store(self, vector_store_id: str) -> StoredVectorStore:
        store = await self.files.get_vector_store(vector_store_id)
        if store is None:
            raise vector_store_not_found(vector_store_id)
        return store

    async def require_active_store(self, vector_store_id: str) -> StoredVectorStore:
        """The store; a 400 once it has expired."""
        store = await self.require_store(vector_store_id)
        if self.expired(store):
            raise InvalidRequestError(
                f"Vector store '{vector_store_id}' has expired.",
                param="vector_store_id",
                code="vector_store_expired",
            )
        return store

    async def require_files(self, file_ids: list[str], param: str) -> None:
        existing = await self.files.existing_file_ids(file_ids)
        for file_id in file_ids:
            if file_id not in existing:
                raise file_not_found(file_id, param)

    async def require_record(self, vector_store_id: str, file_id: str) -> StoredVectorStoreFile:
        record = await self.files.get_vector_store_file(vector_store_id, file_id)
        if record is None:
            await self.require_store(vector_store_id)
            raise MissingObjectError(
                f"No file found with id '{file_id}' in vector store '{vector_store_id}'.",
                param="file_id",
            )
        return record

    async def require_batch(self, vector_store_id: str, batch_id: str) -> StoredFileBatch:
        batch = await self.files.get_file_batch(vector_store_id, batch_id)
        if batch is None:
            await self.require_store(vector_store_id)
            raise MissingObjectError(
                f"No file batch found with id '{batch_id}' in vector store '{vector_store_id}'.",
                param="batch_id",
            )
        return batch

    async def sync_store(self, vector_store_id: str, usage_delta: int) -> None:
        """Apply a change of usage and refresh the stored status (under the lock)."""
        store = await self.files.get_vector_store(vector_store_id)
        if store is None:
            return
        counts = await self.files.file_counts(vector_store_id)
        status = "in_progress" if counts.get("in_progress") else "completed"
        usage = max(0, store.usage_bytes + usage_delta)
        if (status, usage) != (store.status, store.usage_bytes):
            await self.files.update_vector_store(
                dataclasses.replace(store, status=status, usage_bytes=usage)
            )

    async def touch(self, store: StoredVectorStore) -> None:
        """A search: the store was active now (its expiry moves with it); one write per store
        and second at most, and no read when ``store`` (just read) is already current."""
        now = self.now()
        if store.last_active_at == now:
            return
        async with self.lock:
            current = await self.files.get_vector_store(store.id)
            if current is None or current.last_active_at == now:
                return
            await self.files.update_vector_store(
                dataclasses.replace(
                    current, last_active_at=now, expires_at=expires_at(current.expires_after, now)
                )
            )

    async def store_object(self, store: StoredVectorStore) -> JsonObject:
        counts = await self.files.file_counts(store.id)
        return store_object(store, counts, expired=self.expired(store))
