"""The gateway in front of a replayed cassette: the replay upstream on a real socket (the gateway
reaches it over aiohttp), the gateway in this process (``tests.helpers.in_process``).

``gateway_stack(cassette_path, **settings)`` is the whole set-up of a recorded end-to-end test:
``stack.client`` is the openai SDK on the gateway, ``stack.http`` an ``httpx.Client`` on it (paths
such as ``"/v1/responses"``), ``stack.received()`` what the gateway sent upstream.

The ``replay_stack`` fixture shares one replay server and one gateway (default settings) among
the tests of a module: ``stack = replay_stack.play(cassette_path)`` puts a cassette behind it."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import openai
import pytest
from starlette.types import Receive, Scope, Send

from app.main import create_app
from app.recording.cassette import Cassette, load_cassette
from app.recording.replay import create_replay_app
from app.settings import Settings
from tests.helpers import IN_PROCESS_URL, in_process, openai_client, serve_in_thread


@dataclass
class Stack:
    cassette: Cassette
    replay_url: str
    gateway_url: str
    client: openai.OpenAI
    http: httpx.Client

    def received(self) -> list[dict[str, object]]:
        """What the gateway sent to the upstream, as the replay server saw it."""
        reply = httpx.get(f"{self.replay_url}/__replay/requests")
        reply.raise_for_status()
        received: list[dict[str, object]] = reply.json()
        return received


@contextlib.contextmanager
def gateway_stack(cassette_path: Path, **settings: object) -> Iterator[Stack]:
    cassette = load_cassette(cassette_path)
    with serve_in_thread(create_replay_app(cassette)) as replay_url:
        app = create_app(Settings(upstream_url=replay_url, **settings))  # type: ignore[arg-type]
        with in_process(app) as http:
            yield Stack(cassette, replay_url, IN_PROCESS_URL, openai_client(http), http)


class SwappableReplay:
    """The replay app of the cassette loaded last, as one ASGI app: one server on one socket
    serves the cassettes of a whole module in turn."""

    def __init__(self) -> None:
        self.app = create_replay_app(Cassette())

    def load(self, cassette: Cassette) -> None:
        self.app = create_replay_app(cassette)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        await self.app(scope, receive, send)


@dataclass
class SharedStack:
    replay: SwappableReplay
    replay_url: str
    client: openai.OpenAI
    http: httpx.Client

    def play(self, cassette_path: Path) -> Stack:
        """The gateway in front of this cassette from now on (nothing answered or received)."""
        cassette = load_cassette(cassette_path)
        self.replay.load(cassette)
        return Stack(cassette, self.replay_url, IN_PROCESS_URL, self.client, self.http)


@pytest.fixture(scope="module")
def replay_stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SharedStack]:
    """One replay server and one gateway (default settings, a database of its own) for the
    tests of a module; each test ``play``s its cassette."""
    replay = SwappableReplay()
    with serve_in_thread(replay) as replay_url:
        data_dir = tmp_path_factory.mktemp("gateway")
        app = create_app(Settings(upstream_url=replay_url, data_dir=data_dir))
        with in_process(app) as http:
            yield SharedStack(replay, replay_url, openai_client(http), http)
