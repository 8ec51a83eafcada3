"""Waiting for an upstream connection: nothing queues silently on the connection pool.

Each upstream's aiohttp pool holds at most ``max_connections`` connections (0: no limit); a
request past them waits in aiohttp's connector until one is released, and that wait counts
against ``connect_timeout``: past it the request fails with 503 ``upstream_busy``
(``UpstreamBusyError``; the upstream is busy, not failing, so the gateway does not retry it and
its circuit breaker does not count it; a TCP connect that times out after the wait is still a
504). A ``PoolWatch`` measures each wait with aiohttp's own trace hooks,
``on_connection_queued_start`` and ``on_connection_queued_end``, which aiohttp fires only for a
request that found the pool full; its ``WatchedConnector`` hands the trace to the connection
step alone (see there why), and ends the wait of a request that gave up waiting (timed out,
cancelled). A request that found a free connection is neither timed nor counted.

For every wait, ``PoolWatch`` keeps how many requests wait now (``report``: ``/ready`` and the
``respgate_upstream_pool_waiting`` gauge) and tells its observers the seconds waited (the
``respgate_upstream_pool_wait_seconds`` histogram, ``app.api.metrics``). A wait of
``pool_wait_warn_seconds`` or more logs a warning naming the upstream, the wait, the limit and
how many wait now: the first at once, then at most one line per :data:`NOTICE_SECONDS` per
upstream, which counts the waits it stands for (so a saturated pool logs a line every ten
seconds, not one per request).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from types import SimpleNamespace
from typing import Any, cast

import aiohttp
from aiohttp import ClientRequest
from aiohttp.connector import Connection
from aiohttp.tracing import Trace

from app.core.ports import PoolReport, PoolWaitObserver
from app.core.summarized import Summarized
from app.errors import UpstreamBusyError

logger = logging.getLogger(__name__)

# At most one warning line per upstream in this many seconds (the first one at once).
NOTICE_SECONDS = 10.0


def pool_connector(watch: PoolWatch, **options: Any) -> aiohttp.TCPConnector:
    """The connector of ``watch``'s pool (``options``: ``aiohttp.TCPConnector``'s): one that
    traces its waits, or, with no limit (nothing ever waits), aiohttp's own."""
    if watch.limit == 0:
        return aiohttp.TCPConnector(limit=0, **options)
    return WatchedConnector(watch, **options)


class WatchedConnector(aiohttp.TCPConnector):
    """aiohttp's connector, its connection step traced for ``PoolWatch``: aiohttp fires the
    trace's ``on_connection_queued_*`` hooks only when the pool is full.

    The trace is given to ``connect`` alone, and only when the pool is full: a session's
    trace (``trace_configs``) runs through every step of every request (eight signals sent,
    the URL rebuilt twice, a callback per chunk written): 13-24 µs of CPU a request on this
    project's bench; a trace on every connection step 2 µs; this, with a free slot, 0.4 µs
    (bench/README.md, "Issue 19: waiting for an upstream connection")."""

    def __init__(self, watch: PoolWatch, **options: Any) -> None:
        super().__init__(limit=watch.limit, **options)
        self.watch = watch
        # Whether a request may find the pool full: aiohttp's set of the connections in use
        # (a private attribute of its connectors; without it every step is traced).
        self._counted = isinstance(getattr(self, "_acquired", None), set)

    async def connect(
        self,
        req: ClientRequest,
        traces: list[Trace],
        timeout: aiohttp.ClientTimeout,  # noqa: ASYNC109 - aiohttp's signature
    ) -> Connection:
        if self._counted and len(self._acquired) < self.watch.limit:
            # A free slot: aiohttp will not wait (it makes the same test, with nothing run in
            # between: the session has no trace of its own to await), so nothing to trace.
            return await super().connect(req, traces, timeout)
        config = self.watch.trace_config
        ctx = config.trace_config_ctx()
        # The receivers take no session: none is given.
        trace = Trace(cast(aiohttp.ClientSession, None), config, ctx)
        try:
            return await super().connect(req, [*traces, trace], timeout)
        except TimeoutError as exc:
            waited = self.watch.gave_up(ctx)
            if waited is None:  # it had a connection slot: the TCP connection timed out
                raise
            raise UpstreamBusyError(self.watch.name, self.watch.limit, waited) from exc
        except BaseException:
            self.watch.gave_up(ctx)
            raise


class _WaitContext(SimpleNamespace):
    """aiohttp's per-request trace context: when the request started waiting, if it waits."""

    queued_at: float | None = None


class PoolWatch:
    """One upstream's connection pool: the waits for a connection (see the module docstring)."""

    def __init__(
        self, name: str, limit: int, warn_after: float, *, interval: float = NOTICE_SECONDS
    ) -> None:
        self.name = name
        self.limit = limit
        self.warn_after = warn_after
        self.waiting = 0
        self._observers: list[PoolWaitObserver] = []
        # The waits of warn_after or more: (seconds, gave up), a line per interval at most.
        self._long_waits = Summarized(self._tell_first, self._tell_more, interval)
        trace = aiohttp.TraceConfig(trace_config_ctx_factory=_WaitContext)
        trace.on_connection_queued_start.append(self._queued)
        trace.on_connection_queued_end.append(self._dequeued)
        trace.freeze()
        self.trace_config = trace

    def report(self) -> PoolReport:
        return PoolReport(limit=self.limit, waiting=self.waiting)

    def watch(self, observer: PoolWaitObserver) -> Callable[[], None]:
        """Call ``observer(name, seconds)`` after every wait; returns what stops it."""
        self._observers.append(observer)
        return lambda: self._observers.remove(observer)

    async def _queued(self, _: aiohttp.ClientSession, ctx: SimpleNamespace, __: object) -> None:
        ctx.queued_at = time.monotonic()
        self.waiting += 1

    async def _dequeued(self, _: aiohttp.ClientSession, ctx: SimpleNamespace, __: object) -> None:
        self._ended(ctx, gave_up=False)

    def gave_up(self, ctx: SimpleNamespace) -> float | None:
        """The connection step failed (timed out, cancelled): the end of a wait, if it was in
        one; the seconds it waited then."""
        return self._ended(ctx, gave_up=True)

    def _ended(self, ctx: SimpleNamespace, *, gave_up: bool) -> float | None:
        started: float | None = ctx.queued_at
        if started is None:
            return None
        ctx.queued_at = None
        self.waiting -= 1
        seconds = time.monotonic() - started
        for observer in self._observers:
            try:
                observer(self.name, seconds)
            except Exception:  # a broken observer must not fail the request
                logger.exception("upstream %s: a pool wait observer failed", self.name)
        if seconds >= self.warn_after:
            self._long_waits.note((seconds, gave_up))
        return seconds

    def _tell_first(self, wait: tuple[float, bool]) -> None:
        seconds, gave_up = wait
        logger.warning(
            "upstream %s: a request %s %.2f s for a connection: the pool's %d connections "
            "were all in use (max_connections), %d requests wait now; raise "
            "max_connections to the server's concurrency (vLLM max_num_seqs), or 0: no limit",
            self.name,
            "gave up after waiting" if gave_up else "waited",
            seconds,
            self.limit,
            self.waiting,
        )

    def _tell_more(self, waits: list[tuple[float, bool]]) -> None:
        logger.warning(
            "upstream %s: %d more requests waited %g s or more for a connection in the last "
            "%g s (longest %.2f s, %d gave up): the pool's %d connections were all in use "
            "(max_connections), %d requests wait now",
            self.name,
            len(waits),
            self.warn_after,
            self._long_waits.interval,
            max(seconds for seconds, _ in waits),
            sum(gave_up for _, gave_up in waits),
            self.limit,
            self.waiting,
        )

    def close(self) -> None:
        """Log what is still untold (``HttpUpstream.aclose``)."""
        self._long_waits.close()
