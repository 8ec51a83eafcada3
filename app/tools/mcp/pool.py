"""``McpSessionPool``: long-lived sessions to the MCP servers the operator configured.

Each server's connections follow the egress policy trusting the exact host:port the operator
wrote for it (``EgressPolicy.trusting``): its address is resolved and pinned like any other,
and a redirect elsewhere is judged by the policy.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping

from app.net.egress import EgressPolicy
from app.tools.mcp.client import McpSession
from app.tools.mcp.errors import CONNECTION_FAILED, McpError
from app.tools.mcp.spec import McpServerSpec


class McpSessionPool:
    """Long-lived sessions to the servers the operator configured, keyed by label.

    Sessions open lazily, one at a time per label, are reused across requests, and are reopened
    on next use once closed, dead or discarded.
    """

    def __init__(
        self,
        specs: Mapping[str, McpServerSpec],
        *,
        connect_timeout: float,
        egress: EgressPolicy,
    ) -> None:
        self._specs = dict(specs)
        self._connect_timeout = connect_timeout
        self._egress = {label: egress.trusting(spec.url) for label, spec in self._specs.items()}
        self._sessions: dict[str, McpSession] = {}
        self._locks: dict[str, asyncio.Lock] = {label: asyncio.Lock() for label in self._specs}
        self._closed = False

    @property
    def labels(self) -> list[str]:
        return list(self._specs)

    async def session(self, label: str) -> McpSession:
        """The open session to ``label``, opening it first if needed; raises McpError."""
        spec = self._specs.get(label)
        if spec is None:
            raise KeyError(f"no MCP server labelled {label!r} is configured")
        async with self._locks[label]:
            if self._closed:
                raise McpError.protocol(CONNECTION_FAILED, "the MCP session pool is closed")
            current = self._sessions.get(label)
            if current is not None and not current.closed:
                return current
            if current is not None:
                del self._sessions[label]
                await current.aclose()
            fresh = await McpSession.open(
                spec, connect_timeout=self._connect_timeout, egress=self._egress[label]
            )
            if self._closed:  # the pool closed while this session was opening
                await fresh.aclose()
                raise McpError.protocol(CONNECTION_FAILED, "the MCP session pool is closed")
            self._sessions[label] = fresh
            return fresh

    async def discard(self, label: str, *, session: McpSession | None = None) -> None:
        """Close the pooled session to ``label`` so the next use reopens it.

        With ``session``, only when that is still the pooled one (another task may already have
        replaced a broken session with a fresh one).
        """
        lock = self._locks.get(label)
        if lock is None:
            return
        async with lock:
            current = self._sessions.get(label)
            if current is None or (session is not None and current is not session):
                return
            del self._sessions[label]
        await current.aclose()

    async def aclose(self) -> None:
        """Close every session; later ``session()`` calls fail."""
        self._closed = True
        sessions = list(self._sessions.values())
        self._sessions.clear()
        await asyncio.gather(*(session.aclose() for session in sessions))
