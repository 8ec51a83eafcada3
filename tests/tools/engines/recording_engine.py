"""``RecordingEngine``: a tool engine for tests that records every batch it is given and answers
each call with its arguments echoed, after an optional delay; it keeps the contract (sessions in
a ``SessionBook``, ``simulate`` rolled back)."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import dataclass, field

import orjson

from app.core.engines import EngineCall, EngineResult
from app.core.session_book import SessionBook
from app.protocol.json_types import JsonObject


@dataclass
class Batch:
    session_id: str
    mode: str
    calls: list[EngineCall]
    history_before: int


@dataclass
class RecordingEngine:
    """Answers ``{"engine": name, "tool": qualified name, "arguments": ..., "seen": n}`` where
    ``seen`` is how many calls the session had run before this one (batch order included)."""

    name: str
    delay: float = 0.0
    # Every batch waits here for the batches of the other engines sharing the barrier: a
    # barrier that never fills (batches run one after another) times the test out.
    barrier: asyncio.Barrier | None = None
    batches: list[Batch] = field(default_factory=list)
    running: int = 0
    most_running: int = 0
    book: SessionBook = field(default_factory=SessionBook)

    async def setup(self, session_id: str, state: JsonObject | None = None) -> None:
        self.book.setup(session_id, state)

    async def teardown(self, session_id: str) -> None:
        self.book.teardown(session_id)

    def get_session_state(self, session_id: str) -> JsonObject:
        return self.book.state(session_id)

    async def execute(self, session_id: str, calls: Sequence[EngineCall]) -> list[EngineResult]:
        return await self._run(session_id, calls, "execute")

    async def simulate(self, session_id: str, calls: Sequence[EngineCall]) -> list[EngineResult]:
        snapshot = self.book.snapshot(session_id)
        try:
            return await self._run(session_id, calls, "simulate")
        finally:
            self.book.restore(session_id, snapshot)

    async def _run(
        self, session_id: str, calls: Sequence[EngineCall], mode: str
    ) -> list[EngineResult]:
        history = self.book.history(session_id)
        self.batches.append(Batch(session_id, mode, list(calls), len(history)))
        self.running += 1
        self.most_running = max(self.most_running, self.running)
        try:
            if self.delay:
                await asyncio.sleep(self.delay)
            if self.barrier is not None:
                async with asyncio.timeout(10):
                    await self.barrier.wait()
            results = []
            for call in calls:
                if call.tool.name == "fail":
                    result = EngineResult.failure(call, "tool_error", "it failed on purpose")
                else:
                    output = {
                        "engine": self.name,
                        "mode": mode,
                        "tool": call.tool.qualified_name,
                        "arguments": call.parsed_arguments(),
                        "seen": len(self.book.history(session_id)),
                    }
                    result = EngineResult(call.call_id, orjson.dumps(output).decode())
                self.book.record(session_id, call, result)
                results.append(result)
            return results
        finally:
            self.running -= 1
