"""The output items of one upstream round and the book-keeping that addresses them.

``OutputItems`` holds a round's ``output`` and, per item, an ``ItemSlot``: whether it is still
open and which of its parts (and reasoning summaries) were opened and closed. It resolves an
upstream event to the item it means (by item id first, then by ``output_index``), opens and
closes items and parts, and builds the events that say so, addressed by the item's position in
the snapshot (``output_offset`` + index) and its gateway id. ``core.item_events`` drives it
from the upstream's events (checked by ``protocol.events.checked_event``: an event's address
fields have their types); ``core.accumulator`` ties both together. Items and parts are guarded
field by field: an upstream's item objects and final output are not checked on entry.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from app.core.ids import new_id
from app.core.jsoncopy import clone
from app.core.response import normalize_item, normalize_part
from app.protocol import events as ev
from app.protocol.events import (
    ContentPartAddedEvent,
    FunctionCallArgumentsDoneEvent,
    ItemAddress,
    OutputItemAddedEvent,
    OutputItemDoneEvent,
    PartAddress,
    StreamEvent,
    SummaryAddress,
    UpstreamEvent,
)
from app.protocol.items import ITEM_ID_PREFIXES, fill_item
from app.protocol.json_types import JsonObject


class ItemSlot:
    """Book-keeping for one output item."""

    __slots__ = ("index", "open", "part_done", "parts", "summaries", "summary_done")

    def __init__(self, index: int) -> None:
        self.index = index
        self.open = True
        self.parts: dict[int, int] = {}  # upstream content_index -> position in content
        self.part_done: set[int] = set()  # positions whose content_part.done was emitted
        self.summaries: dict[int, int] = {}  # upstream summary_index -> position in summary
        self.summary_done: set[int] = set()


class OutputItems:
    """One round's output items, their slots, and the events that open and close them."""

    def __init__(self, output_offset: int = 0) -> None:
        self.output_offset = output_offset
        self.output: list[JsonObject] = []
        self._slots: list[ItemSlot] = []
        self._by_item_id: dict[str, int] = {}
        self._by_upstream_index: dict[int, int] = {}

    def close_open(self, status: str) -> list[StreamEvent]:
        """Close every item still open; returns the closing events."""
        events: list[StreamEvent] = []
        for slot in self._slots:
            if slot.open:
                events.extend(self.close_item(slot, None, status))
        return events

    # ------------------------------------------------------------------ items

    def open_item(
        self, item: JsonObject, upstream_index: int | None, upstream_id: Any
    ) -> tuple[ItemSlot, list[StreamEvent]]:
        kind = item.get("type")
        prefix = ITEM_ID_PREFIXES.get(kind) if isinstance(kind, str) else None
        if prefix is not None:
            # The gateway names the items it stores: unique and sortable, whatever the
            # upstream called them (the upstream's id still routes its later events here).
            item["id"] = new_id(prefix)
        fill_item(item)
        slot = ItemSlot(len(self.output))
        self.output.append(item)
        self._slots.append(slot)
        if isinstance(upstream_id, str) and upstream_id:
            self._by_item_id[upstream_id] = slot.index
        item_id = item.get("id")
        if isinstance(item_id, str) and item_id:
            self._by_item_id[item_id] = slot.index
        if upstream_index is not None:
            self._by_upstream_index[upstream_index] = slot.index
        added: OutputItemAddedEvent = {
            "type": ev.OUTPUT_ITEM_ADDED,
            "output_index": self.output_offset + slot.index,
            "item": clone(item),
        }
        return slot, [added]

    def close_item(
        self, slot: ItemSlot, final: JsonObject | None, status: str
    ) -> list[StreamEvent]:
        ours = self.output[slot.index]
        events = self.close_parts(slot)
        kind = ours.get("type")
        if kind in ITEM_ID_PREFIXES:
            merged = dict(final) if final is not None else dict(ours)
            merged["id"] = ours.get("id")
            if kind in ("message", "reasoning"):
                merged["content"] = pick_content(ours.get("content"), merged.get("content"))
                if kind == "reasoning":
                    merged["summary"] = pick_content(ours.get("summary"), merged.get("summary"))
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
        done: OutputItemDoneEvent = {
            "type": ev.OUTPUT_ITEM_DONE,
            "output_index": self.output_offset + slot.index,
            "item": clone(item),
        }
        events.append(done)
        return events

    def close_parts(self, slot: ItemSlot) -> list[StreamEvent]:
        """``*.done`` events for parts the upstream left open."""
        events: list[StreamEvent] = []
        item = self.output[slot.index]
        content = item.get("content") or []
        for position in sorted(set(slot.parts.values()) - slot.part_done):
            part = content[position]
            base = self.part_address(slot, position)
            kind = part.get("type")
            text = part.get("text", "")
            if kind == "output_text":
                logprobs = part.get("logprobs") or []
                events.append(
                    {"type": ev.OUTPUT_TEXT_DONE, **base, "text": text, "logprobs": logprobs}
                )
            elif kind == "reasoning_text":
                events.append({"type": ev.REASONING_TEXT_DONE, **base, "text": text})
            events.append({"type": ev.CONTENT_PART_DONE, **base, "part": clone(part)})
            slot.part_done.add(position)
        return events

    def emit_whole_item(
        self, item: JsonObject, upstream_index: int | None, status: str
    ) -> list[StreamEvent]:
        """Open, replay and close an item the stream never opened."""
        kind = item.get("type")
        if kind not in ITEM_ID_PREFIXES:
            slot, events = self.open_item(item, upstream_index, item.get("id"))
            events.extend(self.close_item(slot, None, status))
            return events
        upstream_id = item.get("id")
        skeleton = make_skeleton(kind, item)
        slot, events = self.open_item(skeleton, upstream_index, upstream_id)
        for part in item.get("content") or [] if kind in ("message", "reasoning") else []:
            if isinstance(part, dict):
                events.extend(self._replay_part(slot, part))
        if kind == "function_call":
            arguments = item.get("arguments")
            if isinstance(arguments, str) and arguments:
                skeleton["arguments"] = arguments
                base = self.item_address(slot)
                events.append(
                    {"type": ev.FUNCTION_CALL_ARGUMENTS_DELTA, **base, "delta": arguments}
                )
            events.append(self.arguments_done_event(slot))
        events.extend(self.close_item(slot, item, status))
        return events

    def _replay_part(self, slot: ItemSlot, part: JsonObject) -> list[StreamEvent]:
        content = self.output[slot.index].setdefault("content", [])
        position = len(content)
        slot.parts[-1 - position] = position  # synthetic key: never an upstream index
        kind = part.get("type")
        text = part.get("text") if isinstance(part.get("text"), str) else None
        start = normalize_part(clone(part))
        if text is not None:
            start["text"] = ""
        content.append(start)
        base = self.part_address(slot, position)
        events: list[StreamEvent] = [{"type": ev.CONTENT_PART_ADDED, **base, "part": clone(start)}]
        if text:
            if kind == "output_text":
                events.append({"type": ev.OUTPUT_TEXT_DELTA, **base, "delta": text, "logprobs": []})
            elif kind == "reasoning_text":
                events.append({"type": ev.REASONING_TEXT_DELTA, **base, "delta": text})
        content[position] = normalize_part(clone(part))
        return events

    def adopt_final_output(self, final: Any, item_status: str) -> list[StreamEvent]:
        """Reconcile the terminal response's output with what was streamed.

        Items are matched by position (servers such as vLLM rename items in the final object).
        Streamed items keep their ids and content and gain the fields only the final object has
        (``encrypted_content``, say); items the stream never showed are emitted in full.
        """
        if not isinstance(final, list):
            return []
        events: list[StreamEvent] = []
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
            events.extend(self.emit_whole_item(clone(item), None, item_status))
        return events

    # ------------------------------------------------------------------ parts

    def part_for(
        self, slot: ItemSlot, event: UpstreamEvent, kind: str
    ) -> tuple[int, list[StreamEvent]]:
        """Position of the part a content event addresses; opens the part when it is new."""
        upstream_ci = event.get("content_index")
        key = 0 if upstream_ci is None else upstream_ci
        position = slot.parts.get(key)
        content = self.output[slot.index].setdefault("content", [])
        if not isinstance(content, list):
            content = self.output[slot.index]["content"] = []
        if position is not None and position not in slot.part_done:
            return position, []
        if position is None and upstream_ci is None:
            # No index given: the last open part of the right type.
            for position in sorted(set(slot.parts.values()) - slot.part_done, reverse=True):
                if content[position].get("type") == kind:
                    return position, []
        position = len(content)
        part: JsonObject = {"type": kind, "refusal" if kind == "refusal" else "text": ""}
        content.append(normalize_part(part))
        slot.parts[key] = position
        added: ContentPartAddedEvent = {
            "type": ev.CONTENT_PART_ADDED,
            **self.part_address(slot, position),
            "part": clone(content[position]),
        }
        return position, [added]

    def summary_for(
        self, slot: ItemSlot, event: UpstreamEvent, *, emit_added: bool
    ) -> tuple[int, list[StreamEvent]]:
        upstream_si = event.get("summary_index")
        key = 0 if upstream_si is None else upstream_si
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
        return position, [
            {
                "type": ev.REASONING_SUMMARY_PART_ADDED,
                **self.summary_address(slot, position),
                "part": {"type": "summary_text", "text": ""},
            }
        ]

    # ------------------------------------------------------------------ resolution

    def find(self, item_id: Any, upstream_index: int | None, kind: Any) -> ItemSlot | None:
        """The slot an upstream event refers to, by item id first, then by output_index.

        ``item_id`` may be an upstream item's own ``id``, which no check has seen.
        """
        index = self._by_item_id.get(item_id) if isinstance(item_id, str) and item_id else None
        if index is None and upstream_index is not None:
            index = self._by_upstream_index.get(upstream_index)
        if index is None:
            return None
        if kind is not None and self.output[index].get("type") != kind:
            return None
        return self._slots[index]

    def slot_for(self, event: UpstreamEvent, kind: str) -> tuple[ItemSlot, list[StreamEvent]]:
        """The open item of type ``kind`` an event addresses; opened when it is missing.

        A delta that names a closed item, or an item of another type (gpt-oss reuses the
        reasoning item's id for the message that follows), gets a new item of its own.
        """
        slot = self.find(event.get("item_id"), event.get("output_index"), kind)
        if slot is not None and slot.open:
            return slot, []
        skeleton = make_skeleton(kind, event)
        return self.open_item(skeleton, event.get("output_index"), event.get("item_id"))

    def item_address(self, slot: ItemSlot) -> ItemAddress:
        return {
            "item_id": self.output[slot.index].get("id"),
            "output_index": self.output_offset + slot.index,
        }

    def part_address(self, slot: ItemSlot, position: int) -> PartAddress:
        return {**self.item_address(slot), "content_index": position}

    def summary_address(self, slot: ItemSlot, position: int) -> SummaryAddress:
        return {**self.item_address(slot), "summary_index": position}

    def arguments_done_event(self, slot: ItemSlot) -> FunctionCallArgumentsDoneEvent:
        item = self.output[slot.index]
        return {
            "type": ev.FUNCTION_CALL_ARGUMENTS_DONE,
            **self.item_address(slot),
            "name": item.get("name") or "",
            "arguments": item.get("arguments") or "",
        }

    def passthrough(self, event: JsonObject) -> JsonObject:
        """An event of a type the gateway does not know (not checked: its fields are guarded
        here), rebased onto the item it names."""
        out = dict(event)
        out.pop("sequence_number", None)
        item_id = event.get("item_id")
        upstream_index = event.get("output_index")
        upstream_index = upstream_index if isinstance(upstream_index, int) else None
        slot = self.find(item_id, upstream_index, None)
        if slot is not None:
            if upstream_index is not None:
                out["output_index"] = self.output_offset + slot.index
            if isinstance(item_id, str):
                out["item_id"] = self.output[slot.index].get("id")
        return out


def make_skeleton(kind: str, source: Mapping[str, Any]) -> JsonObject:
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
        item = {**clone(dict(source)), "id": item["id"], "type": kind}
        if "status" in source or kind.endswith("_call"):
            item["status"] = "in_progress"
    return item


def pick_content(ours: Any, theirs: Any) -> Any:
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
