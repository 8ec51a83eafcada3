"""The item and content events of an upstream stream, folded into ``core.item_state``.

``ItemEvents`` has one handler per upstream event type about an item (``output_item.*``,
``content_part.*`` and vLLM's ``reasoning_part.*``, text, refusal and reasoning deltas,
annotations, function-call arguments, reasoning summaries). Each updates the items and returns
the client's events for it, repaired: a missing item or part is opened first, and indexes are
the snapshot's positions. The events come checked (``protocol.events.checked_event``): the
fields read here have their types, so only the item and part objects' own fields are guarded.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from dataclasses import field as dataclass_field
from typing import Any

from app.core.item_state import ItemSlot, OutputItems
from app.core.jsoncopy import clone
from app.core.response import normalize_part
from app.protocol import events as ev
from app.protocol.events import StreamEvent, UpstreamEvent
from app.protocol.items import ITEM_ID_PREFIXES
from app.protocol.json_types import JsonObject

Handler = Callable[[UpstreamEvent], list[StreamEvent]]

# Which part types belong to which item type, and the item type a part-less delta implies.
_PART_OWNER = {"output_text": "message", "refusal": "message", "reasoning_text": "reasoning"}


class ItemEvents:
    """The handlers of the item events, over one round's ``OutputItems``."""

    def __init__(self, items: OutputItems) -> None:
        self.items = items
        # The last text delta's address and where it went: the next delta of the same part
        # (nearly every event of a stream) skips the look-ups (``_on_text_delta``).
        self._last_delta: _DeltaTarget | None = None
        self._text_target: tuple[ItemSlot, int] = (ItemSlot(-1), -1)  # ``_text_event``'s last

    def handlers(self) -> dict[str, Handler]:
        """The handler of each upstream event type this class folds."""
        return {
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

    # ------------------------------------------------------------------ items

    def _on_item_added(self, event: UpstreamEvent) -> list[StreamEvent]:
        items = self.items
        item = event["item"]  # checked_event drops the event without one
        existing = items.find(item.get("id"), event.get("output_index"), item.get("type"))
        if existing is not None and existing.open:
            return []  # a repeated ``added`` for an item already open
        item = clone(item)
        if item.get("type") in ITEM_ID_PREFIXES:
            item["status"] = "in_progress"
            if item.get("type") == "message" and not isinstance(item.get("content"), list):
                item["content"] = []
        slot, events = items.open_item(item, event.get("output_index"), item.get("id"))
        for position, part in enumerate(item.get("content") or []):
            if isinstance(part, dict):
                slot.parts[position] = position
        return events

    def _on_item_done(self, event: UpstreamEvent) -> list[StreamEvent]:
        items = self.items
        item = clone(event["item"])  # checked_event drops the event without one
        slot = items.find(item.get("id"), event.get("output_index"), item.get("type"))
        if slot is None:
            # Only ``done`` arrived: open it, replay its content, close it.
            return items.emit_whole_item(item, event.get("output_index"), "completed")
        if not slot.open:
            return []  # a repeated ``done``
        return items.close_item(slot, item, "completed")

    # ------------------------------------------------------------------ content parts

    def _on_part_added(self, event: UpstreamEvent) -> list[StreamEvent]:
        items = self.items
        part = clone(event["part"]) if "part" in event else {"type": "output_text"}
        kind = part.get("type")
        owner = _PART_OWNER.get(kind if isinstance(kind, str) else "", "message")
        slot, events = items.slot_for(event, owner)
        upstream_ci = event.get("content_index")
        key = len(slot.parts) if upstream_ci is None else upstream_ci
        if key in slot.parts and slot.parts[key] not in slot.part_done:
            return events  # repeated ``added``
        content = items.output[slot.index].setdefault("content", [])
        if not isinstance(content, list):
            content = items.output[slot.index]["content"] = []
        position = len(content)
        if kind in ("output_text", "reasoning_text", "refusal"):
            part.setdefault("text" if kind != "refusal" else "refusal", "")
        content.append(normalize_part(part))
        slot.parts[key] = position
        out = _copy_event(event, ev.CONTENT_PART_ADDED)
        out.update(items.part_address(slot, position))
        out["part"] = clone(content[position])
        events.append(out)
        return events

    def _on_part_done(self, event: UpstreamEvent) -> list[StreamEvent]:
        items = self.items
        part = clone(event["part"]) if "part" in event else {}
        kind = part.get("type") or "output_text"
        owner = _PART_OWNER.get(kind, "message")
        slot, events = items.slot_for(event, owner)
        position, opened = items.part_for(slot, event, kind)
        events.extend(opened)
        if position in slot.part_done:
            return events
        content = items.output[slot.index]["content"]
        ours = content[position]
        merged = {**ours, **part}
        for field in ("text", "refusal"):
            if field in ours and not isinstance(part.get(field), str):
                merged[field] = ours[field]
        content[position] = normalize_part(merged)
        slot.part_done.add(position)
        out = _copy_event(event, ev.CONTENT_PART_DONE)
        out.update(items.part_address(slot, position))
        out["part"] = clone(content[position])
        events.append(out)
        return events

    def _on_text_delta(self, event: UpstreamEvent) -> list[StreamEvent]:
        delta = event.get("delta", "")
        key = (
            event["type"],
            event.get("item_id"),
            event.get("output_index"),
            event.get("content_index"),
        )
        last = self._last_delta
        if (
            last is not None
            and last.key == key
            and last.slot.open
            and last.position not in last.slot.part_done
        ):
            # The part the previous delta went to, still open: the same address.
            out = _copy_event(event, event["type"])
            out.update(last.address)
            if last.logprobs and out.get("logprobs") is None:
                out["logprobs"] = []
            part = last.part
            field = last.field
            events: list[StreamEvent] = [out]
        else:
            field, part, events, out = self._text_event(event)
            slot, position = self._text_target
            address = {name: out[name] for name in _PART_ADDRESS}
            self._last_delta = _DeltaTarget(key, slot, position, address, part, field)
        part[field] = (part.get(field) or "") + delta
        out["delta"] = delta
        return events

    def _on_text_done(self, event: UpstreamEvent) -> list[StreamEvent]:
        field, part, events, out = self._text_event(event)
        final = event.get("refusal") if field == "refusal" else event.get("text")
        if final is not None:
            part[field] = final
        out[field] = part.get(field, "")
        return events

    def _text_event(
        self, event: UpstreamEvent
    ) -> tuple[str, JsonObject, list[StreamEvent], JsonObject]:
        """What a text or refusal delta/done event shares: its part (opened when it is new), the
        events so far with the client's copy of this one last, and the part's field."""
        items = self.items
        kind = _delta_part_type(event["type"])
        slot, events = items.slot_for(event, _PART_OWNER[kind])
        position, opened = items.part_for(slot, event, kind)
        events.extend(opened)
        part = items.output[slot.index]["content"][position]
        out = _copy_event(event, event["type"])
        out.update(items.part_address(slot, position))
        if kind == "output_text" and out.get("logprobs") is None:
            out["logprobs"] = []
        events.append(out)
        self._text_target = (slot, position)
        return ("refusal" if kind == "refusal" else "text"), part, events, out

    def _on_annotation(self, event: UpstreamEvent) -> list[StreamEvent]:
        items = self.items
        slot, events = items.slot_for(event, "message")
        position, opened = items.part_for(slot, event, "output_text")
        events.extend(opened)
        part = items.output[slot.index]["content"][position]
        annotation = event.get("annotation")
        if isinstance(annotation, dict):
            part.setdefault("annotations", []).append(clone(annotation))
        out = _copy_event(event, event["type"])
        out.update(items.part_address(slot, position))
        out["annotation_index"] = len(part.get("annotations") or []) - 1
        events.append(out)
        return events

    # ------------------------------------------------------------------ function calls

    def _on_arguments_delta(self, event: UpstreamEvent) -> list[StreamEvent]:
        items = self.items
        slot, events = items.slot_for(event, "function_call")
        item = items.output[slot.index]
        delta = event.get("delta", "")
        item["arguments"] = (item.get("arguments") or "") + delta
        out = _copy_event(event, event["type"])
        out.update(items.item_address(slot))
        out["delta"] = delta
        events.append(out)
        return events

    def _on_arguments_done(self, event: UpstreamEvent) -> list[StreamEvent]:
        items = self.items
        slot, events = items.slot_for(event, "function_call")
        item = items.output[slot.index]
        if "arguments" in event:
            item["arguments"] = event["arguments"]
        name = event.get("name")
        if isinstance(name, str) and name and not item.get("name"):
            item["name"] = name
        out = _copy_event(event, event["type"])
        out.update(items.arguments_done_event(slot))
        events.append(out)
        return events

    # ------------------------------------------------------------------ reasoning summaries

    def _on_summary_part_added(self, event: UpstreamEvent) -> list[StreamEvent]:
        items = self.items
        slot, events = items.slot_for(event, "reasoning")
        position, opened = items.summary_for(slot, event, emit_added=False)
        if "part" in event:
            summary = items.output[slot.index]["summary"]
            summary[position] = {**summary[position], **clone(event["part"])}
        out = _copy_event(event, event["type"])
        out.update(items.summary_address(slot, position))
        out["part"] = clone(items.output[slot.index]["summary"][position])
        events.extend(opened)
        events.append(out)
        return events

    def _on_summary_text_delta(self, event: UpstreamEvent) -> list[StreamEvent]:
        items = self.items
        slot, events = items.slot_for(event, "reasoning")
        position, opened = items.summary_for(slot, event, emit_added=True)
        events.extend(opened)
        part = items.output[slot.index]["summary"][position]
        delta = event.get("delta", "")
        part["text"] = (part.get("text") or "") + delta
        out = _copy_event(event, event["type"])
        out.update(items.summary_address(slot, position))
        out["delta"] = delta
        events.append(out)
        return events

    def _on_summary_text_done(self, event: UpstreamEvent) -> list[StreamEvent]:
        items = self.items
        slot, events = items.slot_for(event, "reasoning")
        position, opened = items.summary_for(slot, event, emit_added=True)
        events.extend(opened)
        part = items.output[slot.index]["summary"][position]
        if "text" in event:
            part["text"] = event["text"]
        out = _copy_event(event, event["type"])
        out.update(items.summary_address(slot, position))
        out["text"] = part.get("text", "")
        events.append(out)
        return events

    def _on_summary_part_done(self, event: UpstreamEvent) -> list[StreamEvent]:
        items = self.items
        slot, events = items.slot_for(event, "reasoning")
        position, opened = items.summary_for(slot, event, emit_added=True)
        events.extend(opened)
        summary = items.output[slot.index]["summary"]
        part = event.get("part")
        if part is not None:
            text = summary[position].get("text", "")
            summary[position] = {**summary[position], **clone(part)}
            if not isinstance(part.get("text"), str):
                summary[position]["text"] = text
        slot.summary_done.add(position)
        out = _copy_event(event, event["type"])
        out.update(items.summary_address(slot, position))
        out["part"] = clone(summary[position])
        events.append(out)
        return events


_PART_ADDRESS = ("item_id", "output_index", "content_index")


@dataclass(slots=True)
class _DeltaTarget:
    """Where a text delta went: its upstream address (``key``: type, item id, output and
    content index), the slot, the part's position, the client's address of it, the part and
    its text field."""

    key: tuple[Any, Any, Any, Any]
    slot: ItemSlot
    position: int
    address: JsonObject
    part: JsonObject
    field: str
    # An output_text delta without logprobs gets ``[]``, as ``_text_event`` gives it.
    logprobs: bool = dataclass_field(init=False)

    def __post_init__(self) -> None:
        self.logprobs = _delta_part_type(self.key[0]) == "output_text"


def _copy_event(event: UpstreamEvent, kind: str) -> JsonObject:
    out: JsonObject = dict(event)
    out.pop("sequence_number", None)
    out["type"] = kind
    return out


def _delta_part_type(event_type: str) -> str:
    if event_type.startswith("response.reasoning_text"):
        return "reasoning_text"
    if event_type.startswith("response.refusal"):
        return "refusal"
    return "output_text"
