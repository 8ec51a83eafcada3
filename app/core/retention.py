"""Retention: stored responses and conversations expire, and a purge removes them.

``RetentionPolicy`` says how old is too old (None: kept for ever); ``RetentionCutoffs`` are
those ages as instants. A ``Purger`` (``app.store.retention.SqlRetention``) removes what is
older, batch by batch, and reports it (``PurgeReport``). ``PeriodicPurge`` runs it in a
gateway process: once at start (in the background: start-up does not wait), then every
``interval_seconds``. Several processes on one database may all run one: the purger lets one
purge at a time and tells the others (``None``), who try again at their next turn.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, fields
from typing import Protocol

logger = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class RetentionCutoffs:
    """Responses created before ``responses_before``, and conversations last active before
    ``conversations_before`` (seconds since the epoch), are purged; None: none."""

    responses_before: int | None = None
    conversations_before: int | None = None

    @property
    def empty(self) -> bool:
        return self.responses_before is None and self.conversations_before is None


@dataclass(frozen=True, slots=True)
class RetentionPolicy:
    """The ages (seconds) after which responses and conversations go, how often a gateway
    process purges, and how many rows a purge transaction removes."""

    responses_seconds: float | None = None
    conversations_seconds: float | None = None
    interval_seconds: float = 3600.0
    batch_size: int = 500

    def cutoffs(self, now: float) -> RetentionCutoffs:
        return RetentionCutoffs(
            responses_before=_before(now, self.responses_seconds),
            conversations_before=_before(now, self.conversations_seconds),
        )


def _before(now: float, age: float | None) -> int | None:
    return None if age is None else int(now - age)


@dataclass(slots=True)
class PurgeReport:
    """What a purge removed (with ``dry_run``: would remove)."""

    responses: int = 0
    conversations: int = 0
    items: int = 0
    background_jobs: int = 0
    background_events: int = 0
    tool_sessions: int = 0
    dry_run: bool = False

    def counts(self) -> dict[str, int]:
        return {f.name: getattr(self, f.name) for f in fields(self) if f.name != "dry_run"}

    @property
    def total(self) -> int:
        return sum(self.counts().values())

    def summary(self, *, every_kind: bool = False) -> str:
        """``12 responses, 1 conversation, 40 items, ...``: the kinds removed (``every_kind``:
        all of them, 0 included), or ``nothing``."""
        parts = [
            f"{count} {_NOUNS[name] if count == 1 else name.replace('_', ' ')}"
            for name, count in self.counts().items()
            if count or every_kind
        ]
        return ", ".join(parts) if parts else "nothing"


_NOUNS = {
    "responses": "response",
    "conversations": "conversation",
    "items": "item",
    "background_jobs": "background job",
    "background_events": "background event",
    "tool_sessions": "tool session",
}


class Purger(Protocol):
    async def purge(
        self, cutoffs: RetentionCutoffs, *, dry_run: bool = False
    ) -> PurgeReport | None:
        """Remove what ``cutoffs`` expire (``dry_run``: change nothing, report what would go);
        None when another process is purging the same database now."""
        ...


class PeriodicPurge:
    """Purges with ``purger`` at start and then every ``policy.interval_seconds``."""

    def __init__(
        self,
        purger: Purger,
        policy: RetentionPolicy,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._purger = purger
        self._policy = policy
        self._clock = clock
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        self._task = asyncio.create_task(self._forever(), name="retention purge")

    async def aclose(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task

    async def run_once(self) -> PurgeReport | None:
        cutoffs = self._policy.cutoffs(self._clock())
        report = await self._purger.purge(cutoffs)
        if report is None:
            logger.debug("retention: another process is purging; next try in %gs", self._interval)
        elif report.total:
            logger.info("retention: purged %s", report.summary())
        return report

    @property
    def _interval(self) -> float:
        return self._policy.interval_seconds

    async def _forever(self) -> None:
        while True:
            try:
                await self.run_once()
            except Exception:
                logger.exception("retention purge failed; next try in %gs", self._interval)
            await asyncio.sleep(self._interval)
