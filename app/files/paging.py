"""Pages of the FileStore's lists as the Vector Stores API serves them (``after`` and
``before`` cursors), and scans of every store or every file of a store, page by page."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from typing import TypeVar

from app.core.store_errors import UnknownCursorError
from app.errors import CursorNotFoundError
from app.files.ports import FileStore, StoredVectorStore, StoredVectorStoreFile

T = TypeVar("T")

SCAN_PAGE = 100


@dataclass(frozen=True, slots=True)
class Cursor:
    after: str | None
    before: str | None
    limit: int
    order: str


async def window(
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


async def all_stores(files: FileStore) -> AsyncIterator[StoredVectorStore]:
    """Every vector store, oldest first."""
    after: str | None = None
    while True:
        rows = await files.list_vector_stores(after=after, limit=SCAN_PAGE, order="asc")
        for store in rows[:SCAN_PAGE]:
            yield store
        if len(rows) <= SCAN_PAGE:
            return
        after = rows[SCAN_PAGE - 1].id


async def all_records(
    files: FileStore,
    vector_store_id: str,
    *,
    status: str | None,
    file_ids: list[str] | None = None,
) -> AsyncIterator[StoredVectorStoreFile]:
    """Every file record of a store (with ``status``, among ``file_ids``), oldest first."""
    after: str | None = None
    while True:
        rows = await files.list_vector_store_files(
            vector_store_id,
            status=status,
            after=after,
            limit=SCAN_PAGE,
            order="asc",
            file_ids=file_ids,
        )
        for record in rows[:SCAN_PAGE]:
            yield record
        if len(rows) <= SCAN_PAGE:
            return
        after = rows[SCAN_PAGE - 1].file_id
