"""``POST /v1/responses/compact``: the compacted items of a conversation.

``Compactor.compact`` forwards the request as it came when the upstream serving its model
compacts natively (``core.compaction.NativeCompactor``). Otherwise the gateway compacts: it
rehydrates the history (``previous_response_id``, then ``input``, earlier compaction items
lowered to their summaries), asks the upstream model for a summary in one non-streaming round
with a fixed instruction, and answers OpenAI's ``response.compaction`` object: every user
message of the history, then one ``compaction`` item whose ``encrypted_content`` carries the
summary (``core.compaction.CompactionCodec``). Nothing is stored: the client continues by
sending the output back as ``input``.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping

from app.core.compaction import (
    COMPACTION_TYPE,
    CompactionCodec,
    CompactionLowering,
    NativeCompactor,
)
from app.core.history import rehydrate
from app.core.ids import new_id
from app.core.ports import ResponseStore, Upstream
from app.core.response import empty_usage, normalize_usage
from app.errors import UpstreamProtocolError
from app.protocol.compaction import CompactRequest
from app.protocol.json_types import JsonObject
from app.protocol.requests import CreateResponseRequest

SUMMARY_INSTRUCTIONS = (
    "You compact a conversation between a user and an assistant so that the assistant can "
    "continue it without the full history. Write a concise, faithful summary of everything "
    "the assistant needs: the user's goals and constraints, decisions made, facts learned "
    "(including tool calls and their results), open questions and what was about to happen "
    "next. Write only the summary, no preamble."
)
_SUMMARY_REQUEST = "Summarize the conversation above as instructed."


class Compactor:
    """Compacts conversations with the upstream model, or forwards to a native upstream."""

    def __init__(
        self,
        upstream: Upstream,
        store: ResponseStore,
        codec: CompactionCodec,
        *,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.upstream = upstream
        self.store = store
        self.codec = codec
        self._clock = clock

    def lowering(self, model: str | None) -> CompactionLowering:
        """How a request for ``model`` lowers its compaction items."""
        return CompactionLowering(self.codec, native=self._native(model))

    def _native(self, model: str | None) -> bool:
        upstream = self.upstream
        return isinstance(upstream, NativeCompactor) and upstream.compacts_natively(model)

    async def compact(
        self, request: CompactRequest, body: JsonObject, headers: Mapping[str, str]
    ) -> JsonObject:
        upstream = self.upstream
        if isinstance(upstream, NativeCompactor) and upstream.compacts_natively(request.model):
            return await upstream.compact_natively(body, headers)
        created_at = int(self._clock())
        history = await rehydrate(
            self.store,
            CreateResponseRequest(
                model=request.model,
                input=request.input,
                previous_response_id=request.previous_response_id,
            ),
        )
        lowering = self.lowering(request.model)
        lowering.check(history.input_items, "input")
        items = [
            *lowering.lower(history.history_items, "previous_response_id"),
            *lowering.lower(history.input_items, "input"),
        ]
        instructions = SUMMARY_INSTRUCTIONS
        if request.instructions:
            instructions += (
                "\n\nThe assistant worked under these instructions (do not repeat them):\n"
                + request.instructions
            )
        summary_request: JsonObject = {
            "model": request.model,
            "instructions": instructions,
            "input": [*items, _user_message(_SUMMARY_REQUEST)],
            "store": False,
        }
        answer = await upstream.create_response(summary_request, headers)
        summary = _output_text(answer)
        if not summary.strip():
            raise UpstreamProtocolError("the upstream wrote no summary for the compaction")
        kept = [
            item
            for item in [*history.history_items, *history.input_items]
            if item.get("type", "message") == "message" and item.get("role") == "user"
        ]
        compaction: JsonObject = {
            "id": new_id("cmp"),
            "type": COMPACTION_TYPE,
            "encrypted_content": self.codec.seal(summary),
        }
        return {
            "id": new_id("resp"),
            "object": "response.compaction",
            "created_at": created_at,
            "output": [*kept, compaction],
            "usage": normalize_usage(answer.get("usage")) or empty_usage(),
        }


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
