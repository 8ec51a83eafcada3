"""Group commit: concurrent writes of the same kind share one transaction.

``GroupCommitter(write_many, max_batch, max_writers)``: ``await committer.submit(entry)``
queues ``entry`` and returns once a transaction holding it has committed. While fewer than
``max_writers`` batches are in flight, a submission starts a writer task at once (no timer, so
a lone write pays no extra latency); entries that arrive meanwhile wait and go together in the
next transaction, up to ``max_batch`` at a time. This turns N concurrent small transactions
into a few larger ones (one BEGIN/COMMIT, one executemany per table), which is what makes
``store=true`` cheap under load, on SQLite especially, where writers are serialized anyway.

Each entry stays atomic on its own: when a batch fails, its transaction rolls back and every
entry of it is retried alone, so only the entries that fail alone report an error (to their
own caller) and the others are written. A caller cancelled before its batch starts writes
nothing; once its batch started, the write completes.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Sequence
from typing import Generic, TypeVar

logger = logging.getLogger(__name__)

T = TypeVar("T")


class GroupCommitter(Generic[T]):
    def __init__(
        self,
        write_many: Callable[[Sequence[T]], Awaitable[None]],
        *,
        max_batch: int,
        max_writers: int,
    ) -> None:
        self._write_many = write_many
        self._max_batch = max_batch
        self._max_writers = max_writers
        self._pending: list[tuple[T, asyncio.Future[None]]] = []
        self._writers: set[asyncio.Task[None]] = set()
        # Writers still draining; decremented by the writer itself when it finds the queue
        # empty (not by a done callback, which runs later: a submission in between would
        # see a finished writer as running and wait forever).
        self._draining = 0

    async def submit(self, entry: T) -> None:
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._pending.append((entry, future))
        if self._draining < self._max_writers:
            self._draining += 1
            task = asyncio.create_task(self._drain())
            self._writers.add(task)
            task.add_done_callback(self._writers.discard)
        await future

    async def aclose(self) -> None:
        """Wait for the batches in flight and those queued."""
        while self._writers:
            await asyncio.gather(*self._writers, return_exceptions=True)

    async def _drain(self) -> None:
        try:
            await self._drain_queue()
        finally:
            self._draining -= 1

    async def _drain_queue(self) -> None:
        while self._pending:
            batch = [entry for entry in self._pending[: self._max_batch] if not entry[1].done()]
            del self._pending[: self._max_batch]
            if not batch:
                continue
            try:
                await self._write_many([entry for entry, _ in batch])
            except Exception as exc:
                if len(batch) == 1:
                    _settle(batch[0][1], exc)
                    continue
                logger.debug("batch of %d failed, retrying one by one", len(batch), exc_info=True)
                for entry, future in batch:
                    try:
                        await self._write_many([entry])
                    except Exception as single:
                        _settle(future, single)
                    else:
                        _settle(future, None)
            except BaseException as exc:  # cancelled (shutdown): nobody may wait forever
                queued, self._pending = self._pending, []
                for _, future in [*batch, *queued]:
                    _settle(future, exc)
                raise
            else:
                for _, future in batch:
                    _settle(future, None)


def _settle(future: asyncio.Future[None], error: BaseException | None) -> None:
    if future.done():  # the caller was cancelled meanwhile
        return
    if error is None:
        future.set_result(None)
    elif isinstance(error, asyncio.CancelledError):
        future.cancel()
    else:
        future.set_exception(error)
