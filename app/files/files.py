"""FilesService: the Files API (``/v1/files``) over a FileStore (metadata) and a BlobStore (bytes).

An upload is stored in two steps, because a multipart form may send its fields after the file:
``receive`` writes the bytes as they arrive under a new id (nothing is left if the stream
fails), then ``create_received`` checks the fields and records the file, or deletes the bytes.
``create`` does both for bytes already in hand.

Deleting a file also removes it from every vector store (``FileDetacher``: the vector stores'
``StoreFilesService``, which cancels the file's ingestion and deletes its chunks) before the
store forgets it. A file past its ``expires_at`` is deleted when it is next asked for.

Every call is the caller's ``tenant``'s (``FileStores.for_tenant``): a file is its uploader's,
and another tenant's file id answers exactly as an unknown one (404 ``No such File object``).
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterable, AsyncIterator, Callable
from dataclasses import dataclass
from typing import Any, Protocol

from app.core.ids import uuid7_hex
from app.core.ports import Page
from app.core.store_errors import UnknownCursorError
from app.errors import CursorNotFoundError, InvalidRequestError
from app.files.checks import file_not_found
from app.files.ports import BlobStore, FileStore, FileStores, StoredFile
from app.protocol.json_types import JsonObject

PURPOSES = ("assistants", "batch", "fine-tune", "vision", "user_data", "evals")
MIN_EXPIRES_SECONDS = 3600  # 1 hour
MAX_EXPIRES_SECONDS = 2_592_000  # 30 days


class FileDetacher(Protocol):
    async def forget_file(self, file_id: str, *, tenant: str) -> None:
        """Remove ``tenant``'s file from every vector store (chunks, ingestion, usage)."""
        ...


def new_file_id() -> str:
    return f"file-{uuid7_hex()}"


@dataclass(frozen=True, slots=True)
class ReceivedBlob:
    """An upload's bytes, stored under ``file_id`` but not yet a file (``create_received``)."""

    file_id: str
    bytes: int


class FilesService:
    def __init__(
        self,
        files: FileStores,
        blobs: BlobStore,
        clock: Callable[[], float] = time.time,
        *,
        detacher: FileDetacher | None = None,
    ) -> None:
        self.files = files
        self.blobs = blobs
        self._clock = clock
        self.detacher = detacher

    async def create(
        self,
        *,
        tenant: str,
        filename: str,
        data: bytes,
        purpose: str,
        expires_after: Any = None,
    ) -> JsonObject:
        """Store an upload as ``tenant``'s (``purpose`` and ``expires_after`` are checked
        here: 400s)."""
        check_purpose(purpose)
        check_expires_after(expires_after)
        received = await self.receive(_once(data))
        return await self.create_received(
            received, tenant=tenant, filename=filename, purpose=purpose, expires_after=expires_after
        )

    async def receive(self, chunks: AsyncIterable[bytes]) -> ReceivedBlob:
        """Store an upload's bytes as ``chunks`` yields them, under a new file id."""
        file_id = new_file_id()
        size = await self.blobs.put_stream(file_id, chunks)
        return ReceivedBlob(file_id, size)

    async def create_received(
        self,
        received: ReceivedBlob,
        *,
        tenant: str,
        filename: str,
        purpose: str,
        expires_after: Any = None,
    ) -> JsonObject:
        """Record received bytes as ``tenant``'s file (``purpose`` and ``expires_after``
        checked: 400s); the bytes are deleted when that fails."""
        try:
            check_purpose(purpose)
            seconds = check_expires_after(expires_after)
            now = int(self._clock())
            file = StoredFile(
                id=received.file_id,
                filename=filename,
                purpose=purpose,
                bytes=received.bytes,
                created_at=now,
                expires_at=now + seconds if seconds is not None else None,
            )
            await self.files.for_tenant(tenant).add_file(file)
        except BaseException:
            await self.discard(received)
            raise
        return file.to_object()

    async def discard(self, received: ReceivedBlob) -> None:
        """Delete received bytes that will not become a file (the form was incomplete)."""
        await self.blobs.delete(received.file_id)

    async def list_files(
        self, *, tenant: str, purpose: str | None, after: str | None, limit: int, order: str
    ) -> Page:
        try:
            rows = await self.files.for_tenant(tenant).list_files(
                purpose=purpose, after=after, limit=limit, order=order
            )
        except UnknownCursorError:
            raise CursorNotFoundError(f"No file found with id '{after}'", param="after") from None
        return Page(items=[file.to_object() for file in rows[:limit]], has_more=len(rows) > limit)

    async def get(self, file_id: str, *, tenant: str) -> JsonObject:
        return (await self.require(file_id, tenant=tenant)).to_object()

    async def content(self, file_id: str, *, tenant: str) -> tuple[StoredFile, bytes]:
        file = await self.require(file_id, tenant=tenant)
        data = await self.blobs.get(file_id)  # the tenant's file: its bytes are too
        if data is None:
            raise file_not_found(file_id)
        return file, data

    async def delete(self, file_id: str, *, tenant: str) -> JsonObject:
        await self.require(file_id, tenant=tenant)
        await self._delete(file_id, tenant)
        return {"id": file_id, "object": "file", "deleted": True}

    async def require(self, file_id: str, *, tenant: str) -> StoredFile:
        """``tenant``'s file; 404 when it has none with this id (or it has just expired and
        was deleted)."""
        file = await self.files.for_tenant(tenant).get_file(file_id)
        if file is None:
            raise file_not_found(file_id)
        if file.expires_at is not None and file.expires_at <= self._clock():
            await self._delete(file_id, tenant)
            raise file_not_found(file_id)
        return file

    async def _delete(self, file_id: str, tenant: str) -> None:
        """Delete a file ``require`` found for ``tenant`` (so its bytes are the tenant's)."""
        files: FileStore = self.files.for_tenant(tenant)
        if self.detacher is not None:
            await self.detacher.forget_file(file_id, tenant=tenant)
        await files.delete_file(file_id)
        await self.blobs.delete(file_id)


async def _once(data: bytes) -> AsyncIterator[bytes]:
    yield data


def check_purpose(purpose: str) -> None:
    if purpose not in PURPOSES:
        supported = ", ".join(f"'{p}'" for p in PURPOSES[:-1])
        raise InvalidRequestError(
            f"Invalid value: '{purpose}'. Supported values are: {supported}, and '{PURPOSES[-1]}'.",
            param="purpose",
            code="invalid_value",
        )


def check_expires_after(value: Any) -> int | None:
    """The seconds of a file's ``{"anchor": "created_at", "seconds": n}``, or a 400."""
    if value is None:
        return None
    if not isinstance(value, dict):
        raise InvalidRequestError(
            "Invalid type for 'expires_after': expected an object.",
            param="expires_after",
            code="invalid_type",
        )
    for key in value:
        if key not in ("anchor", "seconds"):
            raise InvalidRequestError(
                f"Unknown parameter: 'expires_after.{key}'.",
                param=f"expires_after.{key}",
                code="unknown_parameter",
            )
    for key in ("anchor", "seconds"):
        if key not in value:
            raise InvalidRequestError(
                f"Missing required parameter: 'expires_after.{key}'.",
                param=f"expires_after.{key}",
                code="missing_required_parameter",
            )
    if value["anchor"] != "created_at":
        raise InvalidRequestError(
            f"Invalid value: '{value['anchor']}'. Supported values are: 'created_at'.",
            param="expires_after.anchor",
            code="invalid_value",
        )
    seconds = value["seconds"]
    if isinstance(seconds, str) and seconds.strip().isdigit():
        seconds = int(seconds)  # multipart form fields are strings
    if isinstance(seconds, bool) or not isinstance(seconds, int):
        raise InvalidRequestError(
            "Invalid type for 'expires_after.seconds': expected an integer.",
            param="expires_after.seconds",
            code="invalid_type",
        )
    if not MIN_EXPIRES_SECONDS <= seconds <= MAX_EXPIRES_SECONDS:
        raise InvalidRequestError(
            f"Invalid 'expires_after.seconds': integer between {MIN_EXPIRES_SECONDS} and "
            f"{MAX_EXPIRES_SECONDS} expected, got {seconds}.",
            param="expires_after.seconds",
            code="invalid_value",
        )
    return seconds
