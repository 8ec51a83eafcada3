"""The SSE streams open in this process, and how they end when a drain lapses.

On SIGTERM the server stops accepting connections and lets open streams finish for
``drain_timeout_seconds`` (``app.serving``). When that time lapses it calls
:func:`cut_open_streams`: each stream still open is interrupted where it waits (for the
upstream, a tool call) and ends as a started stream reports a failure, with an ``error`` event
(code ``server_shutting_down``) and ``response.failed``, then ``[DONE]``; the client is told
rather than left with a dropped connection. A background response's stream ends without them:
its job goes on in another gateway (``core.background``), and the client resumes following it
with ``starting_after``.
"""

from __future__ import annotations

import asyncio
from typing import Any

from app.core.jsoncopy import clone
from app.protocol import events as ev
from app.protocol.json_types import JsonObject

SHUTTING_DOWN: JsonObject = {
    "code": "server_shutting_down",
    "message": "The gateway shut down before the response finished (its drain timeout lapsed); "
    "send the request again.",
}


class OpenStreams:
    """The tasks sending SSE streams, and whether they are being cut."""

    def __init__(self) -> None:
        self._tasks: set[asyncio.Task[Any]] = set()
        self.cutting = False

    def add(self, task: asyncio.Task[Any]) -> None:
        self._tasks.add(task)

    def discard(self, task: asyncio.Task[Any]) -> None:
        self._tasks.discard(task)

    def cut(self) -> int:
        """Interrupt every open stream (see the module docstring); how many there were."""
        self.cutting = True
        tasks = list(self._tasks)
        for task in tasks:
            task.cancel()
        return len(tasks)


OPEN_STREAMS = OpenStreams()


def cut_open_streams() -> int:
    return OPEN_STREAMS.cut()


def closing_events(response: JsonObject | None, next_number: int) -> list[JsonObject]:
    """The events that end a stream cut at shutdown: none for a background response (its job
    goes on elsewhere), else ``error`` and ``response.failed``, numbered from ``next_number``."""
    if response is not None and response.get("background"):
        return []
    failed: JsonObject = clone(response) if response is not None else {"object": "response"}
    failed["status"] = "failed"
    failed["error"] = dict(SHUTTING_DOWN)
    error = {"type": ev.ERROR, **SHUTTING_DOWN, "param": None, "sequence_number": next_number}
    terminal = {"type": ev.RESPONSE_FAILED, "response": failed, "sequence_number": next_number + 1}
    return [error, terminal]
