"""The gateway in front of a replayed cassette, both on real sockets."""

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
from tests.helpers import serve_in_thread


@dataclass
class Stack:
    cassette: Cassette
    replay_url: str
    gateway_url: str
    client: openai.OpenAI

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
        with serve_in_thread(app) as gateway_url:
            client = openai.OpenAI(base_url=f"{gateway_url}/v1", api_key="sk-test", max_retries=0)
            yield Stack(cassette, replay_url, gateway_url, client)
            client.close()
