"""The upstream kinds: each ``kind`` an upstream may have names the factory of its ``Upstream``.

A new kind is a module in this package, one entry in ``UPSTREAM_KINDS`` and its name in the
settings' ``UpstreamKind`` (tests/upstream/test_kinds.py checks that the two list the same
kinds). A kind's streaming answers are ``events.UpstreamEvents`` given the kind's
``EventTranslator`` (none when the upstream sends Responses events itself). The factories take
plain options that ``app.main`` builds from the settings, so this package does not import
``app.settings`` (the settings sit above the adapters).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from app.core.ports import Upstream
from app.upstream.chat import ChatUpstream
from app.upstream.chat_request import ChatOptions
from app.upstream.http import HttpOptions
from app.upstream.responses import ResponsesUpstream
from app.upstream.tool_lowering import DEFAULT_NATIVE_TOOL_TYPES


@dataclass(frozen=True, slots=True)
class UpstreamSpec:
    """What a kind's factory needs besides the shared ``HttpOptions``."""

    url: str
    # Kind "chat" only: how requests are shaped for a chat-completions server.
    chat: ChatOptions = field(default_factory=ChatOptions)
    # The tool types the server takes as they are (None: the kind's default,
    # ``tool_lowering.DEFAULT_NATIVE_TOOL_TYPES``); the others are lowered to functions.
    native_tool_types: frozenset[str] | None = None
    # Kind "responses" only: the server serves /v1/responses/compact itself (OpenAI).
    native_compact: bool = False
    # The context window of every model it serves (None: the server's ``max_model_len``,
    # discovered when a request asks for ``truncation: "auto"``; ``tokenize``).
    context_window: int | None = None


UpstreamFactory = Callable[[UpstreamSpec, HttpOptions], Upstream]


def create_responses_upstream(spec: UpstreamSpec, http: HttpOptions) -> Upstream:
    """Kind "responses": the server has ``/v1/responses`` (vLLM, SGLang, OpenAI)."""
    return ResponsesUpstream(
        spec.url,
        native_tool_types=_native(spec, "responses"),
        native_compact=spec.native_compact,
        context_window=spec.context_window,
        **http,
    )


def create_chat_upstream(spec: UpstreamSpec, http: HttpOptions) -> Upstream:
    """Kind "chat": only ``/v1/chat/completions`` (Ollama, llama.cpp, TGI, ...), translated."""
    return ChatUpstream(
        spec.url,
        options=spec.chat,
        native_tool_types=_native(spec, "chat"),
        context_window=spec.context_window,
        **http,
    )


def _native(spec: UpstreamSpec, kind: str) -> frozenset[str] | None:
    if spec.native_tool_types is not None:
        return spec.native_tool_types
    return DEFAULT_NATIVE_TOOL_TYPES[kind]


UPSTREAM_KINDS: Mapping[str, UpstreamFactory] = {
    "responses": create_responses_upstream,
    "chat": create_chat_upstream,
}


def create_upstream(kind: str, spec: UpstreamSpec, http: HttpOptions) -> Upstream:
    """The ``Upstream`` of ``kind``; ValueError naming the known kinds for any other."""
    factory = UPSTREAM_KINDS.get(kind)
    if factory is None:
        known = ", ".join(repr(name) for name in UPSTREAM_KINDS)
        raise ValueError(f"unknown upstream kind {kind!r} (known: {known})")
    return factory(spec, http)
