"""One round of the tool loop as the client sees it: gateway calls become the executor's items.

``RoundView.translate`` rewrites the accumulator's events of one round: a ``function_call`` to a
tool the gateway runs is replaced by the executor's own item (``mcp_call`` …, or the approval
request the client must answer) and its events; with annotators (``file_search``), each
``output_text`` part gains the citations of what the tools found. ``core.loop`` runs the rounds.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

from app.core.jsoncopy import clone
from app.core.tools import GatewayCall, ToolExecutor
from app.protocol import events as ev
from app.protocol.events import (
    FunctionCallArgumentsDeltaEvent,
    FunctionCallArgumentsDoneEvent,
    ItemProgressEvent,
    OutputItemAddedEvent,
    OutputItemDoneEvent,
    OutputTextAnnotationAddedEvent,
    OutputTextDoneEvent,
    StreamEvent,
)
from app.protocol.items import OutputText, is_output_text
from app.protocol.json_types import JsonObject


class RoundView:
    """Rewrites one round's client events: gateway calls become the executor's items."""

    def __init__(
        self,
        executors: Mapping[str, ToolExecutor],
        annotators: list[Callable[[str], list[JsonObject]]] | None = None,
    ) -> None:
        self.executors = executors
        self.annotators = annotators or []
        self.calls: dict[str, GatewayCall] = {}  # accumulator item id -> call
        # accumulator item id -> the item asking the client to approve that call
        self.approvals: dict[str, JsonObject] = {}
        self.open_calls: dict[str, GatewayCall] = {}  # client item id -> call not closed yet
        # (message id, content index) -> citations added to that output_text part
        self.citations: dict[tuple[str, int], list[JsonObject]] = {}
        self._annotation_counts: dict[tuple[str, int], int] = {}

    def translate(self, event: StreamEvent) -> list[StreamEvent]:
        if ev.is_item_added(event):
            return self._on_added(event)
        if self.annotators:
            if ev.is_text_done(event):
                return self._cite(event)
            if ev.is_annotation_added(event):
                key = (str(event["item_id"]), event["content_index"])
                self._annotation_counts[key] = self._annotation_counts.get(key, 0) + 1
                return [event]
            if ev.is_part_done(event):
                key = (str(event["item_id"]), event["content_index"])
                part = event["part"]
                if key in self.citations and is_output_text(part):
                    _add_citations(part, self.citations[key])
                return [event]
            if ev.is_item_done(event) and event["item"].get("type") == "message":
                self.patch_message(event["item"])
                return [event]
        if ev.is_arguments_delta(event) or ev.is_arguments_done(event):
            call = self.calls.get(str(event["item_id"]))
            if call is None:
                return [event]
            return self._on_arguments(call, event)
        if ev.is_item_done(event):
            return self._on_done(event)
        return [event]

    def _on_added(self, event: OutputItemAddedEvent) -> list[StreamEvent]:
        item = event["item"]
        if item.get("type") != "function_call":
            return [event]
        executor = self.executors.get(str(item.get("name")))
        if executor is None:
            return [event]
        index = event["output_index"]
        call = GatewayCall(
            item_id="",
            call_id=str(item.get("call_id") or ""),
            name=str(item.get("name")),
            arguments=str(item.get("arguments") or ""),
            output_index=index,
        )
        self.calls[str(item.get("id"))] = call
        request = executor.approval_item(call)
        if request is not None:
            self.approvals[str(item.get("id"))] = request
            call.item_id = str(request["id"])
            return []
        opened = executor.open_item(call)
        call.item_id = str(opened["id"])
        self.open_calls[call.item_id] = call
        events: list[StreamEvent] = [added_event(index, opened)]
        events.extend(call_event(t, call) for t in executor.presentation.opened_events)
        return events

    def _on_done(self, event: OutputItemDoneEvent) -> list[StreamEvent]:
        item = event["item"]
        call = self.calls.get(str(item.get("id")))
        if call is None:
            return [event]
        call.arguments = str(item.get("arguments") or call.arguments)
        request = self.approvals.get(str(item.get("id")))
        if request is not None:
            request["arguments"] = call.arguments
            index = call.output_index
            self.open_calls.pop(call.item_id, None)
            return [added_event(index, request), done_event(index, request)]
        return []  # closed once the call has run

    def _on_arguments(
        self,
        call: GatewayCall,
        event: FunctionCallArgumentsDeltaEvent | FunctionCallArgumentsDoneEvent,
    ) -> list[StreamEvent]:
        executor = self.executors[call.name]
        names = executor.presentation.arguments_events
        if call.item_id not in self.open_calls or names is None:
            return []
        if ev.is_arguments_delta(event):
            return [{**call_event(names[0], call), "delta": event["delta"]}]
        assert ev.is_arguments_done(event)
        call.arguments = event["arguments"] or call.arguments
        return [{**call_event(names[1], call), "arguments": call.arguments}]

    def _cite(self, event: OutputTextDoneEvent) -> list[StreamEvent]:
        """After an output_text part is complete: the citations of what the tools found."""
        text = event["text"]
        if not text:
            return [event]
        key = (str(event["item_id"]), event["content_index"])
        found = [a for annotate in self.annotators for a in annotate(text)]
        if not found:
            return [event]
        self.citations[key] = found
        start = self._annotation_counts.get(key, 0)
        added: list[StreamEvent] = []
        for n, annotation in enumerate(found):
            citation: OutputTextAnnotationAddedEvent = {
                "type": ev.OUTPUT_TEXT_ANNOTATION_ADDED,
                "output_index": event["output_index"],
                "item_id": event["item_id"],
                "content_index": event["content_index"],
                "annotation_index": start + n,
                "annotation": clone(annotation),
            }
            added.append(citation)
        return [event, *added]

    def patch_message(self, item: JsonObject) -> None:
        """Give a message item's parts the citations computed for them."""
        content = item.get("content")
        if not isinstance(content, list):
            return
        for index, part in enumerate(content):
            extra = self.citations.get((str(item.get("id")), index))
            if extra and isinstance(part, dict):
                _add_citations(part, extra)

    def client_item(self, item: JsonObject) -> JsonObject:
        """The client's view of a finished round's item (gateway calls: their open item)."""
        call = self.calls.get(str(item.get("id")))
        if call is None:
            if self.citations and item.get("type") == "message":
                self.patch_message(item)
            return item
        request = self.approvals.get(str(item.get("id")))
        if request is not None:
            return request | {"arguments": call.arguments}
        return self.executors[call.name].open_item(call) | {"id": call.item_id}


def _add_citations(part: OutputText | JsonObject, citations: list[JsonObject]) -> None:
    annotations = part.get("annotations")
    if not isinstance(annotations, list):
        annotations = part["annotations"] = []
    for citation in citations:
        if citation not in annotations:
            annotations.append(clone(citation))


def added_event(index: int, item: JsonObject) -> OutputItemAddedEvent:
    return {"type": ev.OUTPUT_ITEM_ADDED, "output_index": index, "item": clone(item)}


def done_event(index: int, item: JsonObject) -> OutputItemDoneEvent:
    return {"type": ev.OUTPUT_ITEM_DONE, "output_index": index, "item": clone(item)}


def call_event(kind: str, call: GatewayCall) -> ItemProgressEvent:
    return {"type": kind, "output_index": call.output_index, "item_id": call.item_id}
