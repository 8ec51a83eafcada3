"""One client lifecycle: ``response.created`` … exactly one terminal event, numbered from 0."""

from __future__ import annotations

from typing import Literal, cast

from app.core.jsoncopy import clone
from app.protocol import events as ev
from app.protocol.events import ErrorEvent, ResponseLifecycleEvent, StreamEvent
from app.protocol.json_types import JsonObject

_TERMINAL_BY_STATUS: dict[
    str, Literal["response.completed", "response.incomplete", "response.failed"]
] = {
    "completed": ev.RESPONSE_COMPLETED,
    "incomplete": ev.RESPONSE_INCOMPLETE,
    "failed": ev.RESPONSE_FAILED,
    "cancelled": ev.RESPONSE_FAILED,
}


class ResponseLifecycle:
    """Numbers events with ``sequence_number`` and frames the start and end of a response."""

    __slots__ = ("_next", "closed")

    def __init__(self, first: int = 0) -> None:
        """``first``: the number of the first event (a background response's stream continues
        the numbers of its event log)."""
        self._next = first
        self.closed = False

    @property
    def next_number(self) -> int:
        """The number the next event gets."""
        return self._next

    def stamp(self, event: StreamEvent) -> JsonObject:
        """The event numbered: from here on it is a JSON object on its way to the client."""
        numbered = cast(JsonObject, event)  # every event is a JSON object at run time
        numbered["sequence_number"] = self._next
        self._next += 1
        return numbered

    def opening(self, response: JsonObject) -> list[JsonObject]:
        """``response.created`` then ``response.in_progress``, each with its own snapshot."""
        created: ResponseLifecycleEvent = {"type": ev.RESPONSE_CREATED, "response": clone(response)}
        in_progress: ResponseLifecycleEvent = {
            "type": ev.RESPONSE_IN_PROGRESS,
            "response": clone(response),
        }
        return [self.stamp(created), self.stamp(in_progress)]

    def closing(self, response: JsonObject) -> JsonObject:
        """The one terminal event for the response's final status."""
        self.closed = True
        kind = _TERMINAL_BY_STATUS.get(str(response.get("status")), ev.RESPONSE_COMPLETED)
        terminal: ResponseLifecycleEvent = {"type": kind, "response": response}
        return self.stamp(terminal)

    def failure(self, error: JsonObject, response: JsonObject) -> list[JsonObject]:
        """An ``error`` event then ``response.failed``: how a started stream reports a failure."""
        self.closed = True
        reported: ErrorEvent = {
            "type": ev.ERROR,
            "code": error.get("code"),
            "message": error.get("message", ""),
            "param": error.get("param"),
        }
        failed: ResponseLifecycleEvent = {"type": ev.RESPONSE_FAILED, "response": response}
        return [self.stamp(reported), self.stamp(failed)]
