"""Observability of gateway tool calls: start / complete / error, to the log and to hooks.

``ToolEvents`` is the in-process event hook that metrics and tracing attach to
(``subscribe``); every gateway call the tool loop runs emits ``start`` and then ``complete``
(the tool answered: ``ok`` tells whether it succeeded) or ``error`` (it failed, timed out or
was not run).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

logger = logging.getLogger(__name__)

PREVIEW_CHARS = 200


@dataclass(frozen=True, slots=True)
class ToolCallEvent:
    phase: Literal["start", "complete", "error"]
    response_id: str
    round: int
    tool: str
    item_id: str
    ok: bool | None = None
    duration_ms: float | None = None
    preview: str | None = None


ToolEventHook = Callable[[ToolCallEvent], None]


def preview_of(text: str) -> str:
    """A short single-line preview of a tool's output for logs and hooks."""
    flat = " ".join(text.split())
    return flat if len(flat) <= PREVIEW_CHARS else flat[: PREVIEW_CHARS - 1] + "…"


class ToolEvents:
    """Fans tool call events out to the logger and to subscribed hooks."""

    def __init__(self) -> None:
        self._hooks: list[ToolEventHook] = []

    def subscribe(self, hook: ToolEventHook) -> Callable[[], None]:
        """Attach ``hook``; returns a function that detaches it."""
        self._hooks.append(hook)

        def unsubscribe() -> None:
            if hook in self._hooks:
                self._hooks.remove(hook)

        return unsubscribe

    def emit(self, event: ToolCallEvent) -> None:
        extra = {
            "response_id": event.response_id,
            "round": event.round,
            "tool": event.tool,
            "item_id": event.item_id,
            "ok": event.ok,
            "duration_ms": event.duration_ms,
        }
        if event.phase == "start":
            logger.info("tool call started: %s", event.tool, extra=extra)
        elif event.phase == "complete":
            logger.info(
                "tool call completed: %s ok=%s in %.1f ms: %s",
                event.tool,
                event.ok,
                event.duration_ms or 0.0,
                event.preview or "",
                extra=extra,
            )
        else:
            logger.warning(
                "tool call failed: %s in %.1f ms: %s",
                event.tool,
                event.duration_ms or 0.0,
                event.preview or "",
                extra=extra,
            )
        for hook in list(self._hooks):
            try:
                hook(event)
            except Exception:  # a broken hook must not break a response
                logger.exception("tool event hook failed")
