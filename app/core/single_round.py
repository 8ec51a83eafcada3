"""``SingleRound``: the plain path of a response, one upstream stream folded by one accumulator
(no gateway tools), after the items the gateway produced before the round (a compaction)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

from app.core.accumulator import ResponseAccumulator
from app.core.compact import prelude_events
from app.core.deadline import Deadline
from app.core.ports import UpstreamEventStream
from app.core.tools import PreludeItem
from app.errors import UpstreamProtocolError
from app.protocol.events import StreamEvent
from app.protocol.json_types import JsonObject


class SingleRound:
    """The plain path: one upstream stream folded by one accumulator (no gateway tools)."""

    __slots__ = ("_accumulator", "_deadline", "_prelude", "_upstream_events", "shown")

    def __init__(
        self,
        upstream_events: UpstreamEventStream,
        prelude: list[PreludeItem] | None = None,
        deadline: Deadline | None = None,
    ) -> None:
        # Items the gateway produced before the round (a compaction) open the output; ``shown``
        # are those the client has seen (the accumulator holds the round's items after them).
        self._prelude = prelude or []
        self.shown: list[JsonObject] = []
        self._upstream_events = upstream_events
        self._accumulator = ResponseAccumulator(output_offset=len(self._prelude))
        # The request's deadline (core.deadline): past it the response ends incomplete.
        self._deadline = deadline

    @property
    def accumulator(self) -> ResponseAccumulator:
        return self._accumulator

    async def events(self) -> AsyncIterator[StreamEvent]:
        accumulator = self._accumulator
        # Shown once the stream is open, as the tool loop shows its prelude.
        self.shown = [entry.item for entry in self._prelude]
        for event in prelude_events(self._prelude):
            yield event
        deadline = self._deadline
        timeout = asyncio.timeout_at(deadline.at if deadline is not None else None)
        try:
            async with timeout:
                async for upstream_event in self._upstream_events:
                    for event in accumulator.feed(upstream_event):
                        yield event
                    if accumulator.finished:
                        break
        except TimeoutError:
            if deadline is None or not timeout.expired():
                raise
            for event in accumulator.cut_short(deadline.details):
                yield event
            return
        if not accumulator.finished:
            raise UpstreamProtocolError(
                "the upstream stream ended before the response was complete"
            )

    def finish(self, status: str) -> list[StreamEvent]:
        return self._accumulator.finish(status)

    async def aclose(self) -> None:
        await self._upstream_events.aclose()
