"""``DiskBlobStore``: the ``BlobStore`` port on a directory (``<data_dir>/files`` by default).

One file per blob, named by its id. A write goes to a temporary file in the same directory,
is flushed to disk, then renamed over the final name (``os.replace``, atomic on POSIX): a
reader sees the old bytes or the new ones, never a part, and a crash leaves at most a stray
``.tmp-*`` file, never a truncated blob. ``put_stream`` writes an upload that way as it
arrives, about 1 MiB at a time; when the upload fails or is cancelled halfway, the temporary
file is removed. File I/O runs in a worker thread (``asyncio.to_thread``), not in the event
loop. A file system that refuses to write or read (full, read-only, I/O error) raises
``StorageUnavailableError`` (``failures.py``).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import tempfile
from collections.abc import AsyncIterable, Callable
from pathlib import Path
from typing import BinaryIO, ParamSpec, TypeVar

from app.store.failures import translated

P = ParamSpec("P")
T = TypeVar("T")

# Ids are the gateway's own (``file-…``); anything that could leave the directory is refused.
_SAFE_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,254}")
_TEMP_PREFIX = ".tmp-"
# ``put_stream`` writes when this much has come (fewer thread hops than one per chunk).
_WRITE_BYTES = 1024 * 1024


class DiskBlobStore:
    """File bytes under ``root`` (created on the first write), one file per id."""

    def __init__(self, root: Path) -> None:
        self._root = Path(root)

    @property
    def root(self) -> Path:
        return self._root

    def _path(self, file_id: str) -> Path:
        if not _SAFE_ID.fullmatch(file_id) or file_id.startswith(_TEMP_PREFIX):
            raise ValueError(f"invalid file id {file_id!r}")
        return self._root / file_id

    async def put(self, file_id: str, data: bytes) -> None:
        path = self._path(file_id)
        await _io(self._write, path, data)

    async def put_stream(self, file_id: str, chunks: AsyncIterable[bytes]) -> int:
        path = self._path(file_id)
        handle, temp = await _io(self._open_temp)
        size = 0
        pending: list[bytes] = []
        pending_bytes = 0
        try:
            async for chunk in chunks:
                pending.append(chunk)
                pending_bytes += len(chunk)
                if pending_bytes >= _WRITE_BYTES:
                    await _io(handle.writelines, pending)
                    size += pending_bytes
                    pending, pending_bytes = [], 0
            await _io(handle.writelines, pending)
            size += pending_bytes
            await _io(_commit, handle, temp, path)
        except BaseException:
            # Synchronous on purpose: this also runs while the task is being cancelled.
            handle.close()
            with contextlib.suppress(OSError):
                os.unlink(temp)
            raise
        return size

    async def get(self, file_id: str) -> bytes | None:
        path = self._path(file_id)
        return await _io(_read, path)

    async def local_path(self, file_id: str) -> Path | None:
        path = self._path(file_id)
        return path if await _io(path.is_file) else None

    async def delete(self, file_id: str) -> None:
        path = self._path(file_id)
        await _io(path.unlink, missing_ok=True)

    async def aclose(self) -> None:
        """Nothing to release: each call opens and closes its own file."""

    def _open_temp(self) -> tuple[BinaryIO, str]:
        self._root.mkdir(parents=True, exist_ok=True)
        fd, temp = tempfile.mkstemp(dir=self._root, prefix=_TEMP_PREFIX)
        return os.fdopen(fd, "wb"), temp

    def _write(self, path: Path, data: bytes) -> None:
        self._root.mkdir(parents=True, exist_ok=True)
        fd, temp = tempfile.mkstemp(dir=self._root, prefix=_TEMP_PREFIX)
        try:
            with os.fdopen(fd, "wb") as handle:
                handle.write(data)
                handle.flush()
                os.fsync(handle.fileno())
            os.replace(temp, path)
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(temp)
            raise


async def _io(function: Callable[P, T], *args: P.args, **kwargs: P.kwargs) -> T:
    """``function`` in a worker thread; an ``OSError`` saying the storage is unavailable as
    ``StorageUnavailableError``."""
    try:
        return await asyncio.to_thread(function, *args, **kwargs)
    except OSError as exc:
        raise translated(exc) from exc


def _commit(handle: BinaryIO, temp: str, path: Path) -> None:
    with handle:
        handle.flush()
        os.fsync(handle.fileno())
    os.replace(temp, path)


def _read(path: Path) -> bytes | None:
    try:
        return path.read_bytes()
    except FileNotFoundError:
        return None
