"""Responses stream events -> Anthropic's SSE events.

``message_start`` (and a ``ping``) on ``response.created``; one content block per text part,
reasoning item and function call, opened on its first event and closed when it is done
(``content_block_start`` / ``content_block_delta`` with ``text_delta``, ``thinking_delta``,
``signature_delta`` or ``input_json_delta`` / ``content_block_stop``); an ``mcp_call`` becomes
its ``mcp_tool_use`` and ``mcp_tool_result`` blocks when it is done; the final response gives
``message_delta`` (``stop_reason``, ``usage``) and ``message_stop``. A failure after the start
(``error`` or ``response.failed``) is Anthropic's ``error`` event, which ends the stream.
Events with no Anthropic counterpart (hosted tool progress, unknown types) are dropped.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from app.frontends.anthropic.errors import stream_error_event
from app.frontends.anthropic.responses import (
    content_blocks,
    message_id,
    reasoning_text,
    stop_details,
    usage,
)
from app.protocol.json_types import JsonObject

_TEXT_DELTAS = frozenset({"response.output_text.delta", "response.refusal.delta"})
_THINKING_DELTAS = frozenset(
    {"response.reasoning_text.delta", "response.reasoning_summary_text.delta"}
)
_FINAL = frozenset({"response.completed", "response.incomplete"})


@dataclass(slots=True)
class _Block:
    index: int
    kind: str
    # Whether any delta was sent (a done event with text then needs no repeat).
    streamed: bool = False


@dataclass(slots=True)
class MessageStream:
    """Translates one response's events; ``feed`` returns the Anthropic events for each."""

    model: str
    stop_sequences: tuple[str, ...] = ()
    # ``thinking.display: "omitted"``: thinking blocks open and close with no thinking deltas.
    omit_thinking: bool = False
    _next_index: int = 0
    # Open blocks by key: (item_id, content_index) for text, item_id for reasoning and calls.
    _open: dict[tuple[str, int], _Block] = field(default_factory=dict)
    # Text parts already closed (``output_text.done`` then ``content_part.done`` close one).
    _closed: set[tuple[str, int]] = field(default_factory=set)
    finished: bool = False

    def feed(self, event: JsonObject) -> list[JsonObject]:
        if self.finished:
            return []
        kind = event.get("type")
        if kind == "response.created":
            return self._start(event.get("response") or {})
        if kind in _TEXT_DELTAS:
            return self._delta(event, "text", "text_delta", "text")
        if kind in _THINKING_DELTAS:
            delta = {**event, "delta": ""} if self.omit_thinking else event
            return self._delta(delta, "thinking", "thinking_delta", "thinking")
        if kind == "response.function_call_arguments.delta":
            return self._delta(event, "tool_use", "input_json_delta", "partial_json")
        if kind == "response.output_item.added":
            return self._item_added(event.get("item") or {})
        if kind in ("response.content_part.done", "response.output_text.done"):
            return self._part_done(event)
        if kind == "response.output_item.done":
            return self._item_done(event.get("item") or {})
        if kind in _FINAL:
            return self._finish(event.get("response") or {})
        if kind in ("error", "response.failed"):
            self.finished = True
            error = event if kind == "error" else (event.get("response") or {}).get("error")
            return [stream_error_event(error)]
        return []

    # ---------------------------------------------------------------------- lifecycle

    def _start(self, response: JsonObject) -> list[JsonObject]:
        message: JsonObject = {
            "id": message_id(str(response.get("id") or "")),
            "type": "message",
            "role": "assistant",
            "model": self.model,
            "content": [],
            "stop_reason": None,
            "stop_sequence": None,
            "usage": usage(response.get("usage")),
        }
        return [{"type": "message_start", "message": message}, {"type": "ping"}]

    def _finish(self, response: JsonObject) -> list[JsonObject]:
        events = [self._stop(block) for block in self._open.values()]
        self._open.clear()
        self.finished = True
        reason, sequence = stop_details(response, self.stop_sequences)
        delta = {"stop_reason": reason, "stop_sequence": sequence}
        events.append(
            {"type": "message_delta", "delta": delta, "usage": usage(response.get("usage"))}
        )
        events.append({"type": "message_stop"})
        return events

    # ------------------------------------------------------------------------ blocks

    def _open_block(self, key: tuple[str, int], content_block: JsonObject) -> JsonObject:
        block = _Block(self._next_index, str(content_block["type"]))
        self._next_index += 1
        self._open[key] = block
        return {"type": "content_block_start", "index": block.index, "content_block": content_block}

    @staticmethod
    def _stop(block: _Block) -> JsonObject:
        return {"type": "content_block_stop", "index": block.index}

    def _item_added(self, item: JsonObject) -> list[JsonObject]:
        item_id = str(item.get("id") or "")
        if item.get("type") == "reasoning":
            start = {"type": "thinking", "thinking": "", "signature": ""}
            return [self._open_block((item_id, -1), start)]
        if item.get("type") == "function_call":
            call_start: JsonObject = {
                "type": "tool_use",
                "id": item.get("call_id") or item_id,
                "name": item.get("name"),
                "input": {},
            }
            return [self._open_block((item_id, -1), call_start)]
        return []

    def _key(self, event: JsonObject, kind: str) -> tuple[str, int]:
        item_id = str(event.get("item_id") or "")
        return (item_id, int(event.get("content_index") or 0)) if kind == "text" else (item_id, -1)

    def _delta(
        self, event: JsonObject, kind: str, delta_type: str, field_name: str
    ) -> list[JsonObject]:
        key = self._key(event, kind)
        events: list[JsonObject] = []
        block = self._open.get(key)
        if block is None:
            if kind == "text":
                events.append(
                    self._open_block(key, {"type": "text", "text": "", "citations": None})
                )
            elif kind == "thinking":
                start = {"type": "thinking", "thinking": "", "signature": ""}
                events.append(self._open_block(key, start))
            else:
                return []  # arguments of a call whose start was not seen
            block = self._open[key]
        delta = str(event.get("delta") or "")
        if delta:
            block.streamed = True
            payload = {"type": delta_type, field_name: delta}
            events.append({"type": "content_block_delta", "index": block.index, "delta": payload})
        return events

    def _part_done(self, event: JsonObject) -> list[JsonObject]:
        """A text part is complete: its block closes (sending its text if none streamed)."""
        key = self._key(event, "text")
        if key in self._closed:
            return []
        part = event.get("part") or {}
        text = event.get("text") if "text" in event else part.get("text")
        events: list[JsonObject] = []
        block = self._open.get(key)
        if block is None:
            if not text or part.get("type") not in (None, "output_text"):
                return []
            events.append(self._open_block(key, {"type": "text", "text": "", "citations": None}))
            block = self._open[key]
        if not block.streamed and text:
            delta = {"type": "text_delta", "text": str(text)}
            events.append({"type": "content_block_delta", "index": block.index, "delta": delta})
        del self._open[key]
        self._closed.add(key)
        events.append(self._stop(block))
        return events

    def _item_done(self, item: JsonObject) -> list[JsonObject]:
        item_id = str(item.get("id") or "")
        kind = item.get("type")
        if kind == "mcp_call":
            events: list[JsonObject] = []
            for content_block in content_blocks(item):
                index = self._next_index
                self._next_index += 1
                start = {"type": "content_block_start", "index": index}
                events += [{**start, "content_block": content_block}, self._stop(_Block(index, ""))]
            return events
        if kind == "message":
            keys = [key for key in self._open if key[0] == item_id]
            return [self._stop(self._open.pop(key)) for key in keys]
        block = self._open.pop((item_id, -1), None)
        if block is None or kind not in ("reasoning", "function_call"):
            return []
        events = []
        if kind == "reasoning" and not block.streamed and not self.omit_thinking:
            text = reasoning_text(item)
        else:
            text = ""
        if text:
            delta = {"type": "thinking_delta", "thinking": text}
            events.append({"type": "content_block_delta", "index": block.index, "delta": delta})
        if kind == "reasoning" and isinstance(item.get("encrypted_content"), str):
            delta = {"type": "signature_delta", "signature": item["encrypted_content"]}
            events.append({"type": "content_block_delta", "index": block.index, "delta": delta})
        if kind == "function_call" and not block.streamed and item.get("arguments"):
            delta = {"type": "input_json_delta", "partial_json": str(item["arguments"])}
            events.append({"type": "content_block_delta", "index": block.index, "delta": delta})
        events.append(self._stop(block))
        return events
