"""Upstream that serves only ``/v1/chat/completions`` (Ollama, llama.cpp, TGI, older vLLM and
SGLang, hosted chat APIs): each round is translated to a chat request and the answer back to
Responses events, so the core cannot tell which kind served it.

The translation itself is pure and lives in ``chat_request`` (request) and ``chat_response``
(answer and stream); this module is the HTTP side. Its streams are ``events.UpstreamEvents``
with a ``ChatStreamTranslator`` as the translation step.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Unpack

from app.core.ports import SingleResponseStream
from app.protocol.json_types import JsonObject
from app.upstream.chat_request import ChatOptions, to_chat_request
from app.upstream.chat_response import ChatStreamTranslator, to_response
from app.upstream.events import UpstreamEvents
from app.upstream.http import HttpOptions, HttpUpstream


class ChatUpstream(HttpUpstream):
    """``core.ports.Upstream`` over a chat-completions server."""

    def __init__(
        self, base_url: str, *, options: ChatOptions | None = None, **http: Unpack[HttpOptions]
    ) -> None:
        super().__init__(base_url, **http)
        self.options = options or ChatOptions()
        self._chat_url = f"{self.base_url}/v1/chat/completions"

    async def create_response(self, body: JsonObject, headers: Mapping[str, str]) -> JsonObject:
        request = to_chat_request(body, self.options, stream=False)
        completion = await self.post_json(self._chat_url, request, headers)
        return to_response(completion, body)

    async def stream_response(
        self, body: JsonObject, headers: Mapping[str, str]
    ) -> UpstreamEvents | SingleResponseStream:
        request = to_chat_request(body, self.options, stream=True)
        answer = await self.post_stream(self._chat_url, request, headers)
        if isinstance(answer, dict):
            # The server ignored ``stream``: its whole completion becomes one terminal event.
            return SingleResponseStream(to_response(answer, body))
        return UpstreamEvents(answer, ChatStreamTranslator(body))
