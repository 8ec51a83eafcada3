"""A tool-call hook configured by path (``tool_hooks = ["tests.e2e.hook_sink:record"]``): it
keeps every event it is given."""

from __future__ import annotations

import threading

from app.core.observe import ToolCallEvent

EVENTS: list[ToolCallEvent] = []
_LOCK = threading.Lock()


def record(event: ToolCallEvent) -> None:
    with _LOCK:
        EVENTS.append(event)


def take(response_id: str) -> list[ToolCallEvent]:
    """The events of one response (removed from the sink)."""
    with _LOCK:
        mine = [e for e in EVENTS if e.response_id == response_id]
        EVENTS[:] = [e for e in EVENTS if e.response_id != response_id]
    return mine
