"""``StoresService``: the vector stores themselves (``/v1/vector_stores``, ``/{id}``): create
(with files to ingest), list, read, update and delete; each the caller's ``tenant``'s (another
tenant's store is as unknown as a missing one)."""

from __future__ import annotations

import dataclasses
from typing import Any

from app.core.ids import uuid7_hex
from app.core.ports import Page
from app.files.attach import FileEntry, StoreIngestion
from app.files.catalog import Catalogs, expires_at
from app.files.checks import chunking_or_400
from app.files.paging import Cursor, window
from app.files.ports import StoredVectorStore
from app.files.wire import deleted
from app.protocol.json_types import JsonObject


class StoresService:
    def __init__(self, catalogs: Catalogs, ingestion: StoreIngestion) -> None:
        self._catalogs = catalogs
        self._ingestion = ingestion

    async def create(
        self,
        *,
        tenant: str,
        name: str | None,
        metadata: dict[str, str],
        expires_after: JsonObject | None,
        file_ids: list[str],
        chunking_strategy: Any = None,
    ) -> JsonObject:
        catalog = self._catalogs.of(tenant)
        chunking = chunking_or_400(chunking_strategy)
        await catalog.require_files(file_ids, "file_ids")
        now = catalog.now()
        store = StoredVectorStore(
            id=f"vs_{uuid7_hex()}",
            name=name,
            created_at=now,
            metadata=metadata,
            expires_after=expires_after,
            expires_at=expires_at(expires_after, now),
            last_active_at=now,
            status="in_progress" if file_ids else "completed",
            usage_bytes=0,
        )
        await catalog.files.create_vector_store(store)
        async with catalog.lock:
            entries = [(FileEntry(file_id, {}), chunking) for file_id in dict.fromkeys(file_ids)]
            await self._ingestion.attach(catalog, store.id, entries)
        return await self.get(store.id, tenant=tenant)

    async def list_stores(self, cursor: Cursor, *, tenant: str) -> Page:
        catalog = self._catalogs.of(tenant)

        async def fetch(after: str | None, limit: int, order: str) -> list[StoredVectorStore]:
            return await catalog.files.list_vector_stores(after=after, limit=limit, order=order)

        rows, has_more = await window(fetch, cursor, lambda s: s.id)
        return Page(items=[await catalog.store_object(s) for s in rows], has_more=has_more)

    async def get(self, vector_store_id: str, *, tenant: str) -> JsonObject:
        catalog = self._catalogs.of(tenant)
        return await catalog.store_object(await catalog.require_store(vector_store_id))

    async def update(self, vector_store_id: str, changes: JsonObject, *, tenant: str) -> JsonObject:
        """``changes``: any of ``name``, ``metadata`` (checked), ``expires_after``."""
        catalog = self._catalogs.of(tenant)
        async with catalog.lock:
            store = await catalog.require_store(vector_store_id)
            fields = dict(changes)
            if "expires_after" in fields:
                fields["expires_at"] = expires_at(fields["expires_after"], store.last_active_at)
            await catalog.files.update_vector_store(dataclasses.replace(store, **fields))
        return await self.get(vector_store_id, tenant=tenant)

    async def delete(self, vector_store_id: str, *, tenant: str) -> JsonObject:
        catalog = self._catalogs.of(tenant)
        async with catalog.lock:
            await catalog.require_store(vector_store_id)
            await self._ingestion.queue.cancel_store(vector_store_id)
            await catalog.index.delete_store(vector_store_id)
            await catalog.files.delete_vector_store(vector_store_id)
        return deleted(vector_store_id, "vector_store.deleted")
