"""The upstream kind registry (``app.upstream.kinds``): it builds every kind the settings accept,
and the wiring builds each configured upstream through it."""

from __future__ import annotations

from typing import get_args

import pytest
from pydantic import ValidationError

from app.main import build_upstream
from app.settings import Settings, UpstreamKind
from app.upstream.chat import ChatUpstream
from app.upstream.chat_request import ChatOptions
from app.upstream.http import HttpOptions
from app.upstream.kinds import UPSTREAM_KINDS, UpstreamSpec, create_upstream
from app.upstream.responses import ResponsesUpstream

HTTP: HttpOptions = {"api_key": "sk-test", "connect_timeout": 1.0, "read_timeout": 2.0}


def test_the_settings_accept_exactly_the_registered_kinds() -> None:
    assert sorted(get_args(UpstreamKind)) == sorted(UPSTREAM_KINDS)


async def test_each_kind_builds_its_upstream() -> None:
    chat_options = ChatOptions(reasoning_history="reasoning", stream_usage=False)
    spec = UpstreamSpec(url="http://127.0.0.1:9/v1", chat=chat_options)
    chat = create_upstream("chat", spec, HTTP)
    responses = create_upstream("responses", spec, HTTP)
    try:
        assert isinstance(chat, ChatUpstream)
        assert chat.options == chat_options
        assert isinstance(responses, ResponsesUpstream)
        assert (chat.base_url, responses.base_url) == ("http://127.0.0.1:9/v1",) * 2
    finally:
        await chat.aclose()
        await responses.aclose()


def test_an_unregistered_kind_names_the_known_ones() -> None:
    spec = UpstreamSpec(url="http://127.0.0.1:9")
    known = r"unknown upstream kind 'grpc' \(known: 'responses', 'chat'\)"
    with pytest.raises(ValueError, match=known):
        create_upstream("grpc", spec, HTTP)


def test_an_unknown_kind_is_rejected_by_the_settings() -> None:
    with pytest.raises(ValidationError, match="Input should be 'responses' or 'chat'"):
        Settings(upstream_kind="grpc")  # type: ignore[arg-type]


async def test_the_wiring_builds_each_upstream_by_its_kind() -> None:
    settings = Settings(
        upstreams=[
            {"name": "ollama", "url": "http://ollama:11434", "kind": "chat", "stream_usage": False},
            {"name": "vllm", "url": "http://vllm:8000", "default": True},
        ]
    )
    router = build_upstream(settings)
    try:
        kinds = {route.name: type(route.upstream) for route in router.routes}
        assert kinds == {"vllm": ResponsesUpstream, "ollama": ChatUpstream}
        chat = router.routes[1].upstream
        assert isinstance(chat, ChatUpstream)
        assert chat.options == ChatOptions(stream_usage=False)
    finally:
        await router.aclose()
