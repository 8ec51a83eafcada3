"""Fold upstream stream events into a Response snapshot and a normalized event stream.

``ResponseAccumulator.feed(event)`` is pure (no I/O): it updates the snapshot and returns the
events the client should see for that upstream event, already repaired:

* every item is opened by ``response.output_item.added`` and closed by ``output_item.done``,
  even when the upstream skipped the ``added`` (gpt-oss on vLLM, for the message that follows
  reasoning) or sent an item only as ``*.done``;
* ``content_index`` and ``output_index`` are positions in the snapshot, whatever the upstream
  numbered them (vLLM may open a message's first part at ``content_index`` 1);
* vLLM's ``response.reasoning_part.*`` become ``response.content_part.*``; ``response.done``
  is a terminal event like ``response.completed``;
* items of the known types get the gateway's own ids (``msg_…``, ``fc_…``: UUIDv7-based, so
  unique and sortable), stable between ``added``, deltas, ``done`` and the final output;
* unknown event and item types are carried through unchanged (only ``output_index`` and
  ``item_id`` are rebased so that they keep pointing at the same item).

This module dispatches the events and keeps the response-level state (status, usage, error);
``core.item_events`` folds the item events, ``core.item_state`` holds the items and their parts.
Sequence numbers are not assigned here: ``core.stream.ResponseLifecycle`` numbers what it emits.
"""

from __future__ import annotations

from app.core.item_events import Handler, ItemEvents
from app.core.item_state import OutputItems
from app.core.response import normalize_usage
from app.protocol import events as ev
from app.protocol.events import StreamEvent, UpstreamEvent
from app.protocol.json_types import JsonObject

_TERMINAL_STATUS = {
    ev.RESPONSE_COMPLETED: "completed",
    ev.RESPONSE_INCOMPLETE: "incomplete",
    ev.RESPONSE_FAILED: "failed",
}


class ResponseAccumulator:
    """Folds one upstream response stream (one round) into ``output`` and client events."""

    def __init__(self, output_offset: int = 0) -> None:
        self._items = OutputItems(output_offset)
        self.upstream_response: JsonObject = {}
        self.status: str | None = None
        self.usage: JsonObject | None = None
        self.error: JsonObject | None = None
        self.incomplete_details: JsonObject | None = None
        self.finished = False
        self._handlers: dict[str, Handler] = {
            ev.RESPONSE_CREATED: self._on_lifecycle,
            ev.RESPONSE_IN_PROGRESS: self._on_lifecycle,
            ev.RESPONSE_QUEUED: self._on_lifecycle,
            ev.RESPONSE_COMPLETED: self._on_terminal,
            ev.RESPONSE_INCOMPLETE: self._on_terminal,
            ev.RESPONSE_FAILED: self._on_terminal,
            ev.RESPONSE_DONE: self._on_terminal,
            ev.ERROR: self._on_error,
            ev.STREAM_DONE: self._on_stream_done,
            **ItemEvents(self._items).handlers(),
        }

    # ------------------------------------------------------------------ public API

    @property
    def output(self) -> list[JsonObject]:
        """The round's output items, as they stand."""
        return self._items.output

    def feed(self, event: JsonObject) -> list[StreamEvent]:
        """Fold one upstream event; return the client events it produces (unnumbered)."""
        if self.finished:
            return []
        kind = event.get("type")
        if kind is None and event.get("object") == "response":
            # Older gateways end a stream with the bare Response object.
            return self._on_terminal({"type": ev.RESPONSE_DONE, "response": event})
        handler = self._handlers.get(kind) if isinstance(kind, str) else None
        if handler is None:
            return [self._items.passthrough(event)]
        checked = ev.checked_event(event)
        return [] if checked is None else handler(checked)

    def finish(self, status: str = "completed") -> list[StreamEvent]:
        """Close every item still open (the stream ended); returns the closing events."""
        return self._items.close_open(status)

    def cut_short(self, details: JsonObject) -> list[StreamEvent]:
        """End the response ``incomplete`` for ``details`` (the request's deadline): every open
        item is closed; returns the closing events."""
        events = self.finish("incomplete")
        self.status, self.incomplete_details, self.finished = "incomplete", details, True
        return events

    # ------------------------------------------------------------------ lifecycle

    def _on_lifecycle(self, event: UpstreamEvent) -> list[StreamEvent]:
        self.upstream_response = event["response"]  # checked_event drops it without one
        return []

    def _on_terminal(self, event: UpstreamEvent) -> list[StreamEvent]:
        # The final Response object: its fields are the upstream's, checked one by one here.
        response = event.get("response", {})
        self.upstream_response = {**self.upstream_response, **response}
        status = _TERMINAL_STATUS.get(event["type"]) or str(response.get("status") or "completed")
        if status not in ("completed", "incomplete", "failed", "cancelled"):
            status = "completed"
        self.status = status
        self.usage = normalize_usage(response.get("usage"))
        error = response.get("error")
        self.error = error if isinstance(error, dict) else None
        details = response.get("incomplete_details")
        self.incomplete_details = details if isinstance(details, dict) else None
        item_status = "completed" if status == "completed" else "incomplete"
        events = self.finish(item_status)
        events.extend(self._items.adopt_final_output(response.get("output"), item_status))
        self.finished = True
        return events

    def _on_stream_done(self, event: UpstreamEvent) -> list[StreamEvent]:
        """``data: [DONE]`` with no terminal event before it: the upstream finished normally."""
        return self._on_terminal({"type": ev.RESPONSE_COMPLETED, "response": {}})

    def _on_error(self, event: UpstreamEvent) -> list[StreamEvent]:
        self.status = "failed"
        self.error = {
            "code": str(event.get("code") or "upstream_error"),
            "message": str(event.get("message") or "the upstream reported an error"),
        }
        if event.get("param") is not None:
            self.error["param"] = str(event["param"])
        self.finished = True
        return []
