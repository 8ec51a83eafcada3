"""VectorStoresService: the Vector Stores API (``/v1/vector_stores``): stores, their files, file
batches and search, over a FileStore, a BlobStore, a VectorIndex and an Embedder.

Adding a file records it ``in_progress`` and hands it to the ``IngestQueue``; the statuses say
how ingestion went. A store's ``status`` and ``file_counts`` are derived from its files when
it is read, ``expired`` once past ``expires_at``. Every read-modify-write of a store or of a
store's file happens under one lock, and ingestion tasks are cancelled only under it, so an
outcome is never half recorded and counters (``usage_bytes``) do not drift.
"""

from __future__ import annotations

import asyncio
import dataclasses
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable
from dataclasses import dataclass
from typing import Any, TypeVar

from pydantic import ValidationError

from app.core.ids import uuid7_hex
from app.core.ports import Page
from app.core.store_errors import UnknownCursorError
from app.errors import CursorNotFoundError, GatewayError, InvalidRequestError
from app.files import filters
from app.files.chunking import ChunkingStrategyError, normalize_chunking_strategy
from app.files.files import MissingObjectError, file_not_found
from app.files.filters import FilterError
from app.files.ingest import DEFAULT_BATCH_SIZE, DEFAULT_CONCURRENCY, IngestOutcome, IngestQueue
from app.files.ports import (
    BlobStore,
    Embedder,
    FileStore,
    SearchHit,
    StoredFileBatch,
    StoredVectorStore,
    StoredVectorStoreFile,
    VectorIndex,
)
from app.files.requests import SearchRequest, index_ranker
from app.protocol.json_types import JsonObject

T = TypeVar("T")

DAY = 86_400
_SCAN_PAGE = 100


@dataclass(frozen=True, slots=True)
class FileEntry:
    """One file to add to a store: its attributes (checked) and chunking strategy (as sent;
    a 400 about it names ``param``)."""

    file_id: str
    attributes: dict[str, Any]
    chunking_strategy: Any = None
    param: str = "chunking_strategy"


@dataclass(frozen=True, slots=True)
class Cursor:
    after: str | None
    before: str | None
    limit: int
    order: str


class VectorStoresService:
    def __init__(
        self,
        files: FileStore,
        blobs: BlobStore,
        index: VectorIndex,
        embedder: Embedder,
        clock: Callable[[], float] = time.time,
        *,
        ingest_concurrency: int = DEFAULT_CONCURRENCY,
        embed_batch_size: int = DEFAULT_BATCH_SIZE,
    ) -> None:
        self.files = files
        self.index = index
        self.embedder = embedder
        self._clock = clock
        self._lock = asyncio.Lock()
        self.ingest = IngestQueue(
            files,
            blobs,
            index,
            embedder,
            self._record_outcome,
            max_concurrency=ingest_concurrency,
            batch_size=embed_batch_size,
        )

    # ------------------------------------------------------------------ stores

    async def create(
        self,
        *,
        name: str | None,
        metadata: dict[str, str],
        expires_after: JsonObject | None,
        file_ids: list[str],
        chunking_strategy: Any = None,
    ) -> JsonObject:
        chunking = chunking_or_400(chunking_strategy)
        await self._require_files(file_ids, "file_ids")
        now = self._now()
        store = StoredVectorStore(
            id=f"vs_{uuid7_hex()}",
            name=name,
            created_at=now,
            metadata=metadata,
            expires_after=expires_after,
            expires_at=_expires_at(expires_after, now),
            last_active_at=now,
            status="in_progress" if file_ids else "completed",
            usage_bytes=0,
        )
        await self.files.create_vector_store(store)
        async with self._lock:
            entries = [(FileEntry(file_id, {}), chunking) for file_id in dict.fromkeys(file_ids)]
            await self._attach(store.id, entries)
        return await self.get(store.id)

    async def list_stores(self, cursor: Cursor) -> Page:
        async def fetch(after: str | None, limit: int, order: str) -> list[StoredVectorStore]:
            return await self.files.list_vector_stores(after=after, limit=limit, order=order)

        rows, has_more = await _window(fetch, cursor, lambda s: s.id)
        return Page(items=[await self._store_object(s) for s in rows], has_more=has_more)

    async def get(self, vector_store_id: str) -> JsonObject:
        return await self._store_object(await self._require_store(vector_store_id))

    async def check_vector_store(self, vector_store_id: str) -> None:
        """OpenAI's 404 when no vector store has this id (one light read)."""
        await self._require_store(vector_store_id)

    async def update(self, vector_store_id: str, changes: JsonObject) -> JsonObject:
        """``changes``: any of ``name``, ``metadata`` (checked), ``expires_after``."""
        async with self._lock:
            store = await self._require_store(vector_store_id)
            fields = dict(changes)
            if "expires_after" in fields:
                fields["expires_at"] = _expires_at(fields["expires_after"], store.last_active_at)
            await self.files.update_vector_store(dataclasses.replace(store, **fields))
        return await self.get(vector_store_id)

    async def delete(self, vector_store_id: str) -> JsonObject:
        async with self._lock:
            await self._require_store(vector_store_id)
            await self.ingest.cancel_store(vector_store_id)
            await self.index.delete_store(vector_store_id)
            await self.files.delete_vector_store(vector_store_id)
        return {"id": vector_store_id, "object": "vector_store.deleted", "deleted": True}

    # ------------------------------------------------------------------ files of a store

    async def add_file(self, vector_store_id: str, entry: FileEntry) -> JsonObject:
        chunking = chunking_or_400(entry.chunking_strategy, entry.param)
        await self._require_active_store(vector_store_id)
        await self._require_files([entry.file_id], "file_id")
        async with self._lock:
            await self._require_store(vector_store_id)
            (record,) = await self._attach(vector_store_id, [(entry, chunking)])
        return file_object(record)

    async def list_files(self, vector_store_id: str, cursor: Cursor, *, status: str | None) -> Page:
        await self._require_store(vector_store_id)
        return await self._list_records(vector_store_id, cursor, status=status, file_ids=None)

    async def get_file(self, vector_store_id: str, file_id: str) -> JsonObject:
        return file_object(await self._require_record(vector_store_id, file_id))

    async def update_file(
        self, vector_store_id: str, file_id: str, attributes: dict[str, Any]
    ) -> JsonObject:
        async with self._lock:
            record = await self._require_record(vector_store_id, file_id)
            record = dataclasses.replace(record, attributes=attributes)
            await self.files.put_vector_store_file(record)
        return file_object(record)

    async def remove_file(self, vector_store_id: str, file_id: str) -> JsonObject:
        """Detach a file from the store: its chunks go, the file stays."""
        async with self._lock:
            record = await self._require_record(vector_store_id, file_id)
            await self._detach(vector_store_id, record)
        return {"id": file_id, "object": "vector_store.file.deleted", "deleted": True}

    async def file_content(self, vector_store_id: str, file_id: str) -> JsonObject:
        await self._require_record(vector_store_id, file_id)
        chunks = await self.index.file_chunks(vector_store_id, file_id)
        return {
            "object": "vector_store.file_content.page",
            "data": [{"type": "text", "text": text} for text in chunks],
            "has_more": False,
            "next_page": None,
        }

    async def forget_file(self, file_id: str) -> None:
        """A file is being deleted: take it out of every store (``core.files.FileDetacher``)."""
        async with self._lock:
            await self.ingest.cancel_file(file_id)
            async for store in self._all_stores():
                record = await self.files.get_vector_store_file(store.id, file_id)
                if record is not None:
                    await self._detach(store.id, record)

    # ------------------------------------------------------------------ file batches

    async def create_batch(self, vector_store_id: str, entries: list[FileEntry]) -> JsonObject:
        chunkings = [chunking_or_400(e.chunking_strategy, e.param) for e in entries]
        await self._require_active_store(vector_store_id)
        await self._require_files([e.file_id for e in entries], "file_ids")
        async with self._lock:
            await self._require_store(vector_store_id)
            batch = StoredFileBatch(
                id=f"vsfb_{uuid7_hex()}",
                vector_store_id=vector_store_id,
                created_at=self._now(),
                status="in_progress",
                file_ids=list(dict.fromkeys(e.file_id for e in entries)),
            )
            await self.files.put_file_batch(batch)
            await self._attach(vector_store_id, zip(entries, chunkings, strict=True))
        return await self._batch_object(batch)

    async def get_batch(self, vector_store_id: str, batch_id: str) -> JsonObject:
        return await self._batch_object(await self._require_batch(vector_store_id, batch_id))

    async def cancel_batch(self, vector_store_id: str, batch_id: str) -> JsonObject:
        """Stop the batch's files that are still being ingested (they become ``cancelled``);
        a batch that has finished stays as it is."""
        async with self._lock:
            batch = await self._require_batch(vector_store_id, batch_id)
            pending = await self._batch_records(batch, status="in_progress")
            for record in pending:
                await self.ingest.cancel(vector_store_id, record.file_id)
                await self.index.delete_file(vector_store_id, record.file_id)
                cancelled = dataclasses.replace(record, status="cancelled", usage_bytes=0)
                await self.files.put_vector_store_file(cancelled)
            if pending:
                batch = dataclasses.replace(batch, status="cancelled")
                await self.files.put_file_batch(batch)
                await self._sync_store(vector_store_id, 0)
        return await self._batch_object(batch)

    async def list_batch_files(
        self, vector_store_id: str, batch_id: str, cursor: Cursor, *, status: str | None
    ) -> Page:
        batch = await self._require_batch(vector_store_id, batch_id)
        return await self._list_records(
            vector_store_id, cursor, status=status, file_ids=batch.file_ids
        )

    # ------------------------------------------------------------------ search

    async def search(self, vector_store_id: str, body: JsonObject) -> JsonObject:
        """``POST /v1/vector_stores/{id}/search`` on a raw body (the file_search tool calls
        this too); 400 for a bad body, 404 for an unknown store."""
        request = parse_search(body)
        queries = [request.query] if isinstance(request.query, str) else list(request.query)
        if not any(q.strip() for q in queries):
            raise InvalidRequestError(
                "Invalid 'query': expected a non-empty string or array of strings.",
                param="query",
                code="invalid_value",
            )
        condition = check_filter(request.filters)
        store = await self._require_active_store(vector_store_id)
        options = request.ranking_options
        ranker = index_ranker(options.ranker if options and options.ranker else "auto")
        threshold = options.score_threshold if options and options.score_threshold else 0.0
        allowed = await self._searchable(store.id, condition)
        hits: list[SearchHit] = []
        if allowed is None or allowed:
            hits = await self._hits(store.id, queries, ranker, request.max_num_results, allowed)
        await self._touch(store)
        kept = [hit for hit in hits if hit.score >= threshold]
        # The hits' records and file names: one read per search.
        named = await self.files.named_vector_store_files(store.id, [h.file_id for h in kept])
        data: list[JsonObject] = []
        for hit in kept:
            if len(data) >= request.max_num_results:
                break
            found = named.get(hit.file_id)
            if found is None:
                continue  # detached meanwhile
            record, name = found
            data.append(
                {
                    "file_id": hit.file_id,
                    "filename": name,
                    "score": hit.score,
                    "attributes": record.attributes,
                    "content": [{"type": "text", "text": hit.text}],
                }
            )
        return {
            "object": "vector_store.search_results.page",
            # rewrite_query is accepted but the query is not rewritten: echoed as sent.
            "search_query": queries,
            "data": data,
            "has_more": False,
            "next_page": None,
        }

    async def _searchable(
        self, vector_store_id: str, condition: JsonObject | None
    ) -> list[str] | None:
        """The files an attribute filter lets through (``None``: no filter, every file)."""
        if condition is None:
            return None
        return [
            record.file_id
            async for record in self._all_records(vector_store_id, status="completed")
            if filters.matches(condition, record.attributes)
        ]

    async def _hits(
        self,
        vector_store_id: str,
        queries: list[str],
        ranker: str,
        limit: int,
        allowed: list[str] | None,
    ) -> list[SearchHit]:
        """Every query's best chunks, each chunk once (its best score), best first."""
        vectors: list[list[float] | None] = [None] * len(queries)
        if ranker != "keyword":
            vectors = list(await self._embed(queries))
        best: dict[tuple[str, int], SearchHit] = {}
        for query, vector in zip(queries, vectors, strict=True):
            found = await self.index.search(
                vector_store_id,
                embedding=vector,
                query=query,
                limit=limit,
                ranker=ranker,
                file_ids=allowed,
            )
            for hit in found:
                key = (hit.file_id, hit.position)
                if key not in best or best[key].score < hit.score:
                    best[key] = hit
        return sorted(best.values(), key=lambda h: -h.score)

    async def _embed(self, texts: list[str]) -> list[list[float]]:
        try:
            return await self.embedder.embed(texts)
        except GatewayError:
            raise
        except Exception as exc:
            raise GatewayError(
                f"The embedder is unavailable: {exc}",
                code="embeddings_unavailable",
                status_code=503,
            ) from exc

    # ------------------------------------------------------------------ lifecycle

    async def resume_pending(self) -> int:
        """Ingest again the files a previous run left ``in_progress`` (call at startup)."""
        resumed = 0
        async with self._lock:
            async for store in self._all_stores():
                async for record in self._all_records(store.id, status="in_progress"):
                    if not self.ingest.is_pending(store.id, record.file_id):
                        await self.ingest.submit(store.id, record.file_id, record.chunking_strategy)
                        resumed += 1
        return resumed

    async def wait_idle(self) -> None:
        """Until no ingestion is pending (for tests and orderly shutdowns)."""
        await self.ingest.wait_idle()

    async def aclose(self) -> None:
        await self.ingest.aclose()

    # ------------------------------------------------------------------ internals

    def _now(self) -> int:
        return int(self._clock())

    async def _attach(
        self, vector_store_id: str, entries: Iterable[tuple[FileEntry, JsonObject]]
    ) -> list[StoredVectorStoreFile]:
        """Record each file (with its chunking) ``in_progress`` and queue it, then refresh the
        store once (under the lock). A file already in the store keeps its record unless its
        last ingestion failed or was cancelled."""
        records: list[StoredVectorStoreFile] = []
        freed = 0
        attached = False
        for entry, chunking in entries:
            old = await self.files.get_vector_store_file(vector_store_id, entry.file_id)
            if old is not None and old.status in ("in_progress", "completed"):
                records.append(old)
                continue
            record = StoredVectorStoreFile(
                vector_store_id=vector_store_id,
                file_id=entry.file_id,
                created_at=self._now(),
                status="in_progress",
                last_error=None,
                attributes=entry.attributes,
                chunking_strategy=chunking,
                usage_bytes=0,
            )
            await self.files.put_vector_store_file(record)
            await self.ingest.submit(vector_store_id, entry.file_id, chunking)
            freed += old.usage_bytes if old else 0
            attached = True
            records.append(record)
        if attached:
            await self._sync_store(vector_store_id, -freed)
        return records

    async def _detach(self, vector_store_id: str, record: StoredVectorStoreFile) -> None:
        await self.ingest.cancel(vector_store_id, record.file_id)
        await self.index.delete_file(vector_store_id, record.file_id)
        await self.files.delete_vector_store_file(vector_store_id, record.file_id)
        await self._sync_store(vector_store_id, -record.usage_bytes)

    async def _record_outcome(
        self, vector_store_id: str, file_id: str, outcome: IngestOutcome
    ) -> None:
        """An ingestion task's end (``IngestQueue``'s ``finish``)."""
        async with self._lock:
            record = await self.files.get_vector_store_file(vector_store_id, file_id)
            if record is None or record.status != "in_progress":
                # Detached (or its store deleted) while ingesting: leave no chunks behind.
                await self.index.delete_file(vector_store_id, file_id)
                return
            # The store's usage first: a client that sees the file completed (polling, as
            # the SDKs' ``*_and_poll`` do) then sees the store's usage with it.
            await self._sync_store(vector_store_id, outcome.usage_bytes)
            await self.files.put_vector_store_file(
                dataclasses.replace(
                    record,
                    status=outcome.status,
                    last_error=outcome.last_error,
                    usage_bytes=outcome.usage_bytes,
                )
            )
            await self._sync_store(vector_store_id, 0)

    async def _sync_store(self, vector_store_id: str, usage_delta: int) -> None:
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

    async def _touch(self, store: StoredVectorStore) -> None:
        """A search: the store was active now (its expiry moves with it); one write per store
        and second at most, and no read when ``store`` (just read) is already current."""
        now = self._now()
        if store.last_active_at == now:
            return
        async with self._lock:
            current = await self.files.get_vector_store(store.id)
            if current is None or current.last_active_at == now:
                return
            await self.files.update_vector_store(
                dataclasses.replace(
                    current, last_active_at=now, expires_at=_expires_at(current.expires_after, now)
                )
            )

    async def _require_store(self, vector_store_id: str) -> StoredVectorStore:
        store = await self.files.get_vector_store(vector_store_id)
        if store is None:
            raise vector_store_not_found(vector_store_id)
        return store

    async def _require_active_store(self, vector_store_id: str) -> StoredVectorStore:
        store = await self._require_store(vector_store_id)
        if self._expired(store):
            raise InvalidRequestError(
                f"Vector store '{vector_store_id}' has expired.",
                param="vector_store_id",
                code="vector_store_expired",
            )
        return store

    def _expired(self, store: StoredVectorStore) -> bool:
        return store.expires_at is not None and store.expires_at <= self._clock()

    async def _require_files(self, file_ids: list[str], param: str) -> None:
        existing = await self.files.existing_file_ids(file_ids)
        for file_id in file_ids:
            if file_id not in existing:
                raise file_not_found(file_id, param)

    async def _require_record(self, vector_store_id: str, file_id: str) -> StoredVectorStoreFile:
        record = await self.files.get_vector_store_file(vector_store_id, file_id)
        if record is None:
            await self._require_store(vector_store_id)
            raise MissingObjectError(
                f"No file found with id '{file_id}' in vector store '{vector_store_id}'.",
                param="file_id",
            )
        return record

    async def _require_batch(self, vector_store_id: str, batch_id: str) -> StoredFileBatch:
        batch = await self.files.get_file_batch(vector_store_id, batch_id)
        if batch is None:
            await self._require_store(vector_store_id)
            raise MissingObjectError(
                f"No file batch found with id '{batch_id}' in vector store '{vector_store_id}'.",
                param="batch_id",
            )
        return batch

    async def _store_object(self, store: StoredVectorStore) -> JsonObject:
        counts = _counts(await self.files.file_counts(store.id))
        if self._expired(store):
            status = "expired"
        else:
            status = "in_progress" if counts["in_progress"] else "completed"
        return {
            "id": store.id,
            "object": "vector_store",
            "created_at": store.created_at,
            "name": store.name,
            "usage_bytes": store.usage_bytes,
            "file_counts": counts,
            "status": status,
            "expires_after": store.expires_after,
            "expires_at": store.expires_at,
            "last_active_at": store.last_active_at,
            "metadata": store.metadata,
        }

    async def _batch_records(
        self, batch: StoredFileBatch, *, status: str | None = None
    ) -> list[StoredVectorStoreFile]:
        return [
            record
            async for record in self._all_records(
                batch.vector_store_id, status=status, file_ids=batch.file_ids
            )
        ]

    async def _batch_object(self, batch: StoredFileBatch) -> JsonObject:
        records = await self._batch_records(batch)
        counts = _counts({})
        for record in records:
            counts[record.status] = counts.get(record.status, 0) + 1
        counts["total"] = len(records)
        if counts["in_progress"]:
            status = "in_progress"
        elif batch.status == "cancelled":
            status = "cancelled"
        elif records and counts["failed"] == len(records):
            status = "failed"
        else:
            status = "completed"
        return {
            "id": batch.id,
            "object": "vector_store.files_batch",
            "created_at": batch.created_at,
            "vector_store_id": batch.vector_store_id,
            "status": status,
            "file_counts": counts,
        }

    async def _list_records(
        self,
        vector_store_id: str,
        cursor: Cursor,
        *,
        status: str | None,
        file_ids: list[str] | None,
    ) -> Page:
        async def fetch(after: str | None, limit: int, order: str) -> list[StoredVectorStoreFile]:
            return await self.files.list_vector_store_files(
                vector_store_id,
                status=status,
                after=after,
                limit=limit,
                order=order,
                file_ids=file_ids,
            )

        rows, has_more = await _window(fetch, cursor, lambda r: r.file_id)
        return Page(items=[file_object(r) for r in rows], has_more=has_more)

    async def _all_stores(self) -> AsyncIterator[StoredVectorStore]:
        after: str | None = None
        while True:
            rows = await self.files.list_vector_stores(after=after, limit=_SCAN_PAGE, order="asc")
            for store in rows[:_SCAN_PAGE]:
                yield store
            if len(rows) <= _SCAN_PAGE:
                return
            after = rows[_SCAN_PAGE - 1].id

    async def _all_records(
        self, vector_store_id: str, *, status: str | None, file_ids: list[str] | None = None
    ) -> AsyncIterator[StoredVectorStoreFile]:
        after: str | None = None
        while True:
            rows = await self.files.list_vector_store_files(
                vector_store_id,
                status=status,
                after=after,
                limit=_SCAN_PAGE,
                order="asc",
                file_ids=file_ids,
            )
            for record in rows[:_SCAN_PAGE]:
                yield record
            if len(rows) <= _SCAN_PAGE:
                return
            after = rows[_SCAN_PAGE - 1].file_id


def file_object(record: StoredVectorStoreFile) -> JsonObject:
    return {
        "id": record.file_id,
        "object": "vector_store.file",
        "usage_bytes": record.usage_bytes,
        "created_at": record.created_at,
        "vector_store_id": record.vector_store_id,
        "status": record.status,
        "last_error": record.last_error,
        "chunking_strategy": record.chunking_strategy,
        "attributes": record.attributes,
    }


def vector_store_not_found(vector_store_id: str) -> MissingObjectError:
    return MissingObjectError(
        f"No vector store found with id '{vector_store_id}'.", param="vector_store_id"
    )


def chunking_or_400(value: Any, param: str = "chunking_strategy") -> JsonObject:
    """The stored form of a chunking strategy (``None``: ``auto``), or a 400 naming the field
    (``param`` replaces ``chunking_strategy`` in it, for ``files[2].chunking_strategy``)."""
    try:
        return normalize_chunking_strategy(value)
    except ChunkingStrategyError as exc:
        raise _field_error(str(exc), exc.param, "chunking_strategy", param) from None


def check_filter(value: Any) -> JsonObject | None:
    """An attribute filter checked by ``retrieval.filters``, or a 400 naming the field."""
    if value is None:
        return None
    try:
        return filters.validate_filter(value)
    except FilterError as exc:
        raise _field_error(str(exc), exc.param, "filters", "filters") from None


def _field_error(message: str, where: str, prefix: str, param: str) -> InvalidRequestError:
    if param != prefix:
        message = message.replace(f"'{prefix}", f"'{param}")
        where = param + where[len(prefix) :] if where.startswith(prefix) else where
    if message.startswith("Missing required parameter"):
        code = "missing_required_parameter"
    elif message.startswith("Unknown parameter"):
        code = "unknown_parameter"
    elif message.startswith("Invalid type"):
        code = "invalid_type"
    else:
        code = "invalid_value"
    return InvalidRequestError(message, param=where, code=code)


def parse_search(body: JsonObject) -> SearchRequest:
    """The search body (the route has given precise errors already; this is for tool calls)."""
    try:
        return SearchRequest.model_validate(body, strict=True)
    except ValidationError as exc:
        error = exc.errors(include_url=False)[0]
        param = ".".join(str(part) for part in error["loc"]) or "body"
        raise InvalidRequestError(
            f"Invalid value for '{param}': {error['msg']}.", param=param, code="invalid_value"
        ) from None


def _expires_at(expires_after: JsonObject | None, anchor: int) -> int | None:
    if not expires_after:
        return None
    return anchor + int(expires_after["days"]) * DAY


def _counts(counts: dict[str, int]) -> dict[str, int]:
    keys = ("in_progress", "completed", "failed", "cancelled", "total")
    return {key: int(counts.get(key, 0)) for key in keys}


async def _window(
    fetch: Callable[[str | None, int, str], Awaitable[list[T]]],
    cursor: Cursor,
    id_of: Callable[[T], str],
) -> tuple[list[T], bool]:
    """One page from ``after`` / ``before`` cursors over a store lookup that only knows
    ``after`` (and returns ``limit + 1`` rows, as the FileStore's lists do): ``before`` alone
    reads backwards from it; both cut the page at ``before``."""
    limit = cursor.limit
    try:
        if cursor.before is not None and cursor.after is None:
            backwards = "asc" if cursor.order == "desc" else "desc"
            rows = await fetch(cursor.before, limit, backwards)
            return list(reversed(rows[:limit])), len(rows) > limit
        rows = await fetch(cursor.after, limit, cursor.order)
    except UnknownCursorError:
        param, value = ("after", cursor.after) if cursor.after else ("before", cursor.before)
        raise CursorNotFoundError(f"No item found with id '{value}'", param=param) from None
    has_more = len(rows) > limit
    rows = rows[:limit]
    if cursor.before is not None:
        ids = [id_of(row) for row in rows]
        if cursor.before in ids:
            return rows[: ids.index(cursor.before)], False
    return rows, has_more
