"""Token counts and context windows of an HTTP upstream (``core.ports.TokenCounter``).

``TokenizingUpstream`` is the base of both kinds. A count is exact when the server has a
tokenizer endpoint: vLLM and SGLang serve ``POST /tokenize``, which takes a chat request
(``messages`` and ``tools``, rendered with the model's chat template and the generation prompt)
and answers ``{"count": N, "max_model_len": M, ...}``. The request is translated to the chat
form as the chat kind sends it (``chat_request``), so for a Responses-kind upstream the count
is the one its chat template gives. A server without it (404 or 405: OpenAI, Ollama,
llama.cpp) is remembered; then the kind's own count is asked (``count_natively``: the
Responses kind forwards to ``POST /v1/responses/input_tokens``, which OpenAI serves), else
``estimate_count``: tiktoken's ``cl100k_base`` over the text (``frontends.anthropic.tokens``),
flagged as an estimate. Any other refusal falls back the same way for that request. The
context window is the configured one (``[[upstreams]] context_window``), else the
``max_model_len`` the server lists for the model in ``GET /v1/models`` (vLLM, SGLang), cached
per model (a ``/tokenize`` answer fills the cache too).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import TypeGuard, Unpack

import orjson

from app.core.ports import TokenCount
from app.errors import InvalidRequestError, UpstreamHTTPError
from app.frontends.anthropic.tokens import estimate_input_tokens
from app.protocol.json_types import JsonObject
from app.upstream.chat_request import ChatOptions, to_chat_request
from app.upstream.http import HttpOptions, HttpUpstream
from app.upstream.tool_lowering import lower_tools

logger = logging.getLogger(__name__)

_NO_ENDPOINT = frozenset({404, 405, 501})


def has_no_route(error: UpstreamHTTPError) -> bool:
    """A server without the endpoint (not a 404 for the model the request names)."""
    if error.status_code not in _NO_ENDPOINT:
        return False
    return error.status_code != 404 or "model" not in error.message.lower()


def estimate_count(body: JsonObject) -> TokenCount:
    """The tiktoken estimate of a Responses body whose ``input`` is a list of items."""
    return TokenCount(estimate_input_tokens(body), exact=False)


class TokenizingUpstream(HttpUpstream):
    """An ``HttpUpstream`` that counts tokens with the server's ``/tokenize`` when it has one.

    ``context_window`` is the configured window of every model the upstream serves (None: the
    server's ``max_model_len``, discovered on demand). ``chat_options`` shape the chat form of a
    count request (the chat kind passes its own).
    """

    # The tool types the server takes as they are (each kind sets it; ``tool_lowering``).
    native_tool_types: frozenset[str] | None

    def __init__(
        self, base_url: str, *, context_window: int | None = None, **http: Unpack[HttpOptions]
    ) -> None:
        super().__init__(base_url, **http)
        self._configured_window = context_window
        self._windows: dict[str, int | None] = {}
        self._has_tokenize = True

    @property
    def chat_options(self) -> ChatOptions:
        return ChatOptions()

    async def count_input_tokens(self, body: JsonObject, headers: Mapping[str, str]) -> TokenCount:
        count = await self._tokenize(body, headers) if self._has_tokenize else None
        if count is None:
            count = await self.count_natively(body, headers)
        return count if count is not None else estimate_count(body)

    async def count_natively(
        self, body: JsonObject, headers: Mapping[str, str]
    ) -> TokenCount | None:
        """A kind's own exact count when the server has no ``/tokenize`` (None: it has none)."""
        return None

    async def _tokenize(self, body: JsonObject, headers: Mapping[str, str]) -> TokenCount | None:
        """The count of ``POST /tokenize`` in its chat form; None when the server has none or
        refused this one (logged)."""
        lowered, _ = lower_tools(body, self.native_tool_types)
        try:
            chat = to_chat_request(lowered, self.chat_options, stream=False)
        except InvalidRequestError:
            return None
        request: JsonObject = {"messages": chat.get("messages") or []}
        request["add_generation_prompt"] = True
        if chat.get("model") is not None:
            request["model"] = chat["model"]
        if chat.get("tools"):
            request["tools"] = chat["tools"]
        try:
            answer = await self.post_json(f"{self.base_url}/tokenize", request, headers)
        except UpstreamHTTPError as exc:
            if has_no_route(exc):
                self._has_tokenize = False
                logger.info(
                    "upstream %s has no /tokenize (HTTP %s)", self.base_url, exc.status_code
                )
            else:
                logger.warning("upstream %s refused /tokenize: %s", self.base_url, exc.message)
            return None
        count = answer.get("count")
        if not isinstance(count, int) or isinstance(count, bool):
            tokens = answer.get("tokens")
            if not isinstance(tokens, list):
                return None
            count = len(tokens)
        window = answer.get("max_model_len")
        model = body.get("model")
        if _is_window(window) and isinstance(model, str):
            self._windows.setdefault(model, window)
        return TokenCount(count, exact=True)

    def configured_window(self, model: str) -> int | None:
        return self._configured_window

    async def context_window(self, model: str, headers: Mapping[str, str]) -> int | None:
        if self._configured_window is not None:
            return self._configured_window
        if model in self._windows:
            return self._windows[model]
        try:
            reply = await self.list_models(headers)
        except Exception as exc:
            logger.warning("upstream %s: no model list, no context window: %s", self.base_url, exc)
            return None
        if reply.status_code >= 400:
            return None
        window = _listed_window(reply.body, model)
        self._windows[model] = window
        return window


def _listed_window(raw: bytes, model: str) -> int | None:
    """The ``max_model_len`` (or ``context_length``/``context_window``) listed for ``model``."""
    try:
        data = orjson.loads(raw)
    except orjson.JSONDecodeError:
        return None
    entries = data.get("data") if isinstance(data, dict) else data
    if not isinstance(entries, list):
        return None
    for entry in entries:
        if isinstance(entry, dict) and entry.get("id") == model:
            for key in ("max_model_len", "context_length", "context_window"):
                value = entry.get(key)
                if _is_window(value):
                    return value
    return None


def _is_window(value: object) -> TypeGuard[int]:
    return isinstance(value, int) and not isinstance(value, bool) and value > 0
