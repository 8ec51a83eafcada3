"""``chat.completion.chunk`` stream -> Responses API stream events (pure, no I/O).

``ChatStreamTranslator`` emits the events a vLLM ``/v1/responses`` server emits for the same
answer (``response.created``, ``output_item.added``, ``content_part.added``, deltas, ``*.done``,
then ``response.completed``/``response.incomplete``), so that ``core.accumulator`` folds a chat
upstream exactly as it folds a Responses upstream. Plain dicts throughout: this is a hot path.

Item order follows the chat deltas: reasoning, then text, then tool calls; a kind of delta
different from the open item's closes it first. Tool calls are keyed by ``index`` and stay open
until the end of the stream (parallel calls may interleave), until text follows them, or until a
later call opens once their arguments are a whole JSON object (no fragment can extend one): calls
streamed one after the other are then closed one after the other, as a Responses server does.
"""

from __future__ import annotations

import logging
import time

import orjson

from app.core.ids import new_id
from app.errors import UpstreamProtocolError
from app.protocol import events as ev
from app.protocol.events import (
    ContentPartAddedEvent,
    ContentPartDoneEvent,
    ErrorEvent,
    FunctionCallArgumentsDeltaEvent,
    FunctionCallArgumentsDoneEvent,
    OutputItemAddedEvent,
    OutputItemDoneEvent,
    PartAddress,
    ResponseLifecycleEvent,
    StreamEvent,
)
from app.protocol.items import (
    AnyItem,
    ContentPart,
    FunctionCallItem,
    ItemStatus,
    MessageItem,
    ReasoningItem,
)
from app.protocol.json_types import JsonObject
from app.upstream.chat_events import as_json, part_of, text_delta_event, text_done_event
from app.upstream.chat_items import (
    ResponseHead,
    arguments_text,
    error_of,
    function_call_item,
    message_item,
    reasoning_item,
    reasoning_of,
    response_object,
    status_of,
    text_of,
    usage_of,
)

logger = logging.getLogger(__name__)


class _TextItem:
    """The open reasoning or message item: its finished parts and the part being streamed."""

    __slots__ = ("buffer", "index", "item", "part_kind", "parts")

    def __init__(
        self, index: int, item: MessageItem | ReasoningItem, parts: list[ContentPart]
    ) -> None:
        self.index = index
        self.item = item
        self.parts = parts  # the item's ``content``
        self.part_kind: str | None = None
        self.buffer: list[str] = []


class _Call:
    """One streamed tool call."""

    __slots__ = ("arguments", "index", "is_open", "item", "upstream_id")

    def __init__(self, index: int, item: FunctionCallItem, upstream_id: str | None) -> None:
        self.index = index
        self.item = item
        self.upstream_id = upstream_id
        self.arguments: list[str] = []
        self.is_open = True


class ChatStreamTranslator:
    """Feeds parsed chat-completion chunks in; gets Responses stream events out."""

    def __init__(self, request: JsonObject) -> None:
        self.done = False
        self._head = ResponseHead(new_id("resp"), int(time.time()), request.get("model"))
        self._started = False
        self._output: list[AnyItem] = []
        self._text: _TextItem | None = None
        self._calls: dict[int, _Call] = {}  # by the upstream's tool-call index
        self._open_calls: list[_Call] = []
        self._last_call: _Call | None = None
        self._finish_reason: str | None = None
        self._usage: JsonObject | None = None

    # ------------------------------------------------------------------ public API

    def feed(self, chunk: JsonObject) -> list[JsonObject]:
        """One parsed ``data:`` chunk -> the Responses events it produces."""
        if self.done:
            return []
        if chunk.get("type") == ev.STREAM_DONE:
            return self.finish()
        error = error_of(chunk)
        if error is not None:
            self.done = True
            code = error.get("code")
            failure: ErrorEvent = {
                "type": ev.ERROR,
                "code": str(code) if code is not None and code != "" else "upstream_error",
                "message": str(error.get("message") or "the upstream reported an error"),
                "param": error.get("param"),
            }
            return as_json([failure])
        events: list[StreamEvent] = []
        if not self._started:
            events.extend(self._start(chunk))
        usage = chunk.get("usage")
        if isinstance(usage, dict):
            self._usage = usage
        choices = chunk.get("choices")
        if isinstance(choices, list):
            for choice in choices:
                if isinstance(choice, dict) and choice.get("index") in (0, None):
                    self._choice(choice, events)
        return as_json(events)

    def finish(self) -> list[JsonObject]:
        """The upstream stream ended: close what is open and emit the terminal event."""
        if self.done:
            return []
        if self._finish_reason is None:
            raise UpstreamProtocolError("the upstream's chat stream ended before a finish_reason")
        status, incomplete = status_of(self._finish_reason)
        events: list[StreamEvent] = []
        self._close_text(events, status)
        self._close_calls(events)
        self.done = True
        response = self._response(status, incomplete)
        terminal: ResponseLifecycleEvent = {
            "type": ev.RESPONSE_COMPLETED if status == "completed" else ev.RESPONSE_INCOMPLETE,
            "response": response,
        }
        events.append(terminal)
        return as_json(events)

    # ------------------------------------------------------------------ chunks

    def _start(self, chunk: JsonObject) -> list[StreamEvent]:
        self._started = True
        if chunk.get("model"):
            self._head.model = chunk["model"]
        created = chunk.get("created")
        if isinstance(created, int) and not isinstance(created, bool):
            self._head.created_at = created
        snapshot = self._response("in_progress", None)
        created_event: ResponseLifecycleEvent = {"type": ev.RESPONSE_CREATED, "response": snapshot}
        in_progress: ResponseLifecycleEvent = {
            "type": ev.RESPONSE_IN_PROGRESS,
            "response": {**snapshot, "output": []},
        }
        return [created_event, in_progress]

    def _choice(self, choice: JsonObject, events: list[StreamEvent]) -> None:
        delta = choice.get("delta")
        if not isinstance(delta, dict):
            # A few servers send a whole ``message`` instead of deltas; after deltas, such a
            # message repeats them.
            message = choice.get("message")
            delta = message if isinstance(message, dict) and not self._output else {}
        if delta:
            reasoning = reasoning_of(delta)
            if reasoning:
                self._text_delta("reasoning_text", reasoning, events)
            content = text_of(delta.get("content"))
            if content:
                self._text_delta("output_text", content, events)
            refusal = delta.get("refusal")
            if isinstance(refusal, str) and refusal:
                self._text_delta("refusal", refusal, events)
            calls = delta.get("tool_calls")
            if isinstance(calls, list):
                for call in calls:
                    if isinstance(call, dict):
                        self._call_delta(call, events)
            legacy = delta.get("function_call")
            if isinstance(legacy, dict):
                self._call_delta({"function": legacy}, events)
        finish_reason = choice.get("finish_reason")
        if isinstance(finish_reason, str) and finish_reason:
            self._finish_reason = finish_reason

    # ------------------------------------------------------------------ reasoning and text

    def _text_delta(self, part_kind: str, delta: str, events: list[StreamEvent]) -> None:
        item_type = "reasoning" if part_kind == "reasoning_text" else "message"
        text = self._text
        if text is None or text.item["type"] != item_type:
            self._close_text(events, "completed")
            self._close_calls(events)
            text = self._open_text(item_type, events)
        if text.part_kind != part_kind:
            self._close_part(text, events)
            self._open_part(text, part_kind, events)
        text.buffer.append(delta)
        events.append(text_delta_event(part_kind, _address(text), delta))

    def _open_text(self, item_type: str, events: list[StreamEvent]) -> _TextItem:
        parts: list[ContentPart] = []
        item: MessageItem | ReasoningItem
        if item_type == "reasoning":
            item = reasoning_item(new_id("rs"), parts, "in_progress")
        else:
            item = message_item(new_id("msg"), parts, "in_progress")
        text = _TextItem(len(self._output), item, parts)
        self._output.append(item)
        self._text = text
        added: OutputItemAddedEvent = {
            "type": ev.OUTPUT_ITEM_ADDED,
            "output_index": text.index,
            # A reasoning item opens with no content (null), as vLLM's does.
            "item": {**item, "content": None if item_type == "reasoning" else []},
        }
        events.append(added)
        return text

    def _open_part(self, text: _TextItem, part_kind: str, events: list[StreamEvent]) -> None:
        text.part_kind = part_kind
        text.buffer = []
        added: ContentPartAddedEvent = {
            "type": ev.CONTENT_PART_ADDED,
            **_address(text),
            "part": part_of(part_kind, ""),
        }
        events.append(added)

    def _close_part(self, text: _TextItem, events: list[StreamEvent]) -> None:
        part_kind = text.part_kind
        if part_kind is None:
            return
        value = "".join(text.buffer)
        address = _address(text)
        part = part_of(part_kind, value)
        events.append(text_done_event(part_kind, address, value))
        part_done: ContentPartDoneEvent = {
            "type": ev.CONTENT_PART_DONE,
            **address,
            "part": part_of(part_kind, value),
        }
        events.append(part_done)
        text.parts.append(part)
        text.part_kind = None
        text.buffer = []

    def _close_text(self, events: list[StreamEvent], status: ItemStatus) -> None:
        text = self._text
        if text is None:
            return
        self._close_part(text, events)
        item = text.item
        # A cut-off answer leaves its message incomplete (the reasoning before it is complete).
        item["status"] = status if item["type"] == "message" else "completed"
        self._text = None
        done: OutputItemDoneEvent = {
            "type": ev.OUTPUT_ITEM_DONE,
            "output_index": text.index,
            "item": {**item, "content": [dict(part) for part in text.parts]},
        }
        events.append(done)

    # ------------------------------------------------------------------ tool calls

    def _call_delta(self, delta: JsonObject, events: list[StreamEvent]) -> None:
        call = self._call_for(delta, events)
        if call is None:
            return
        function = delta.get("function")
        if not isinstance(function, dict):
            return
        name = function.get("name")
        if isinstance(name, str) and name and name != call.item["name"]:
            # Sent once by most servers; a few repeat it, fewer still split it.
            if not name.startswith(call.item["name"]):
                name = call.item["name"] + name
            call.item["name"] = name
        arguments = function.get("arguments")
        if arguments is None or arguments == "":
            return
        fragment = arguments if isinstance(arguments, str) else arguments_text(arguments)
        call.arguments.append(fragment)
        arguments_delta: FunctionCallArgumentsDeltaEvent = {
            "type": ev.FUNCTION_CALL_ARGUMENTS_DELTA,
            "item_id": call.item["id"],
            "output_index": call.index,
            "delta": fragment,
        }
        events.append(arguments_delta)

    def _call_for(self, delta: JsonObject, events: list[StreamEvent]) -> _Call | None:
        """The call a delta continues, or a new one.

        Keyed by ``index``; without one (some Ollama versions), a new ``id`` starts a call and
        no ``id`` continues the last. A new ``id`` at a known index is a new call as well (some
        servers number every call 0).
        """
        raw_index = delta.get("index")
        index = (
            raw_index if isinstance(raw_index, int) and not isinstance(raw_index, bool) else None
        )
        upstream_id = delta.get("id")
        upstream_id = upstream_id if isinstance(upstream_id, str) and upstream_id else None
        call = self._calls.get(index) if index is not None else self._last_call
        if call is not None and upstream_id and call.upstream_id not in (None, upstream_id):
            call = None
        if call is None:
            call = self._open_call(delta, upstream_id, events)
            if index is not None:
                self._calls[index] = call
        elif not call.is_open:
            logger.debug("chat upstream: dropped a delta for tool call %r, already closed", index)
            return None
        elif upstream_id and call.upstream_id is None:
            call.upstream_id = upstream_id
        return call

    def _open_call(
        self, delta: JsonObject, upstream_id: str | None, events: list[StreamEvent]
    ) -> _Call:
        self._close_text(events, "completed")
        self._close_finished_calls(events)
        function = delta.get("function")
        name = function.get("name") if isinstance(function, dict) else None
        item = function_call_item(
            new_id("fc"),
            upstream_id or new_id("call"),
            name if isinstance(name, str) else "",
            "",
            "in_progress",
        )
        call = _Call(len(self._output), item, upstream_id)
        self._output.append(item)
        self._open_calls.append(call)
        self._last_call = call
        added: OutputItemAddedEvent = {
            "type": ev.OUTPUT_ITEM_ADDED,
            "output_index": call.index,
            "item": dict(item),
        }
        events.append(added)
        return call

    def _close_finished_calls(self, events: list[StreamEvent]) -> None:
        """Close the open calls, in order, whose arguments are a whole JSON object; the first
        one still waiting for fragments (an interleaving server) keeps itself and the later ones
        open."""
        finished = 0
        for call in self._open_calls:
            if not _is_whole_object(call.arguments):
                break
            finished += 1
        if finished:
            still_open = self._open_calls[finished:]
            self._open_calls = self._open_calls[:finished]
            self._close_calls(events)
            self._open_calls = still_open

    def _close_calls(self, events: list[StreamEvent]) -> None:
        for call in self._open_calls:
            item = call.item
            item["arguments"] = "".join(call.arguments) or "{}"
            item["status"] = "completed"
            call.is_open = False
            arguments_done: FunctionCallArgumentsDoneEvent = {
                "type": ev.FUNCTION_CALL_ARGUMENTS_DONE,
                "item_id": item["id"],
                "output_index": call.index,
                "name": item["name"],
                "arguments": item["arguments"],
            }
            done: OutputItemDoneEvent = {
                "type": ev.OUTPUT_ITEM_DONE,
                "output_index": call.index,
                "item": dict(item),
            }
            events.extend((arguments_done, done))
        self._open_calls = []

    # ------------------------------------------------------------------ response

    def _response(self, status: str, incomplete: JsonObject | None) -> JsonObject:
        output: list[AnyItem] = (
            [dict(item) for item in self._output] if status != "in_progress" else []
        )
        return response_object(self._head, status, output, usage_of(self._usage), incomplete)


def _is_whole_object(fragments: list[str]) -> bool:
    try:
        return isinstance(orjson.loads("".join(fragments)), dict)
    except orjson.JSONDecodeError:
        return False


def _address(text: _TextItem) -> PartAddress:
    """The address of the part being streamed (its index: the parts finished before it)."""
    return {
        "item_id": text.item["id"],
        "output_index": text.index,
        "content_index": len(text.parts),
    }
