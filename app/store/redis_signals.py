"""``RedisJobSignals``: job signals (``app.core.job_signals``) through Redis pub/sub, channel
``respgate_jobs`` (``pip install 'respgate[redis]'``).

For gateways whose store is not PostgreSQL, or that would rather keep ``LISTEN`` connections
off their database. Two tasks: one listens on a pub/sub connection of its own (named
``respgate-signals-<random>``, see ``CLIENT LIST``), pinging it every ``keepalive`` seconds when
idle, and subscribes again on a new connection when it drops (growing back-off up to
``max_backoff``); one sends what ``publish`` queued, every queued signal in one pipeline. Signals
published while Redis is away are sent once it is back; those others sent meanwhile are lost
(the lease and the log poll make up for them).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import uuid
from typing import Any

import redis.asyncio as redis

from app.store.signal_transport import CHANNEL, SignalTransport

logger = logging.getLogger(__name__)


class RedisJobSignals(SignalTransport):
    """Job signals on one Redis server (see the module docstring)."""

    server_name = "Redis"

    def __init__(self, url: str, *, keepalive: float = 30.0, max_backoff: float = 5.0) -> None:
        super().__init__(keepalive=keepalive, max_backoff=max_backoff)
        self.client_name = f"respgate-signals-{uuid.uuid4().hex[:12]}"
        self._client: Any = redis.Redis.from_url(
            url, decode_responses=True, client_name=self.client_name, socket_keepalive=True
        )
        self._tasks: list[asyncio.Task[None]] = []

    async def aclose(self) -> None:
        if self._closed:
            return
        self._closed = True
        tasks, self._tasks = self._tasks, []
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        self._receivers.clear()
        await self._client.aclose()

    def _ensure_running(self) -> None:
        if not self._tasks and not self._closed:
            self._tasks = [
                asyncio.create_task(self._listen_forever(), name="job signals (Redis, listen)"),
                asyncio.create_task(self._send_forever(), name="job signals (Redis, send)"),
            ]

    # ------------------------------------------------------------------ listening

    async def _listen_forever(self) -> None:
        backoff = 0.1
        while True:
            pubsub = self._client.pubsub()
            try:
                await pubsub.subscribe(CHANNEL)
                while True:
                    message = await pubsub.get_message(timeout=self._keepalive)
                    if message is None:
                        await pubsub.ping()  # a dead connection fails here
                    elif message["type"] == "subscribe":
                        self.connections += 1
                        self._listening.set()
                        backoff = 0.1
                    elif message["type"] == "message":
                        self._deliver(str(message["data"]))
            except Exception as exc:
                logger.warning("job signals: Redis subscription lost (%s): resubscribing", exc)
                await asyncio.sleep(backoff)
                backoff = min(backoff * 2, self._max_backoff)
            finally:
                self._listening.clear()
                with contextlib.suppress(Exception):
                    await asyncio.shield(pubsub.aclose())

    # ------------------------------------------------------------------ sending

    async def _send_forever(self) -> None:
        backoff = 0.1
        while True:
            await self._wake.wait()
            self._wake.clear()
            if not self._queued:
                continue
            sending = self._take_queued()
            try:
                async with self._client.pipeline(transaction=False) as pipe:
                    for payload in sending:
                        pipe.publish(CHANNEL, payload)
                    await pipe.execute()
                backoff = 0.1
            except Exception as exc:
                logger.warning("job signals: cannot publish on Redis: %s", exc)
                self._requeue(sending)
                await asyncio.sleep(backoff)
                backoff = min(backoff * 2, self._max_backoff)
                self._wake.set()
