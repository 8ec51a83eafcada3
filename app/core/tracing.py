"""The tracing port of the tool loop: a span around each gateway tool call.

``ToolEvents.tracer`` (``core.observe``) is a ``CallTracer``; ``core.call_runner`` calls
``start`` with a call's ``tool_call.started`` event, in the call's own task, and ends the span
with the call's ``tool_call.completed`` or ``tool_call.failed`` event (``None``: the call was
cancelled). The bus's hooks get the same events later, from another task, where a span could no
longer be parented on the request's trace: so the spans are made here, inline, and the
kernel knows no tracing library. The default, ``NO_TRACING``, does nothing.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from app.core.observe import ToolCallEvent


class CallSpan(Protocol):
    def end(self, event: ToolCallEvent | None) -> None:
        """End the span with the call's last event (``None``: cancelled)."""
        ...


class CallTracer(Protocol):
    def start(self, event: ToolCallEvent, call_id: str) -> CallSpan:
        """A span for the call that ``event`` (``tool_call.started``) starts; ``call_id`` is
        the model's id of the call."""
        ...


class _NoSpan:
    __slots__ = ()

    def end(self, event: ToolCallEvent | None) -> None:
        return None


class _NoTracing:
    __slots__ = ()

    def start(self, event: ToolCallEvent, call_id: str) -> CallSpan:
        return _NO_SPAN


_NO_SPAN = _NoSpan()
NO_TRACING: CallTracer = _NoTracing()
