"""The gateway in front of a replayed cassette: the replay upstream on a real socket (the gateway
reaches it over aiohttp), the gateway in this process (``tests.helpers.in_process``).

``gateway_stack(cassette_path, **settings)`` is the whole set-up of a recorded end-to-end test:
``stack.client`` is the openai SDK on the gateway, ``stack.http`` an ``httpx.Client`` on it (paths
such as ``"/v1/responses"``), ``stack.received()`` what the gateway sent upstream."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import openai

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
