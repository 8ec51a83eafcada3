"""Upstream that serves ``/v1/responses`` itself: vLLM, SGLang, OpenAI.

Tool types outside ``native_tool_types`` (by default all but ``function``: vLLM and SGLang run
no others) are lowered to functions and the calls raised back (``tool_lowering``).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Unpack

from app.core.ports import SingleResponseStream, TokenCount
from app.errors import UpstreamError, UpstreamHTTPError
from app.protocol.json_types import JsonObject
from app.upstream.events import UpstreamEvents
from app.upstream.http import HttpOptions
from app.upstream.tokenize import TokenizingUpstream, has_no_route
from app.upstream.tool_lowering import (
    DEFAULT_NATIVE_TOOL_TYPES,
    lower_tools,
)
from app.upstream.tool_raising import EventRaiser, RaisedEvents

logger = logging.getLogger(__name__)

# How servers answer a POST to a path they have no route for (FastAPI, Go's net/http as in
# Ollama, llama.cpp, aiohttp, nginx): a 404 whose message names no model or object.
_NO_ROUTE_MESSAGES = frozenset(
    {
        "not found",
        "404 page not found",
        "404: not found",
        "page not found",
        "file not found",
        "upstream returned http 404",
    }
)
NO_RESPONSES_API_HINT = (
    "The upstream has no /v1/responses (it answered 404 there): if it serves only "
    "/v1/chat/completions (Ollama, llama.cpp, TGI …), run the gateway with "
    '--upstream-kind chat (RESPGATE_UPSTREAM_KIND=chat, or kind = "chat" in [[upstreams]]).'
)


# What ``POST /v1/responses/input_tokens`` takes besides the (rehydrated) input.
_COUNT_FIELDS = (
    "model",
    "input",
    "instructions",
    "tools",
    "tool_choice",
    "parallel_tool_calls",
    "reasoning",
    "text",
    "truncation",
)


class NoResponsesApiError(UpstreamError):
    """The upstream answered 404 on ``/v1/responses`` itself: it is a chat-only server."""

    status_code = 502
    code = "upstream_has_no_responses_api"
    log_each = False  # the upstream logs it once


def is_missing_route(error: UpstreamHTTPError) -> bool:
    """A 404 for the path itself, not for a model or an object the request names."""
    if error.status_code != 404:
        return False
    message = str(error.to_error().get("message") or "").strip().rstrip(".").lower()
    return message in _NO_ROUTE_MESSAGES


class ResponsesUpstream(TokenizingUpstream):
    """``core.ports.Upstream`` for a server with its own ``POST /v1/responses``."""

    def __init__(
        self,
        base_url: str,
        *,
        native_tool_types: frozenset[str] | None = DEFAULT_NATIVE_TOOL_TYPES["responses"],
        native_compact: bool = False,
        context_window: int | None = None,
        **http: Unpack[HttpOptions],
    ) -> None:
        super().__init__(base_url, context_window=context_window, **http)
        self.native_tool_types = native_tool_types
        # The server has its own /v1/responses/compact (OpenAI): compact requests go there.
        self.native_compact = native_compact
        self._responses_url = f"{self.base_url}/v1/responses"
        self._told_no_route = False
        self._has_input_tokens = True

    def compacts_natively(self, model: str | None) -> bool:
        """``core.compaction.NativeCompactor``: per configuration, whatever the model."""
        return self.native_compact

    async def compact_natively(self, body: JsonObject, headers: Mapping[str, str]) -> JsonObject:
        """``POST /v1/responses/compact`` forwarded as it came."""
        return await self.post_json(f"{self._responses_url}/compact", body, headers)

    async def create_response(self, body: JsonObject, headers: Mapping[str, str]) -> JsonObject:
        lowered, lowering = lower_tools(body, self.native_tool_types)
        try:
            response = await self.post_json(self._responses_url, lowered, headers)
        except UpstreamHTTPError as exc:
            raise self._explain(exc) from exc
        return lowering.raise_response(response) if lowering is not None else response

    async def stream_response(
        self, body: JsonObject, headers: Mapping[str, str]
    ) -> UpstreamEvents | SingleResponseStream | RaisedEvents:
        lowered, lowering = lower_tools(body, self.native_tool_types)
        try:
            answer = await self.post_stream(self._responses_url, lowered, headers)
        except UpstreamHTTPError as exc:
            raise self._explain(exc) from exc
        if isinstance(answer, dict):
            # The server ignored ``stream``: fold its whole answer into one terminal event.
            if lowering is not None:
                answer = lowering.raise_response(answer)
            return SingleResponseStream(answer)
        # Its events are Responses events already: no translation step.
        events = UpstreamEvents(answer, max_bytes=self.max_event_bytes)
        if lowering is None:
            return events
        return RaisedEvents(events, EventRaiser(lowering))

    async def count_natively(
        self, body: JsonObject, headers: Mapping[str, str]
    ) -> TokenCount | None:
        """OpenAI's exact count (``POST /v1/responses/input_tokens``) when the server has it."""
        if not self._has_input_tokens:
            return None
        lowered, _ = lower_tools(body, self.native_tool_types)
        request = {key: lowered[key] for key in _COUNT_FIELDS if key in lowered}
        try:
            answer = await self.post_json(f"{self._responses_url}/input_tokens", request, headers)
        except UpstreamHTTPError as exc:
            if has_no_route(exc):
                self._has_input_tokens = False
            else:
                logger.warning("upstream %s refused input_tokens: %s", self.base_url, exc.message)
            return None
        tokens = answer.get("input_tokens")
        if not isinstance(tokens, int) or isinstance(tokens, bool):
            return None
        return TokenCount(tokens, exact=True)

    def _explain(self, error: UpstreamHTTPError) -> UpstreamError:
        """A 404 on the path itself says what to do (logged once); other errors pass."""
        if not is_missing_route(error):
            return error
        if not self._told_no_route:
            self._told_no_route = True
            logger.error(
                "upstream %s answered 404 on %s: %s",
                self.base_url,
                self._responses_url,
                NO_RESPONSES_API_HINT,
            )
        return NoResponsesApiError(NO_RESPONSES_API_HINT)
