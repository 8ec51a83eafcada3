"""Responses stream events of a lowered request (``tool_lowering``) raised back to the events
OpenAI sends (pure, no I/O).

``EventRaiser`` turns a lowered call's ``output_item.*`` into the raised item's; for a custom
tool, the ``function_call_arguments`` events become ``response.custom_tool_call_input.delta``
(the ``input`` string decoded from the JSON arguments as they stream, escapes split across
fragments included) and ``.done``; a ``tool_search_call`` is emitted whole at the call's
``output_item.done`` (the SDK has no argument events for it); a namespaced function call keeps
its argument events with its inner name. ``RaisingTranslator`` raises a kind's translation step
(the chat kind), ``RaisedEvents`` a stream that has none (the responses kind).
"""

from __future__ import annotations

import re
from collections.abc import AsyncIterator, Iterable
from dataclasses import dataclass, field
from typing import Any

import orjson

from app.core.ports import UpstreamEventStream
from app.protocol.json_types import JsonObject
from app.upstream.events import EventTranslator
from app.upstream.tool_lowering import Target, ToolLowering, custom_input

_INPUT_KEY = re.compile(r'"input"\s*:\s*"')
_HIGH_SURROGATES = frozenset({"d8", "d9", "da", "db"})


class _InputDecoder:
    """The ``input`` string of ``{"input": "..."}`` arguments, decoded as fragments arrive."""

    __slots__ = ("_buffer", "_done", "_pos")

    def __init__(self) -> None:
        self._buffer = ""
        self._pos: int | None = None  # where the undecoded rest of the string starts
        self._done = False

    def feed(self, fragment: str) -> str:
        self._buffer += fragment
        if self._done:
            return ""
        if self._pos is None:
            match = _INPUT_KEY.search(self._buffer)
            if match is None:
                return ""
            self._pos = match.end()
        out: list[str] = []
        buffer, pos = self._buffer, self._pos
        while pos < len(buffer):
            char = buffer[pos]
            if char == '"':
                self._done = True
                break
            if char != "\\":
                out.append(char)
                pos += 1
                continue
            size = 6 if buffer[pos + 1 : pos + 2] == "u" else 2
            if size == 6 and buffer[pos + 2 : pos + 4].lower() in _HIGH_SURROGATES:
                size = 12  # a surrogate pair: both halves decode together
            if pos + size > len(buffer):
                break  # an escape split across fragments
            try:
                out.append(orjson.loads(f'"{buffer[pos : pos + size]}"'))
            except orjson.JSONDecodeError:
                out.append(buffer[pos : pos + size])
            pos += size
        self._pos = pos
        return "".join(out)


@dataclass(slots=True)
class _Raised:
    target: Target
    item_id: str
    decoder: _InputDecoder = field(default_factory=_InputDecoder)


class EventRaiser:
    """Responses stream events of a lowered request in; the events OpenAI would send out."""

    def __init__(self, lowering: ToolLowering) -> None:
        self._lowering = lowering
        self._calls: dict[Any, _Raised] = {}  # by upstream item id

    def feed_all(self, events: Iterable[JsonObject]) -> list[JsonObject]:
        return [out for event in events for out in self.feed(event)]

    def feed(self, event: JsonObject) -> list[JsonObject]:
        kind = event.get("type")
        if kind in ("response.output_item.added", "response.output_item.done"):
            return self._item_event(event)
        if kind == "response.function_call_arguments.delta":
            return self._arguments(event, done=False)
        if kind == "response.function_call_arguments.done":
            return self._arguments(event, done=True)
        response = event.get("response")
        if isinstance(response, dict) and isinstance(response.get("output"), list):
            return [{**event, "response": self._lowering.raise_response(response)}]
        return [event]

    def _item_event(self, event: JsonObject) -> list[JsonObject]:
        item = event.get("item")
        raised = self._lowering.raise_item(item)
        if raised is item:
            return [event]
        assert isinstance(item, dict)
        target = self._lowering.targets[str(item.get("name"))]
        if target.kind != "function" and item.get("id") not in self._calls:
            self._calls[item.get("id")] = _Raised(target, str(raised.get("id")))
        if event.get("type") == "response.output_item.added":
            if target.kind == "custom":
                raised = {**raised, "input": ""}
            elif target.kind == "tool_search":
                return []  # emitted whole at its ``done``
        elif target.kind == "tool_search":
            added = {
                **event,
                "type": "response.output_item.added",
                "item": {**raised, "status": "in_progress"},
            }
            return [added, {**event, "item": raised}]
        return [{**event, "item": raised}]

    def _arguments(self, event: JsonObject, *, done: bool) -> list[JsonObject]:
        call = self._calls.get(event.get("item_id"))
        if call is None:
            if done and isinstance(event.get("name"), str):
                target = self._lowering.targets.get(event["name"])
                if target is not None and target.kind == "function":
                    return [{**event, "name": target.name}]
            return [event]
        if call.target.kind == "tool_search":
            return []
        address = {"item_id": call.item_id, "output_index": event.get("output_index")}
        if not done:
            delta = event.get("delta")
            text = call.decoder.feed(delta if isinstance(delta, str) else "")
            if not text:
                return []
            return [{"type": "response.custom_tool_call_input.delta", **address, "delta": text}]
        arguments = event.get("arguments")
        value = custom_input(arguments if isinstance(arguments, str) else "")
        return [{"type": "response.custom_tool_call_input.done", **address, "input": value}]


class RaisedEvents:
    """``core.ports.UpstreamEventStream`` over another, its events raised by an ``EventRaiser``."""

    def __init__(self, stream: UpstreamEventStream, raiser: EventRaiser) -> None:
        self._stream = stream
        self._raiser = raiser

    def __aiter__(self) -> AsyncIterator[JsonObject]:
        return self._events()

    async def _events(self) -> AsyncIterator[JsonObject]:
        async for event in self._stream:
            for out in self._raiser.feed(event):
                yield out

    async def aclose(self) -> None:
        await self._stream.aclose()


class RaisingTranslator:
    """A kind's ``events.EventTranslator`` whose output an ``EventRaiser`` raises."""

    def __init__(self, inner: EventTranslator, raiser: EventRaiser) -> None:
        self._inner = inner
        self._raiser = raiser

    @property
    def done(self) -> bool:
        return self._inner.done

    def feed(self, event: JsonObject) -> list[JsonObject]:
        return self._raiser.feed_all(self._inner.feed(event))

    def finish(self) -> list[JsonObject]:
        return self._raiser.feed_all(self._inner.finish())
