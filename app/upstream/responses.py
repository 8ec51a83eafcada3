"""Upstream that serves ``/v1/responses`` itself: vLLM, SGLang, OpenAI."""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping
from typing import Unpack

import aiohttp

from app.core.ports import JsonObject, SingleResponseStream
from app.errors import UpstreamError
from app.upstream.http import HttpOptions, HttpUpstream, map_transport_error, release
from app.upstream.sse import parse_sse_lines, split_lines


class ResponsesUpstream(HttpUpstream):
    """``core.ports.Upstream`` for a server with its own ``POST /v1/responses``."""

    def __init__(self, base_url: str, **http: Unpack[HttpOptions]) -> None:
        super().__init__(base_url, **http)
        self._responses_url = f"{self.base_url}/v1/responses"

    async def create_response(self, body: JsonObject, headers: Mapping[str, str]) -> JsonObject:
        return await self.post_json(self._responses_url, body, headers)

    async def stream_response(
        self, body: JsonObject, headers: Mapping[str, str]
    ) -> AiohttpEventStream | SingleResponseStream:
        answer = await self.post_stream(self._responses_url, body, headers)
        if isinstance(answer, dict):
            # The server ignored ``stream``: fold its whole answer into one terminal event.
            return SingleResponseStream(answer)
        return AiohttpEventStream(answer)


class AiohttpEventStream:
    """Events parsed from a streaming aiohttp response; closing it drops the connection."""

    def __init__(self, resp: aiohttp.ClientResponse) -> None:
        self._resp = resp

    def __aiter__(self) -> AsyncIterator[JsonObject]:
        return self._events()

    async def _events(self) -> AsyncIterator[JsonObject]:
        try:
            # Not aiohttp's readline: it caps line length (see ``split_lines``).
            lines = split_lines(self._resp.content.iter_any())
            async for event in parse_sse_lines(lines):
                yield event
        except UpstreamError:
            raise
        except Exception as exc:
            raise map_transport_error(exc) from exc
        finally:
            await self.aclose()

    async def aclose(self) -> None:
        release(self._resp)
