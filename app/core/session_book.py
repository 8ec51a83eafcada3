"""``SessionBook``: the live sessions of one tool engine and their histories, in memory.

Engines keep their sessions here: ``setup`` (from a saved state, or empty; a live session is
``SessionExistsError``), ``teardown`` (unknown: a no-op), ``record`` a (call, result) pair,
``state`` as JSON for the gateway to persist, ``snapshot``/``restore`` to roll a simulated batch
back. A session keeps its newest ``max_history`` entries.

History entries are never changed once recorded, so copies of a state share them: a copy is
the state's top-level object and its history list, never a deep copy (a deep copy of 200
entries cost milliseconds per round, ``bench/tool_sessions_bench.py``).
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable

from app.core.engines import (
    EngineCall,
    EngineResult,
    SessionExistsError,
    UnknownSessionError,
    history_entry,
)
from app.protocol.json_types import JsonObject

DEFAULT_MAX_HISTORY = 200


class SessionBook:
    """The live sessions of one engine (see the module docstring)."""

    def __init__(self, max_history: int = DEFAULT_MAX_HISTORY) -> None:
        self._max_history = max_history
        self._sessions: dict[str, JsonObject] = {}

    def setup(self, session_id: str, state: JsonObject | None = None) -> None:
        if session_id in self._sessions:
            raise SessionExistsError(f"session {session_id!r} is already set up")
        fresh = dict(state) if state else {}
        history = fresh.get("history")
        fresh["history"] = list(history) if isinstance(history, list) else []
        self._sessions[session_id] = fresh

    def teardown(self, session_id: str) -> None:
        self._sessions.pop(session_id, None)

    def live(self, session_id: str) -> bool:
        return session_id in self._sessions

    def session(self, session_id: str) -> JsonObject:
        """The live state itself (engines may keep more keys than ``history`` in it)."""
        try:
            return self._sessions[session_id]
        except KeyError:
            raise UnknownSessionError(f"session {session_id!r} is not set up") from None

    def history(self, session_id: str) -> list[JsonObject]:
        history: list[JsonObject] = self.session(session_id)["history"]
        return history

    def record(self, session_id: str, call: EngineCall, result: EngineResult) -> None:
        history = self.history(session_id)
        history.append(history_entry(call, result))
        if len(history) > self._max_history:
            del history[: len(history) - self._max_history]

    def state(self, session_id: str) -> JsonObject:
        """A copy of the session's state, for the gateway to persist (the entries shared)."""
        session = self.session(session_id)
        return {**session, "history": list(session["history"])}

    def snapshot(self, session_id: str) -> JsonObject:
        return self.state(session_id)

    def restore(self, session_id: str, snapshot: JsonObject) -> None:
        self.session(session_id)  # must be live
        self._sessions[session_id] = snapshot


class BookedSessions:
    """The session half of a ``core.engines.ToolEngine`` whose sessions live in
    ``self.sessions``: ``setup``, ``teardown`` and ``get_session_state``."""

    sessions: SessionBook

    async def setup(self, session_id: str, state: JsonObject | None = None) -> None:
        self.sessions.setup(session_id, state)

    async def teardown(self, session_id: str) -> None:
        self.sessions.teardown(session_id)

    def get_session_state(self, session_id: str) -> JsonObject:
        return self.sessions.state(session_id)


async def timed(call: EngineCall, run: Callable[[], Awaitable[EngineResult]]) -> EngineResult:
    """``run()``'s result with ``duration_ms`` filled in."""
    started = time.perf_counter()
    result = await run()
    elapsed = (time.perf_counter() - started) * 1000
    return EngineResult(
        call_id=call.call_id, output=result.output, error=result.error, duration_ms=elapsed
    )
