"""The whole-request deadline: one clock over every round, tool call and upstream read of a
response (``[limits] request_timeout``, ``background_timeout`` for background responses).

Past it the response ends ``incomplete`` with ``incomplete_details.reason`` ``"request_timeout"``:
what it produced so far (finished tool calls, streamed text) is kept, stored and continuable with
``previous_response_id``; items still open are closed ``incomplete``, calls still running are
cancelled and reported as not finished. OpenAI's clients already handle ``response.incomplete``
(the SDKs return it; Codex CLI retries the turn), where ``failed`` would throw the output away.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TypeVar

from app.core.ports import SingleResponseStream
from app.protocol.json_types import JsonObject

T = TypeVar("T")

TIMEOUT_REASON = "request_timeout"


@dataclass(frozen=True, slots=True)
class Deadline:
    """When a request must end, on the event loop's clock."""

    seconds: float
    at: float

    @classmethod
    def after(cls, seconds: float | None) -> Deadline | None:
        """The deadline ``seconds`` from now (None for no deadline); in a running event loop."""
        if not seconds:
            return None
        return cls(seconds, asyncio.get_running_loop().time() + seconds)

    @property
    def passed(self) -> bool:
        return asyncio.get_running_loop().time() >= self.at

    def sooner(self, timeout: float | None) -> float:
        """The loop time of ``timeout`` seconds from now, or of the deadline if sooner."""
        if timeout is None:
            return self.at
        return min(self.at, asyncio.get_running_loop().time() + timeout)

    @property
    def details(self) -> JsonObject:
        """The ``incomplete_details`` of a response that ran out of time."""
        return {"reason": TIMEOUT_REASON}

    @property
    def not_finished(self) -> str:
        """What the model and the client read of a call the deadline cut."""
        return f"not finished: the request reached its time limit of {self.seconds:g} s"

    def timed_out_response(self) -> JsonObject:
        """An upstream answer standing for a round the deadline cut before it answered."""
        return {"status": "incomplete", "output": [], "incomplete_details": self.details}


def timed_out_stream(deadline: Deadline) -> SingleResponseStream:
    """The stream of a round the deadline cut before the upstream answered."""
    return SingleResponseStream(deadline.timed_out_response())


async def within(
    deadline: Deadline | None, awaitable: Awaitable[T], expired: Callable[[Deadline], T]
) -> T:
    """``awaitable``'s result, or ``expired(deadline)`` when the deadline comes first
    (``awaitable`` is then cancelled)."""
    if deadline is None:
        return await awaitable
    timeout = asyncio.timeout_at(deadline.at)
    try:
        async with timeout:
            return await awaitable
    except TimeoutError:
        if not timeout.expired():
            raise
        return expired(deadline)
