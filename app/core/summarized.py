"""Warnings about events that can come by the thousand (slow or surplus client connections,
waits for a full upstream pool: ``app.connections``, ``app.upstream.pool``) keep to one line
per interval: ``Summarized``."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Generic, TypeVar

T = TypeVar("T")


class Summarized(Generic[T]):
    """At most one line per ``interval`` about a kind of event that can come by the thousand:
    the first event is told at once (``first(event)``); those after it within the interval are
    gathered and told in one line when it ends (``summary(events)``), which opens the next
    interval; an interval without any ends the series, so the next event is told at once
    again. ``note`` runs in the event loop (the interval is a ``call_later``); the gathered
    events are kept until their interval ends."""

    def __init__(
        self,
        first: Callable[[T], None],
        summary: Callable[[list[T]], None],
        interval: float,
    ) -> None:
        self._first = first
        self._summary = summary
        self.interval = interval
        self._gathered: list[T] = []
        self._timer: asyncio.TimerHandle | None = None

    def note(self, event: T) -> None:
        if self._timer is None:
            self._timer = asyncio.get_running_loop().call_later(self.interval, self.flush)
            self._first(event)
        else:
            self._gathered.append(event)

    def flush(self) -> None:
        """The end of an interval: the summary of the events it gathered, if any (which opens
        the next interval)."""
        if self._timer is not None:  # called before its time (a no-op from the timer itself)
            self._timer.cancel()
        self._timer = None
        if self._gathered:
            self._timer = asyncio.get_running_loop().call_later(self.interval, self.flush)
            self._tell()

    def close(self) -> None:
        """Stop the interval and tell what it gathered."""
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if self._gathered:
            self._tell()

    def _tell(self) -> None:
        gathered, self._gathered = self._gathered, []
        self._summary(gathered)
