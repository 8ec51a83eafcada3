"""The OpenAI objects of the Vector Stores API, built from the stored records: a vector store,
a store's file, a file batch, a search results page, and what a delete answers."""

from __future__ import annotations

from app.files.ports import StoredFileBatch, StoredVectorStore, StoredVectorStoreFile
from app.protocol.json_types import JsonObject

COUNT_KEYS = ("in_progress", "completed", "failed", "cancelled", "total")


def file_counts(counts: dict[str, int]) -> dict[str, int]:
    """OpenAI's ``file_counts``: every key, zero where ``counts`` has none."""
    return {key: int(counts.get(key, 0)) for key in COUNT_KEYS}


def store_object(store: StoredVectorStore, counts: dict[str, int], *, expired: bool) -> JsonObject:
    """A ``vector_store``: its status derived from its files' ``counts`` (or ``expired``)."""
    counts = file_counts(counts)
    status = "in_progress" if counts["in_progress"] else "completed"
    if expired:
        status = "expired"
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


def file_object(record: StoredVectorStoreFile) -> JsonObject:
    """A ``vector_store.file``."""
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


def batch_object(batch: StoredFileBatch, records: list[StoredVectorStoreFile]) -> JsonObject:
    """A ``vector_store.files_batch``: its counts and status derived from its files'
    ``records`` (a cancelled batch stays cancelled once nothing is in progress)."""
    counts = file_counts({})
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


def search_result(
    record: StoredVectorStoreFile, filename: str, text: str, score: float
) -> JsonObject:
    """One hit of a search results page."""
    return {
        "file_id": record.file_id,
        "filename": filename,
        "score": score,
        "attributes": record.attributes,
        "content": [{"type": "text", "text": text}],
    }


def search_page(queries: list[str], data: list[JsonObject]) -> JsonObject:
    """A ``vector_store.search_results.page`` (``rewrite_query`` is accepted but the query is
    not rewritten: echoed as sent)."""
    return {
        "object": "vector_store.search_results.page",
        "search_query": queries,
        "data": data,
        "has_more": False,
        "next_page": None,
    }


def deleted(object_id: str, kind: str) -> JsonObject:
    """What a delete answers (``kind``: ``vector_store.deleted``, …)."""
    return {"id": object_id, "object": kind, "deleted": True}
