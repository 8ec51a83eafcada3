"""What the job-signal transports (``pg_signals``, ``redis_signals``) share: the receivers this
process registered, the queue of signals waiting to be sent, and delivery.

The queue keeps each payload once, in order, and at most ``MAX_QUEUED`` of them (while the
server is away the oldest go first: a lost signal costs latency only, the lease and the log
poll make up for it). A transport starts its connection task(s) in ``_ensure_running``, takes
what waits with ``_take_queued`` and gives back what it could not send with ``_requeue``.
"""

from __future__ import annotations

import asyncio
import logging
from abc import ABC, abstractmethod

from app.core.job_signals import SignalKind, SignalReceiver, decode, encode

logger = logging.getLogger(__name__)

CHANNEL = "respgate_jobs"
MAX_QUEUED = 10_000


class SignalTransport(ABC):
    """The part of a job-signals adapter that is not its server's (see the module)."""

    spans_processes = True
    server_name = "the server"  # for the log line when listening is late

    def __init__(self, *, keepalive: float, max_backoff: float) -> None:
        self._keepalive = keepalive
        self._max_backoff = max_backoff
        self._receivers: list[SignalReceiver] = []
        self._queued: dict[str, None] = {}  # payloads in order, each once
        self._wake = asyncio.Event()
        self._listening = asyncio.Event()
        self._closed = False
        self.connections = 0  # how many times it connected or subscribed (tests: reconnects)

    @abstractmethod
    def _ensure_running(self) -> None:
        """Start the transport's connection task(s) unless they run or it is closed."""

    async def listen(self, receiver: SignalReceiver) -> None:
        self._receivers.append(receiver)
        self._ensure_running()
        try:
            await asyncio.wait_for(self._listening.wait(), self._keepalive)
        except TimeoutError:  # signals come once it connects; until then the slow paths
            logger.warning("job signals: not listening on %s yet", self.server_name)

    def publish(self, kind: SignalKind, response_id: str) -> None:
        if self._closed:
            return
        if len(self._queued) >= MAX_QUEUED:  # the server is away: drop the oldest
            del self._queued[next(iter(self._queued))]
        self._queued[encode(kind, response_id)] = None
        self._wake.set()
        self._ensure_running()

    def _take_queued(self) -> list[str]:
        sending, self._queued = self._queued, {}
        return list(sending)

    def _requeue(self, payloads: list[str]) -> None:
        """Put back what could not be sent, before what was queued meanwhile."""
        self._queued = {**dict.fromkeys(payloads), **self._queued}

    def _deliver(self, payload: str) -> None:
        signal = decode(payload)
        if signal is None:
            return
        for receiver in list(self._receivers):
            try:
                receiver(*signal)
            except Exception:
                logger.exception("job signal receiver failed")
