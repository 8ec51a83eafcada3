"""``POST /v1/responses/compact``: the compacted items of a conversation.

``Compactor.compact`` forwards the request as it came when the upstream serving its model
compacts natively (``core.compaction.NativeCompactor``). Otherwise the gateway compacts: it
rehydrates the history (``previous_response_id``, then ``input``, earlier compaction items
lowered to their summaries), asks the upstream model for a summary in one non-streaming round
with a fixed instruction, and answers OpenAI's ``response.compaction`` object: every user
message of the history, then one ``compaction`` item whose ``encrypted_content`` carries the
summary (``core.compaction.CompactionCodec``). Nothing is stored: the client continues by
sending the output back as ``input``.

``Compactor.view`` is what the upstream sees of a create request: its history and input with
compaction items lowered (``CompactionLowering``). With ``context_management`` (an entry of
type ``compaction`` with a ``compact_threshold``), when the lowered input counts more tokens
than the threshold (``count_tokens``: an estimate of four characters per token unless the app
gives a real count), the conversation is compacted first, the same way, and the compaction
item opens the response's output (``output_item.added``, ``response.compaction.compacting``,
``output_item.done`` in a stream) so that it is stored and continued from like any other.
An upstream that compacts natively gets ``context_management`` as it came; others never see it.

The threshold is measured in the upstream's tokens where it can count them (the
``TokenCounter`` port: its ``/tokenize``, exact, as ``/v1/responses/input_tokens`` counts),
else with the estimate. Counting costs a request to the upstream, so the hot path pays it only
near the threshold: the estimate (UTF-8 bytes / 4, one serialization) decides alone when it is
under half the threshold or over twice it, and a request without ``context_management`` is
never measured at all.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field

import orjson

from app.core.compaction import (
    COMPACTION_TYPE,
    CompactionCodec,
    CompactionLowering,
    NativeCompactor,
    has_compaction,
    is_gateway_token,
    is_user_message,
    summary_message,
)
from app.core.history import History, rehydrate
from app.core.ids import new_id
from app.core.ports import ResponseStore, TokenCounter, Upstream
from app.core.response import empty_usage, normalize_usage
from app.core.round_view import added_event, done_event
from app.core.tools import PreludeItem
from app.errors import GatewayError, UpstreamProtocolError
from app.protocol.compaction import CompactRequest
from app.protocol.events import StreamEvent
from app.protocol.json_types import JsonObject
from app.protocol.requests import CreateResponseRequest

SUMMARY_INSTRUCTIONS = (
    "You compact a conversation between a user and an assistant so that the assistant can "
    "continue it without the full history. Write a concise, faithful summary of everything "
    "the assistant needs: the user's goals and constraints, decisions made, facts learned "
    "(including tool calls and their results), open questions and what was about to happen "
    "next. Write only the summary, no preamble."
)
# The stream event OpenAI sends while a compaction item is being written.
COMPACTING_EVENT = "response.compaction.compacting"
_SUMMARY_REQUEST = "Summarize the conversation above as instructed."
# The estimate decides alone outside [threshold / _NEAR, threshold * _NEAR].
_NEAR = 2
# What of a request the threshold measures besides its input (the conversation, not its tools).
_MEASURED_FIELDS = ("model", "instructions")

logger = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class UpstreamView:
    """What the upstream sees of a create request: its history and new input lowered
    (``CompactionLowering``), and the compaction items the gateway produced first for it
    (automatic compaction: they open the response's output)."""

    history: list[JsonObject]
    input: list[JsonObject]
    output: list[JsonObject] = field(default_factory=list)


def estimate_tokens(items: list[JsonObject]) -> int:
    """About four bytes of JSON (UTF-8) per token: what ``compact_threshold`` is measured with
    when the upstream cannot count, and what decides whether to ask it."""
    return len(orjson.dumps(items)) // 4


def compact_threshold(body: JsonObject) -> int | None:
    """The threshold of a ``context_management`` entry of type ``compaction`` (None: none)."""
    entries = body.get("context_management")
    for entry in entries if isinstance(entries, list) else []:
        if isinstance(entry, dict) and entry.get("type") == COMPACTION_TYPE:
            threshold = entry.get("compact_threshold")
            if isinstance(threshold, int) and not isinstance(threshold, bool):
                return threshold
    return None


class Compactor:
    """Compacts conversations with the upstream model, or forwards to a native upstream."""

    def __init__(
        self,
        upstream: Upstream,
        store: ResponseStore,
        codec: CompactionCodec,
        *,
        clock: Callable[[], float] = time.time,
        count_tokens: Callable[[list[JsonObject]], int] = estimate_tokens,
    ) -> None:
        self.upstream = upstream
        self.store = store
        self.codec = codec
        self.count_tokens = count_tokens
        # The upstream's own count (None: the estimate alone).
        self.counter = upstream if isinstance(upstream, TokenCounter) else None
        self._clock = clock

    def lowering(self, model: str | None) -> CompactionLowering:
        """How a request for ``model`` lowers its compaction items."""
        return CompactionLowering(self.codec, native=self._native(model))

    def _native(self, model: str | None) -> bool:
        upstream = self.upstream
        return isinstance(upstream, NativeCompactor) and upstream.compacts_natively(model)

    async def compact(
        self,
        request: CompactRequest,
        body: JsonObject,
        headers: Mapping[str, str],
        *,
        tenant: str,
    ) -> JsonObject:
        """``POST /v1/responses/compact``: OpenAI's ``response.compaction`` object (its
        ``previous_response_id`` and item references are ``tenant``'s)."""
        lowering = self.lowering(request.model)
        upstream = self.upstream
        native = lowering.native and isinstance(upstream, NativeCompactor)
        as_it_came = request.previous_response_id is None and not _has_gateway_items(request.input)
        if native and as_it_came and isinstance(upstream, NativeCompactor):
            return await upstream.compact_natively(body, headers)
        created_at = int(self._clock())
        history = await rehydrate(
            self.store,
            CreateResponseRequest(
                model=request.model,
                input=request.input,
                previous_response_id=request.previous_response_id,
            ),
            tenant=tenant,
        )
        lowering.check(history.input_items, "input")
        lowered = lowering.lower_split(
            history.history_items, history.input_items, "previous_response_id", "input"
        )
        if native and isinstance(upstream, NativeCompactor):
            # The upstream knows neither the gateway's response ids nor its compaction items:
            # it gets the whole history, lowered.
            forwarded = {k: v for k, v in body.items() if k != "previous_response_id"}
            forwarded["input"] = [*lowered[0], *lowered[1]]
            return await upstream.compact_natively(forwarded, headers)
        summary, usage = await self._summarize(
            request.model, [*lowered[0], *lowered[1]], request.instructions, headers
        )
        raw = [*history.history_items, *history.input_items]
        kept = [item for item in lowering.prune(raw) if is_user_message(item)]
        return {
            "id": new_id("resp"),
            "object": "response.compaction",
            "created_at": created_at,
            "output": [*kept, self._item(summary)],
            "usage": usage,
        }

    async def view(
        self, body: JsonObject, history: History, headers: Mapping[str, str]
    ) -> UpstreamView:
        """The upstream's view of a create request; with ``context_management`` (a compaction
        threshold) and more tokens than the threshold, the conversation is compacted first
        and the upstream sees the user's messages and the summary."""
        if (
            "context_management" not in body
            and not has_compaction(history.history_items)
            and not has_compaction(history.input_items)
        ):
            return UpstreamView(history.history_items, history.input_items)
        model = body.get("model")
        lowering = self.lowering(model if isinstance(model, str) else None)
        param = "conversation" if history.conversation_id is not None else "previous_response_id"
        lowered_history, lowered_input = lowering.lower_split(
            history.history_items, history.input_items, param, "input"
        )
        threshold = compact_threshold(body)
        lowered = [*lowered_history, *lowered_input]
        if threshold is None or lowering.native:
            return UpstreamView(lowered_history, lowered_input)
        if not await self._exceeds(body, lowered, threshold, headers):
            return UpstreamView(lowered_history, lowered_input)
        instructions = body.get("instructions")
        summary, _ = await self._summarize(
            str(model),
            lowered,
            instructions if isinstance(instructions, str) else None,
            headers,
        )
        raw = lowering.prune([*history.history_items, *history.input_items])
        kept = [item for item in raw if is_user_message(item)]
        return UpstreamView([], [*kept, summary_message(summary)], [self._item(summary)])

    async def _exceeds(
        self,
        body: JsonObject,
        items: list[JsonObject],
        threshold: int,
        headers: Mapping[str, str],
    ) -> bool:
        """Whether ``items`` (the lowered input of ``body``) count more tokens than
        ``threshold``: the estimate far from it, else the upstream's count (the estimate when
        the upstream cannot count, or fails to)."""
        estimate = self.count_tokens(items)
        counter = self.counter
        if counter is None or estimate * _NEAR < threshold or estimate > threshold * _NEAR:
            return estimate > threshold
        try:
            measured = {k: body[k] for k in _MEASURED_FIELDS if k in body}
            count = await counter.count_input_tokens({**measured, "input": items}, headers)
        except GatewayError as exc:
            logger.warning("no token count for compact_threshold, using the estimate: %s", exc)
            return estimate > threshold
        return count.tokens > threshold

    def forwarded(self, body: JsonObject) -> JsonObject:
        """``body`` without ``context_management`` unless its upstream compacts natively (the
        gateway answers it)."""
        if "context_management" not in body:
            return body
        model = body.get("model")
        if self._native(model if isinstance(model, str) else None):
            return body
        return {k: v for k, v in body.items() if k != "context_management"}

    async def _summarize(
        self,
        model: str,
        items: list[JsonObject],
        instructions: str | None,
        headers: Mapping[str, str],
    ) -> tuple[str, JsonObject]:
        """The upstream model's summary of ``items`` (lowered) and the round's usage."""
        full = SUMMARY_INSTRUCTIONS
        if instructions:
            full += (
                "\n\nThe assistant worked under these instructions (do not repeat them):\n"
                + instructions
            )
        summary_request: JsonObject = {
            "model": model,
            "instructions": full,
            "input": [*items, _user_message(_SUMMARY_REQUEST)],
            "store": False,
        }
        answer = await self.upstream.create_response(summary_request, dict(headers))
        summary = _output_text(answer)
        if not summary.strip():
            raise UpstreamProtocolError("the upstream wrote no summary for the compaction")
        return summary, normalize_usage(answer.get("usage")) or empty_usage()

    def _item(self, summary: str) -> JsonObject:
        return {
            "id": new_id("cmp"),
            "type": COMPACTION_TYPE,
            "encrypted_content": self.codec.seal(summary),
        }


def compaction_prelude(item: JsonObject) -> PreludeItem:
    """A compaction item that opens a response's output, as its stream shows it."""
    return PreludeItem(opening=item, events=(COMPACTING_EVENT,), item=item)


def prelude_events(prelude: list[PreludeItem]) -> Iterator[StreamEvent]:
    """The events of items that open the output (``output_index`` from 0)."""
    for index, entry in enumerate(prelude):
        yield added_event(index, entry.opening)
        for kind in entry.events:
            yield {"type": kind, "output_index": index, "item_id": entry.item.get("id")}
        yield done_event(index, entry.item)


def _has_gateway_items(value: object) -> bool:
    """Whether a request's ``input`` holds one of the gateway's compaction items."""
    return isinstance(value, list) and any(
        isinstance(item, dict)
        and item.get("type") == COMPACTION_TYPE
        and is_gateway_token(item.get("encrypted_content"))
        for item in value
    )


def _user_message(text: str) -> JsonObject:
    return {"type": "message", "role": "user", "content": [{"type": "input_text", "text": text}]}


def _output_text(response: JsonObject) -> str:
    """The text of the assistant messages of an upstream Response."""
    texts: list[str] = []
    output = response.get("output")
    for item in output if isinstance(output, list) else []:
        if not isinstance(item, dict) or item.get("type") != "message":
            continue
        content = item.get("content")
        for part in content if isinstance(content, list) else []:
            if isinstance(part, dict) and part.get("type") == "output_text":
                texts.append(str(part.get("text") or ""))
    return "".join(texts)
