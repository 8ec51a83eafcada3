"""Upstream that serves only ``/v1/chat/completions`` (Ollama, llama.cpp, TGI, older vLLM and
SGLang, hosted chat APIs): each round is translated to a chat request and the answer back to
Responses events, so the core cannot tell which kind served it.

The translation itself is pure and lives in ``chat_request`` (request) and ``chat_response``
(answer and stream); this module is the HTTP side. Its streams are ``events.UpstreamEvents``
with a ``ChatStreamTranslator`` as the translation step. Tool types a chat server cannot take
(``namespace``, ``custom``, client ``tool_search``) are lowered to functions before the
translation and the model's calls raised back after it (``tool_lowering``).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Unpack

from app.core.ports import SingleResponseStream
from app.protocol.json_types import JsonObject
from app.upstream.chat_request import ChatOptions, to_chat_request
from app.upstream.chat_response import ChatStreamTranslator, to_response
from app.upstream.events import UpstreamEvents
from app.upstream.http import HttpOptions
from app.upstream.tokenize import TokenizingUpstream
from app.upstream.tool_lowering import (
    DEFAULT_NATIVE_TOOL_TYPES,
    lower_tools,
)
from app.upstream.tool_raising import EventRaiser, RaisingTranslator


class ChatUpstream(TokenizingUpstream):
    """``core.ports.Upstream`` over a chat-completions server."""

    def __init__(
        self,
        base_url: str,
        *,
        options: ChatOptions | None = None,
        native_tool_types: frozenset[str] | None = DEFAULT_NATIVE_TOOL_TYPES["chat"],
        context_window: int | None = None,
        **http: Unpack[HttpOptions],
    ) -> None:
        super().__init__(base_url, context_window=context_window, **http)
        self.options = options or ChatOptions()
        # Tool types sent as they are; the others are lowered (``tool_lowering``).
        self.native_tool_types = native_tool_types
        self._chat_url = f"{self.base_url}/v1/chat/completions"

    @property
    def chat_options(self) -> ChatOptions:
        return self.options

    async def create_response(self, body: JsonObject, headers: Mapping[str, str]) -> JsonObject:
        lowered, lowering = lower_tools(body, self.native_tool_types)
        request = to_chat_request(lowered, self.options, stream=False)
        completion = await self.post_json(self._chat_url, request, headers)
        response = to_response(completion, body)
        return lowering.raise_response(response) if lowering is not None else response

    async def stream_response(
        self, body: JsonObject, headers: Mapping[str, str]
    ) -> UpstreamEvents | SingleResponseStream:
        lowered, lowering = lower_tools(body, self.native_tool_types)
        request = to_chat_request(lowered, self.options, stream=True)
        answer = await self.post_stream(self._chat_url, request, headers)
        if isinstance(answer, dict):
            # The server ignored ``stream``: its whole completion becomes one terminal event.
            response = to_response(answer, body)
            if lowering is not None:
                response = lowering.raise_response(response)
            return SingleResponseStream(response)
        translator = ChatStreamTranslator(body)
        limit = self.max_event_bytes
        if lowering is None:
            return UpstreamEvents(answer, translator, max_bytes=limit)
        raising = RaisingTranslator(translator, EventRaiser(lowering))
        return UpstreamEvents(answer, raising, max_bytes=limit)
