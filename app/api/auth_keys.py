"""``KeyRing``: the gateway API keys a process accepts, in memory, by SHA-256.

A request costs one hash and one dict lookup: no database round trip on the hot path. The
keys are the configured ones (``[[auth.keys]]``) and the active rows of the ``api_keys`` table
(``respgate keys``), which every process reads again every ``refresh_seconds``: a revoked key
is refused everywhere within that time. A key the ring does not know makes it read the table
at once (at most once per ``MISS_REFRESH_SECONDS``: a request that comes sooner waits for the
next read, and one read serves every request waiting), so a key just created works at once
while a stream of wrong keys costs at most one read a second.
A failed read keeps the keys of the last good one (and says so in the log).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import AsyncIterator, Callable, Mapping
from dataclasses import dataclass

from app.core.api_keys import ApiKeyStore

logger = logging.getLogger(__name__)

MISS_REFRESH_SECONDS = 1.0


@dataclass(frozen=True, slots=True)
class KeyOwner:
    """Whose a key is: its tenant and its id (``key_...``; ``key_cfg_...`` when configured)."""

    tenant: str
    key_id: str


class KeyRing:
    """The accepted keys by SHA-256: the configured ones, and the table's active ones."""

    def __init__(
        self,
        configured: Mapping[str, KeyOwner],
        store: ApiKeyStore | None = None,
        refresh_seconds: float = 2.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._configured = dict(configured)
        self._keys: dict[str, KeyOwner] = dict(configured)
        self._store = store
        self._refresh_seconds = refresh_seconds
        self._clock = clock
        self._loaded_at = float("-inf")
        self._lock = asyncio.Lock()
        self._miss_lock = asyncio.Lock()
        self._miss_read_at = float("-inf")
        self._failing = False

    def __len__(self) -> int:
        return len(self._keys)

    def get(self, digest: str) -> KeyOwner | None:
        return self._keys.get(digest)

    async def find(self, digest: str) -> KeyOwner | None:
        """The owner of the key whose SHA-256 is ``digest``. A key the ring does not know makes
        it read the table first, at most once every ``MISS_REFRESH_SECONDS`` (a request that
        comes sooner waits for that read: it never gets a 401 for a key made a moment ago)."""
        owner = self._keys.get(digest)
        if owner is not None or self._store is None:
            return owner
        asked = self._clock()
        async with self._miss_lock:
            if self._loaded_at < asked:  # no read that started after this request ended yet
                wait = self._miss_read_at + MISS_REFRESH_SECONDS - self._clock()
                if wait > 0:
                    await asyncio.sleep(wait)
                self._miss_read_at = self._clock()
                await self.refresh(since=asked)
        return self._keys.get(digest)

    async def refresh(self, since: float | None = None) -> None:
        """Read the table again, unless a read that started after ``since`` already ended
        (requests waiting together share one read)."""
        if self._store is None:
            return
        async with self._lock:
            if since is not None and self._loaded_at >= since:
                return
            started = self._clock()
            try:
                records = await self._store.list_keys()
            except Exception as exc:
                # Keep the last keys read; the next refresh tries again.
                self._loaded_at = started
                if not self._failing:
                    logger.warning(
                        "reading the api_keys table failed (keeping the keys read before): %s: %s",
                        type(exc).__name__,
                        exc,
                    )
                self._failing = True
                return
            keys = dict(self._configured)
            for record in records:
                if record.active:
                    keys.setdefault(record.key_hash, KeyOwner(record.tenant, record.id))
            self._keys = keys
            self._loaded_at = started
            if self._failing:
                logger.info("reading the api_keys table works again")
            self._failing = False

    @contextlib.asynccontextmanager
    async def running(self, store: ApiKeyStore) -> AsyncIterator[None]:
        """Read ``store`` now, then every ``refresh_seconds`` until the block ends."""
        self._store = store
        await self.refresh()
        task = asyncio.create_task(self._refresh_forever(), name="api key refresh")
        try:
            yield
        finally:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
            self._store = None

    async def _refresh_forever(self) -> None:
        while True:
            await asyncio.sleep(self._refresh_seconds)
            await self.refresh()
