"""Upstream that serves only ``/v1/chat/completions`` (Ollama, llama.cpp, TGI, older vLLM and
SGLang, hosted chat APIs): each round is translated to a chat request and the answer back to
Responses events, so the core cannot tell which kind served it.

The translation itself is pure and lives in ``chat_request`` (request) and ``chat_response``
(answer and stream); this module is the HTTP side.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping
from typing import Unpack

import aiohttp

from app.core.ports import SingleResponseStream
from app.errors import UpstreamError
from app.net.http import map_transport_error, release
from app.protocol.events import STREAM_DONE
from app.protocol.json_types import JsonObject
from app.upstream.chat_request import ChatOptions, to_chat_request
from app.upstream.chat_response import ChatStreamTranslator, to_response
from app.upstream.http import HttpOptions, HttpUpstream
from app.upstream.sse import parse_sse_lines, split_lines


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
    ) -> ChatEventStream | SingleResponseStream:
        request = to_chat_request(body, self.options, stream=True)
        answer = await self.post_stream(self._chat_url, request, headers)
        if isinstance(answer, dict):
            # The server ignored ``stream``: its whole completion becomes one terminal event.
            return SingleResponseStream(to_response(answer, body))
        return ChatEventStream(answer, ChatStreamTranslator(body))


class ChatEventStream:
    """A streaming chat completion as Responses events; closing it drops the connection."""

    def __init__(self, resp: aiohttp.ClientResponse, translator: ChatStreamTranslator) -> None:
        self._resp = resp
        self._translator = translator

    def __aiter__(self) -> AsyncIterator[JsonObject]:
        return self._events()

    async def _events(self) -> AsyncIterator[JsonObject]:
        translator = self._translator
        try:
            lines = split_lines(self._resp.content.iter_any())
            async for chunk in parse_sse_lines(lines):
                if chunk.get("type") == STREAM_DONE:
                    break
                for event in translator.feed(chunk):
                    yield event
                if translator.done:
                    return
            for event in translator.finish():
                yield event
        except UpstreamError:
            raise
        except Exception as exc:
            raise map_transport_error(exc) from exc
        finally:
            await self.aclose()

    async def aclose(self) -> None:
        release(self._resp)
