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

Sequence numbers are not assigned here: ``core.stream.ResponseLifecycle`` numbers what it emits.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from app.core.ids import new_id
from app.core.jsoncopy import clone
from app.core.response import normalize_item, normalize_part, normalize_usage
from app.protocol import events as ev
from app.protocol.items import ITEM_ID_PREFIXES, fill_item
from app.protocol.json_types import JsonObject

Handler = Callable[[JsonObject], list[JsonObject]]

_TERMINAL_STATUS = {
    ev.RESPONSE_COMPLETED: "completed",
    ev.RESPONSE_INCOMPLETE: "incomplete",
    ev.RESPONSE_FAILED: "failed",
}

# Which part types belong to which item type, and the item type a part-less delta implies.
_PART_OWNER = {"output_text": "message", "refusal": "message", "reasoning_text": "reasoning"}


class _Slot:
    """Book-keeping for one output item."""

    __slots__ = ("index", "open", "part_done", "parts", "summaries", "summary_done")

    def __init__(self, index: int) -> None:
        self.index = index
        self.open = True
        self.parts: dict[int, int] = {}  # upstream content_index -> position in content
        self.part_done: set[int] = set()  # positions whose content_part.done was emitted
        self.summaries: dict[int, int] = {}  # upstream summary_index -> position in summary
        self.summary_done: set[int] = set()


class ResponseAccumulator:
    """Folds one upstream response stream (one round) into ``output`` and client events."""

    def __init__(self, output_offset: int = 0) -> None:
        self.output_offset = output_offset
        self.output: list[JsonObject] = []
        self.upstream_response: JsonObject = {}
        self.status: str | None = None
        self.usage: JsonObject | None = None
        self.error: JsonObject | None = None
        self.incomplete_details: JsonObject | None = None
        self.finished = False
        self._slots: list[_Slot] = []
        self._by_item_id: dict[str, int] = {}
        self._by_upstream_index: dict[int, int] = {}
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
            ev.OUTPUT_ITEM_ADDED: self._on_item_added,
            ev.OUTPUT_ITEM_DONE: self._on_item_done,
            ev.CONTENT_PART_ADDED: self._on_part_added,
            ev.REASONING_PART_ADDED: self._on_part_added,
            ev.CONTENT_PART_DONE: self._on_part_done,
            ev.REASONING_PART_DONE: self._on_part_done,
            ev.OUTPUT_TEXT_DELTA: self._on_text_delta,
            ev.REFUSAL_DELTA: self._on_text_delta,
            ev.REASONING_TEXT_DELTA: self._on_text_delta,
            ev.OUTPUT_TEXT_DONE: self._on_text_done,
            ev.REFUSAL_DONE: self._on_text_done,
            ev.REASONING_TEXT_DONE: self._on_text_done,
            ev.OUTPUT_TEXT_ANNOTATION_ADDED: self._on_annotation,
            ev.FUNCTION_CALL_ARGUMENTS_DELTA: self._on_arguments_delta,
            ev.FUNCTION_CALL_ARGUMENTS_DONE: self._on_arguments_done,
            ev.REASONING_SUMMARY_PART_ADDED: self._on_summary_part_added,
            ev.REASONING_SUMMARY_PART_DONE: self._on_summary_part_done,
            ev.REASONING_SUMMARY_TEXT_DELTA: self._on_summary_text_delta,
            ev.REASONING_SUMMARY_TEXT_DONE: self._on_summary_text_done,
        }

    # ------------------------------------------------------------------ public API

    def feed(self, event: JsonObject) -> list[JsonObject]:
        """Fold one upstream event; return the client events it produces (unnumbered)."""
        if self.finished:
            return []
        kind = event.get("type")
        if kind is None and event.get("object") == "response":
            # Older gateways end a stream with the bare Response object.
            return self._on_terminal({"type": ev.RESPONSE_DONE, "response": event})
        handler = self._handlers.get(kind) if isinstance(kind, str) else None
        if handler is None:
            return [self._passthrough(event)]
        return handler(event)

    def finish(self, status: str = "completed") -> list[JsonObject]:
        """Close every item still open (the stream ended); returns the closing events."""
        events: list[JsonObject] = []
        for slot in self._slots:
            if slot.open:
                events.extend(self._close_item(slot, None, status))
        return events

    # ------------------------------------------------------------------ lifecycle

    def _on_lifecycle(self, event: JsonObject) -> list[JsonObject]:
        response = event.get("response")
        if isinstance(response, dict):
            self.upstream_response = response
        return []

    def _on_terminal(self, event: JsonObject) -> list[JsonObject]:
        response = event.get("response")
        response = response if isinstance(response, dict) else {}
        self.upstream_response = {**self.upstream_response, **response}
        kind = event.get("type", "")
        status = _TERMINAL_STATUS.get(kind) or str(response.get("status") or "completed")
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
        events.extend(self._adopt_final_output(response.get("output"), item_status))
        self.finished = True
        return events

    def _on_stream_done(self, event: JsonObject) -> list[JsonObject]:
        """``data: [DONE]`` with no terminal event before it: the upstream finished normally."""
        return self._on_terminal({"type": ev.RESPONSE_COMPLETED, "response": {}})

    def _on_error(self, event: JsonObject) -> list[JsonObject]:
        self.status = "failed"
        self.error = {
            "code": str(event.get("code") or "upstream_error"),
            "message": str(event.get("message") or "the upstream reported an error"),
        }
        if event.get("param") is not None:
            self.error["param"] = str(event["param"])
        self.finished = True
        return []

    def _adopt_final_output(self, final: Any, item_status: str) -> list[JsonObject]:
        """Reconcile the terminal response's output with what was streamed.

        Items are matched by position (servers such as vLLM rename items in the final object).
        Streamed items keep their ids and content and gain the fields only the final object has
        (``encrypted_content``, say); items the stream never showed are emitted in full.
        """
        if not isinstance(final, list):
            return []
        events: list[JsonObject] = []
        for position, item in enumerate(final):
            if not isinstance(item, dict):
                continue
            if position < len(self.output):
                ours = self.output[position]
                if ours.get("type") == item.get("type"):
                    for key, value in item.items():
                        if key not in ours:
                            ours[key] = clone(value)
                continue
            events.extend(self._emit_whole_item(clone(item), None, item_status))
        return events

    # ------------------------------------------------------------------ items

    def _on_item_added(self, event: JsonObject) -> list[JsonObject]:
        item = event.get("item")
        if not isinstance(item, dict):
            return []
        existing = self._find(item.get("id"), event.get("output_index"), item.get("type"))
        if existing is not None and existing.open:
            return []  # a repeated ``added`` for an item already open
        item = clone(item)
        if item.get("type") in ITEM_ID_PREFIXES:
            item["status"] = "in_progress"
            if item.get("type") == "message" and not isinstance(item.get("content"), list):
                item["content"] = []
        _, events = self._open_item(item, event.get("output_index"), item.get("id"))
        slot = self._slots[-1]
        for position, part in enumerate(item.get("content") or []):
            if isinstance(part, dict):
                slot.parts[position] = position
        return events

    def _on_item_done(self, event: JsonObject) -> list[JsonObject]:
        item = event.get("item")
        if not isinstance(item, dict):
            return []
        item = clone(item)
        slot = self._find(item.get("id"), event.get("output_index"), item.get("type"))
        if slot is None:
            # Only ``done`` arrived: open it, replay its content, close it.
            return self._emit_whole_item(item, event.get("output_index"), "completed")
        if not slot.open:
            return []  # a repeated ``done``
        return self._close_item(slot, item, "completed")

    def _open_item(
        self, item: JsonObject, upstream_index: Any, upstream_id: Any
    ) -> tuple[_Slot, list[JsonObject]]:
        kind = item.get("type")
        prefix = ITEM_ID_PREFIXES.get(kind) if isinstance(kind, str) else None
        if prefix is not None:
            # The gateway names the items it stores: unique and sortable, whatever the
            # upstream called them (the upstream's id still routes its later events here).
            item["id"] = new_id(prefix)
        fill_item(item)
        slot = _Slot(len(self.output))
        self.output.append(item)
        self._slots.append(slot)
        if isinstance(upstream_id, str) and upstream_id:
            self._by_item_id[upstream_id] = slot.index
        item_id = item.get("id")
        if isinstance(item_id, str) and item_id:
            self._by_item_id[item_id] = slot.index
        if isinstance(upstream_index, int):
            self._by_upstream_index[upstream_index] = slot.index
        added = {
            "type": ev.OUTPUT_ITEM_ADDED,
            "output_index": self.output_offset + slot.index,
            "item": clone(item),
        }
        return slot, [added]

    def _close_item(self, slot: _Slot, final: JsonObject | None, status: str) -> list[JsonObject]:
        ours = self.output[slot.index]
        events = self._close_parts(slot)
        kind = ours.get("type")
        if kind in ITEM_ID_PREFIXES:
            merged = dict(final) if final is not None else dict(ours)
            merged["id"] = ours.get("id")
            if kind in ("message", "reasoning"):
                merged["content"] = _pick_content(ours.get("content"), merged.get("content"))
                if kind == "reasoning":
                    merged["summary"] = _pick_content(ours.get("summary"), merged.get("summary"))
            elif kind == "function_call":
                if not isinstance(merged.get("arguments"), str):
                    merged["arguments"] = ours.get("arguments", "")
                merged["call_id"] = ours.get("call_id") or merged.get("call_id")
                merged["name"] = merged.get("name") or ours.get("name") or ""
            if final is None or merged.get("status") in (None, "in_progress"):
                merged["status"] = status
            item = normalize_item(merged, status=status)
        else:
            item = final if final is not None else ours
        self.output[slot.index] = item
        slot.open = False
        events.append(
            {
                "type": ev.OUTPUT_ITEM_DONE,
                "output_index": self.output_offset + slot.index,
                "item": clone(item),
            }
        )
        return events

    def _close_parts(self, slot: _Slot) -> list[JsonObject]:
        """``*.done`` events for parts the upstream left open."""
        events: list[JsonObject] = []
        item = self.output[slot.index]
        content = item.get("content") or []
        for position in sorted(set(slot.parts.values()) - slot.part_done):
            part = content[position]
            base = self._address(slot, position)
            kind = part.get("type")
            if kind in ("output_text", "reasoning_text"):
                done_type = ev.OUTPUT_TEXT_DONE if kind == "output_text" else ev.REASONING_TEXT_DONE
                done = {"type": done_type, **base, "text": part.get("text", "")}
                if kind == "output_text":
                    done["logprobs"] = part.get("logprobs") or []
                events.append(done)
            events.append({"type": ev.CONTENT_PART_DONE, **base, "part": clone(part)})
            slot.part_done.add(position)
        return events

    def _emit_whole_item(
        self, item: JsonObject, upstream_index: Any, status: str
    ) -> list[JsonObject]:
        """Open, replay and close an item the stream never opened."""
        kind = item.get("type")
        if kind not in ITEM_ID_PREFIXES:
            slot, events = self._open_item(item, upstream_index, item.get("id"))
            events.extend(self._close_item(slot, None, status))
            return events
        upstream_id = item.get("id")
        skeleton = _skeleton(kind, item)
        slot, events = self._open_item(skeleton, upstream_index, upstream_id)
        for part in item.get("content") or [] if kind in ("message", "reasoning") else []:
            if isinstance(part, dict):
                events.extend(self._replay_part(slot, part))
        if kind == "function_call":
            arguments = item.get("arguments")
            if isinstance(arguments, str) and arguments:
                skeleton["arguments"] = arguments
                events.append(
                    {
                        "type": ev.FUNCTION_CALL_ARGUMENTS_DELTA,
                        "item_id": skeleton["id"],
                        "output_index": self.output_offset + slot.index,
                        "delta": arguments,
                    }
                )
            events.append(self._arguments_done_event(slot))
        events.extend(self._close_item(slot, item, status))
        return events

    def _replay_part(self, slot: _Slot, part: JsonObject) -> list[JsonObject]:
        content = self.output[slot.index].setdefault("content", [])
        position = len(content)
        slot.parts[-1 - position] = position  # synthetic key: never an upstream index
        kind = part.get("type")
        text = part.get("text") if isinstance(part.get("text"), str) else None
        start = normalize_part(clone(part))
        if text is not None:
            start["text"] = ""
        content.append(start)
        base = self._address(slot, position)
        events: list[JsonObject] = [{"type": ev.CONTENT_PART_ADDED, **base, "part": clone(start)}]
        if text is not None and kind in ("output_text", "reasoning_text"):
            delta_type = ev.OUTPUT_TEXT_DELTA if kind == "output_text" else ev.REASONING_TEXT_DELTA
            if text:
                delta = {"type": delta_type, **base, "delta": text}
                if kind == "output_text":
                    delta["logprobs"] = []
                events.append(delta)
        content[position] = normalize_part(clone(part))
        return events

    # ------------------------------------------------------------------ content parts

    def _on_part_added(self, event: JsonObject) -> list[JsonObject]:
        part = event.get("part")
        part = clone(part) if isinstance(part, dict) else {"type": "output_text"}
        kind = part.get("type")
        owner = _PART_OWNER.get(kind if isinstance(kind, str) else "", "message")
        slot, events = self._slot_for(event, owner)
        upstream_ci = event.get("content_index")
        key = upstream_ci if isinstance(upstream_ci, int) else len(slot.parts)
        if key in slot.parts and slot.parts[key] not in slot.part_done:
            return events  # repeated ``added``
        content = self.output[slot.index].setdefault("content", [])
        if not isinstance(content, list):
            content = self.output[slot.index]["content"] = []
        position = len(content)
        if kind in ("output_text", "reasoning_text", "refusal"):
            part.setdefault("text" if kind != "refusal" else "refusal", "")
        content.append(normalize_part(part))
        slot.parts[key] = position
        out = _copy_event(event, ev.CONTENT_PART_ADDED)
        out.update(self._address(slot, position))
        out["part"] = clone(content[position])
        events.append(out)
        return events

    def _on_part_done(self, event: JsonObject) -> list[JsonObject]:
        part = event.get("part")
        part = clone(part) if isinstance(part, dict) else {}
        kind = part.get("type") or "output_text"
        owner = _PART_OWNER.get(kind, "message")
        slot, events = self._slot_for(event, owner)
        position, opened = self._part_for(slot, event, kind)
        events.extend(opened)
        if position in slot.part_done:
            return events
        content = self.output[slot.index]["content"]
        ours = content[position]
        merged = {**ours, **part}
        for field in ("text", "refusal"):
            if field in ours and not isinstance(part.get(field), str):
                merged[field] = ours[field]
        content[position] = normalize_part(merged)
        slot.part_done.add(position)
        out = _copy_event(event, ev.CONTENT_PART_DONE)
        out.update(self._address(slot, position))
        out["part"] = clone(content[position])
        events.append(out)
        return events

    def _on_text_delta(self, event: JsonObject) -> list[JsonObject]:
        kind = _delta_part_type(event.get("type", ""))
        slot, events = self._slot_for(event, _PART_OWNER[kind])
        position, opened = self._part_for(slot, event, kind)
        events.extend(opened)
        field = "refusal" if kind == "refusal" else "text"
        part = self.output[slot.index]["content"][position]
        delta = event.get("delta")
        delta = delta if isinstance(delta, str) else ""
        part[field] = (part.get(field) or "") + delta
        out = _copy_event(event, event["type"])
        out.update(self._address(slot, position))
        out["delta"] = delta
        if kind == "output_text" and out.get("logprobs") is None:
            out["logprobs"] = []
        events.append(out)
        return events

    def _on_text_done(self, event: JsonObject) -> list[JsonObject]:
        kind = _delta_part_type(event.get("type", ""))
        slot, events = self._slot_for(event, _PART_OWNER[kind])
        position, opened = self._part_for(slot, event, kind)
        events.extend(opened)
        field = "refusal" if kind == "refusal" else "text"
        part = self.output[slot.index]["content"][position]
        final = event.get(field)
        if isinstance(final, str):
            part[field] = final
        out = _copy_event(event, event["type"])
        out.update(self._address(slot, position))
        out[field] = part.get(field, "")
        if kind == "output_text" and out.get("logprobs") is None:
            out["logprobs"] = []
        events.append(out)
        return events

    def _on_annotation(self, event: JsonObject) -> list[JsonObject]:
        slot, events = self._slot_for(event, "message")
        position, opened = self._part_for(slot, event, "output_text")
        events.extend(opened)
        part = self.output[slot.index]["content"][position]
        annotation = event.get("annotation")
        if isinstance(annotation, dict):
            part.setdefault("annotations", []).append(clone(annotation))
        out = _copy_event(event, event["type"])
        out.update(self._address(slot, position))
        out["annotation_index"] = len(part.get("annotations") or []) - 1
        events.append(out)
        return events

    def _part_for(self, slot: _Slot, event: JsonObject, kind: str) -> tuple[int, list[JsonObject]]:
        """Position of the part a content event addresses; opens the part when it is new."""
        upstream_ci = event.get("content_index")
        key = upstream_ci if isinstance(upstream_ci, int) else 0
        position = slot.parts.get(key)
        content = self.output[slot.index].setdefault("content", [])
        if not isinstance(content, list):
            content = self.output[slot.index]["content"] = []
        if position is not None and position not in slot.part_done:
            return position, []
        if position is None and not isinstance(upstream_ci, int):
            # No index given: the last open part of the right type.
            for position in sorted(set(slot.parts.values()) - slot.part_done, reverse=True):
                if content[position].get("type") == kind:
                    return position, []
        position = len(content)
        part: JsonObject = {"type": kind, "refusal" if kind == "refusal" else "text": ""}
        content.append(normalize_part(part))
        slot.parts[key] = position
        added = {
            "type": ev.CONTENT_PART_ADDED,
            **self._address(slot, position),
            "part": clone(content[position]),
        }
        return position, [added]

    # ------------------------------------------------------------------ function calls

    def _on_arguments_delta(self, event: JsonObject) -> list[JsonObject]:
        slot, events = self._slot_for(event, "function_call")
        item = self.output[slot.index]
        delta = event.get("delta")
        delta = delta if isinstance(delta, str) else ""
        item["arguments"] = (item.get("arguments") or "") + delta
        out = _copy_event(event, event["type"])
        out.update(self._address(slot, None))
        out["delta"] = delta
        events.append(out)
        return events

    def _on_arguments_done(self, event: JsonObject) -> list[JsonObject]:
        slot, events = self._slot_for(event, "function_call")
        item = self.output[slot.index]
        arguments = event.get("arguments")
        if isinstance(arguments, str):
            item["arguments"] = arguments
        name = event.get("name")
        if isinstance(name, str) and name and not item.get("name"):
            item["name"] = name
        out = _copy_event(event, event["type"])
        out.update(self._arguments_done_event(slot))
        events.append(out)
        return events

    def _arguments_done_event(self, slot: _Slot) -> JsonObject:
        item = self.output[slot.index]
        return {
            "type": ev.FUNCTION_CALL_ARGUMENTS_DONE,
            **self._address(slot, None),
            "name": item.get("name") or "",
            "arguments": item.get("arguments") or "",
        }

    # ------------------------------------------------------------------ reasoning summaries

    def _on_summary_part_added(self, event: JsonObject) -> list[JsonObject]:
        slot, events = self._slot_for(event, "reasoning")
        position, opened = self._summary_for(slot, event, emit_added=False)
        part = event.get("part")
        if isinstance(part, dict):
            summary = self.output[slot.index]["summary"]
            summary[position] = {**summary[position], **clone(part)}
        out = _copy_event(event, event["type"])
        out.update(self._summary_address(slot, position))
        out["part"] = clone(self.output[slot.index]["summary"][position])
        events.extend(opened)
        events.append(out)
        return events

    def _on_summary_text_delta(self, event: JsonObject) -> list[JsonObject]:
        slot, events = self._slot_for(event, "reasoning")
        position, opened = self._summary_for(slot, event, emit_added=True)
        events.extend(opened)
        part = self.output[slot.index]["summary"][position]
        delta = event.get("delta")
        delta = delta if isinstance(delta, str) else ""
        part["text"] = (part.get("text") or "") + delta
        out = _copy_event(event, event["type"])
        out.update(self._summary_address(slot, position))
        out["delta"] = delta
        events.append(out)
        return events

    def _on_summary_text_done(self, event: JsonObject) -> list[JsonObject]:
        slot, events = self._slot_for(event, "reasoning")
        position, opened = self._summary_for(slot, event, emit_added=True)
        events.extend(opened)
        part = self.output[slot.index]["summary"][position]
        if isinstance(event.get("text"), str):
            part["text"] = event["text"]
        out = _copy_event(event, event["type"])
        out.update(self._summary_address(slot, position))
        out["text"] = part.get("text", "")
        events.append(out)
        return events

    def _on_summary_part_done(self, event: JsonObject) -> list[JsonObject]:
        slot, events = self._slot_for(event, "reasoning")
        position, opened = self._summary_for(slot, event, emit_added=True)
        events.extend(opened)
        summary = self.output[slot.index]["summary"]
        part = event.get("part")
        if isinstance(part, dict):
            text = summary[position].get("text", "")
            summary[position] = {**summary[position], **clone(part)}
            if not isinstance(part.get("text"), str):
                summary[position]["text"] = text
        slot.summary_done.add(position)
        out = _copy_event(event, event["type"])
        out.update(self._summary_address(slot, position))
        out["part"] = clone(summary[position])
        events.append(out)
        return events

    def _summary_for(
        self, slot: _Slot, event: JsonObject, *, emit_added: bool
    ) -> tuple[int, list[JsonObject]]:
        upstream_si = event.get("summary_index")
        key = upstream_si if isinstance(upstream_si, int) else 0
        summary = self.output[slot.index].get("summary")
        if not isinstance(summary, list):
            summary = self.output[slot.index]["summary"] = []
        position = slot.summaries.get(key)
        if position is not None:
            return position, []
        position = len(summary)
        summary.append({"type": "summary_text", "text": ""})
        slot.summaries[key] = position
        if not emit_added:
            return position, []
        added = {
            "type": ev.REASONING_SUMMARY_PART_ADDED,
            **self._summary_address(slot, position),
            "part": {"type": "summary_text", "text": ""},
        }
        return position, [added]

    # ------------------------------------------------------------------ resolution

    def _find(self, item_id: Any, upstream_index: Any, kind: Any) -> _Slot | None:
        """The slot an upstream event refers to, by item id first, then by output_index."""
        index = self._by_item_id.get(item_id) if isinstance(item_id, str) and item_id else None
        if index is None and isinstance(upstream_index, int):
            index = self._by_upstream_index.get(upstream_index)
        if index is None:
            return None
        if kind is not None and self.output[index].get("type") != kind:
            return None
        return self._slots[index]

    def _slot_for(self, event: JsonObject, kind: str) -> tuple[_Slot, list[JsonObject]]:
        """The open item of type ``kind`` an event addresses; opened when it is missing.

        A delta that names a closed item, or an item of another type (gpt-oss reuses the
        reasoning item's id for the message that follows), gets a new item of its own.
        """
        slot = self._find(event.get("item_id"), event.get("output_index"), kind)
        if slot is not None and slot.open:
            return slot, []
        skeleton = _skeleton(kind, event)
        return self._open_item(skeleton, event.get("output_index"), event.get("item_id"))

    def _address(self, slot: _Slot, position: int | None) -> JsonObject:
        out: JsonObject = {
            "item_id": self.output[slot.index].get("id"),
            "output_index": self.output_offset + slot.index,
        }
        if position is not None:
            out["content_index"] = position
        return out

    def _summary_address(self, slot: _Slot, position: int) -> JsonObject:
        return {
            "item_id": self.output[slot.index].get("id"),
            "output_index": self.output_offset + slot.index,
            "summary_index": position,
        }

    def _passthrough(self, event: JsonObject) -> JsonObject:
        out = dict(event)
        out.pop("sequence_number", None)
        slot = self._find(event.get("item_id"), event.get("output_index"), None)
        if slot is not None:
            if isinstance(event.get("output_index"), int):
                out["output_index"] = self.output_offset + slot.index
            if isinstance(event.get("item_id"), str):
                out["item_id"] = self.output[slot.index].get("id")
        return out


def _copy_event(event: JsonObject, kind: str) -> JsonObject:
    out = dict(event)
    out.pop("sequence_number", None)
    out["type"] = kind
    return out


def _delta_part_type(event_type: str) -> str:
    if event_type.startswith("response.reasoning_text"):
        return "reasoning_text"
    if event_type.startswith("response.refusal"):
        return "refusal"
    return "output_text"


def _skeleton(kind: str, source: JsonObject) -> JsonObject:
    """An empty, in-progress item of ``kind`` (fields taken from ``source`` where it has them)."""
    item_id = source.get("item_id") or source.get("id")
    item: JsonObject = {"id": item_id if isinstance(item_id, str) else "", "type": kind}
    if kind == "message":
        item.update(role=source.get("role") or "assistant", status="in_progress", content=[])
    elif kind == "function_call":
        call_id = source.get("call_id")
        item.update(
            call_id=call_id if isinstance(call_id, str) and call_id else new_id("call"),
            name=source.get("name") or "",
            arguments="",
            status="in_progress",
        )
    elif kind == "reasoning":
        item.update(summary=[], content=[], status="in_progress")
    else:
        # Another known type (a tool kind's: ``mcp_list_tools`` …) has no events of its
        # own to fill it: it opens with the fields it has, so that it validates as its type.
        item = {**clone(source), "id": item["id"], "type": kind}
        if "status" in source or kind.endswith("_call"):
            item["status"] = "in_progress"
    return item


def _pick_content(ours: Any, theirs: Any) -> Any:
    """The final item's parts when they line up with the streamed ones, else the streamed."""
    if isinstance(theirs, list) and isinstance(ours, list) and len(theirs) == len(ours):
        merged = []
        for mine, final in zip(ours, theirs, strict=True):
            if isinstance(final, dict) and isinstance(mine, dict):
                part = {**mine, **final}
                for field in ("text", "refusal"):
                    if field in mine and not isinstance(final.get(field), str):
                        part[field] = mine[field]
                merged.append(normalize_part(part))
            else:
                merged.append(final)
        return merged
    if isinstance(ours, list) and ours:
        return ours
    return theirs if theirs is not None else ours
