"""``ToolSessions``: runs engine batches for sessions whose state lives in the store.

Each batch is one unit: the session's saved state is read (``ToolSessionStore``), the engine
sets the session up from it, runs the calls (``execute``, or ``simulate`` for a dry run), the
new state is written back when it changed, and the session is torn down. The store is the only
copy between batches, so a session continued on another replica, or after a restart, sees
the same world; batches of one session in one process run one at a time. Without a store the
states are kept in this object (one process). A session is its tenant's (``core.tenancy``): it
is loaded and saved under the tenant of the request that runs it.
"""

from __future__ import annotations

import asyncio
import logging
import weakref
from collections.abc import Sequence

from app.core.engines import EngineCall, EngineResult, ToolEngine, ToolSessionStore
from app.protocol.json_types import JsonObject

logger = logging.getLogger(__name__)


class _MemorySessions:
    """A ``ToolSessionStore`` in this process's memory."""

    def __init__(self) -> None:
        self._states: dict[tuple[str, str], JsonObject] = {}

    async def load_tool_session(self, session_id: str, *, tenant: str) -> JsonObject | None:
        return self._states.get((tenant, session_id))

    async def save_tool_session(self, session_id: str, state: JsonObject, *, tenant: str) -> None:
        self._states[tenant, session_id] = state

    async def delete_tool_session(self, session_id: str, *, tenant: str) -> None:
        self._states.pop((tenant, session_id), None)


class ToolSessions:
    """Runs one engine's batches with the sessions persisted (see the module docstring)."""

    def __init__(self, engine: ToolEngine, store: ToolSessionStore | None = None) -> None:
        self.engine = engine
        self._store: ToolSessionStore = store if store is not None else _MemorySessions()
        # By session id alone: the engine keeps a running session under its id.
        self._locks: weakref.WeakValueDictionary[str, asyncio.Lock] = weakref.WeakValueDictionary()

    def _lock(self, session_id: str) -> asyncio.Lock:
        lock = self._locks.get(session_id)
        if lock is None:
            lock = asyncio.Lock()
            self._locks[session_id] = lock
        return lock

    async def run(
        self,
        session_id: str,
        calls: Sequence[EngineCall],
        *,
        tenant: str,
        simulate: bool = False,
    ) -> list[EngineResult]:
        """The results of ``calls`` in order, in ``tenant``'s session ``session_id``; the
        session's new state is saved unless ``simulate``."""
        async with self._lock(session_id):
            saved = await self._store.load_tool_session(session_id, tenant=tenant)
            await self.engine.setup(session_id, saved)
            try:
                if simulate:
                    return await self.engine.simulate(session_id, calls)
                results = await self.engine.execute(session_id, calls)
                state = self.engine.get_session_state(session_id)
                if state != saved:
                    await self._store.save_tool_session(session_id, state, tenant=tenant)
                return results
            finally:
                await self.engine.teardown(session_id)

    async def state(self, session_id: str, *, tenant: str) -> JsonObject | None:
        """The session's saved state (``None``: it never ran a call)."""
        return await self._store.load_tool_session(session_id, tenant=tenant)
