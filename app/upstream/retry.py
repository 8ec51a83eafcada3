"""Retries of upstream requests that never started, and the circuit breaker's bookkeeping.

A request to the upstream is sent again, after a backoff with full jitter (a random wait
between 0 and ``backoff * 2**n``, at most ``max_wait``), when it never reached a working server:

- the connection failed: refused, not made in ``connect_timeout``, DNS, or reset / closed by
  the server before any response (a pooled connection the server had just closed);
- the server answered 502 or 503 (a proxy with no backend, a server loading or overloaded),
  before a byte of the body was read. Its ``retry-after`` (or ``retry-after-ms``) is the wait
  when it says one; one longer than ``max_wait`` is not waited for: the error goes to the client.

Never retried: a request that waited ``connect_timeout`` for a connection of a full pool
(``UpstreamBusyError``, 503 ``upstream_busy``: the upstream is busy, not failing; the breaker
does not count it either), anything after a response started (a stream that began is never
replayed), a 4xx, any other 5xx, and a read timeout once the request was sent, 504 included
(the server may be generating the answer: a second request would pay for it twice). At most
``retries`` more attempts; the waits end with the request: its deadline (``core.deadline``) or
its client going away cancels them. An error the gateway already retried carries
``x-should-retry: false``, so the ``openai`` SDKs do not multiply the attempts (their default
is two more on 502 and 503).

Each request passes the upstream's ``CircuitBreaker`` (``app.upstream.breaker``): an open
circuit fails the request at once with 503 ``upstream_unavailable`` and ``retry-after``.
"""

from __future__ import annotations

import asyncio
import logging
import random
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from email.utils import parsedate_to_datetime

import aiohttp

from app.errors import UpstreamBusyError, UpstreamError, UpstreamUnavailableError
from app.net.http import map_transport_error, release
from app.upstream.breaker import CircuitBreaker, Outcome, Pass

logger = logging.getLogger(__name__)

# Statuses a request is sent again on, and those that count as the upstream failing.
RETRIED_STATUSES = frozenset({502, 503})
FAILED_STATUSES = frozenset({502, 503, 504})

NO_RETRY = {"x-should-retry": "false"}

_SUCCESS, _FAILURE = Outcome.SUCCESS, Outcome.FAILURE


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    """How many times, and how long apart, a request that never started is sent again."""

    retries: int = 2
    backoff: float = 0.5
    max_wait: float = 10.0

    def delay(
        self,
        retry: int,
        retry_after: float | None = None,
        rand: Callable[[], float] = random.random,
    ) -> float | None:
        """The wait before retry number ``retry`` (1 for the first), or None for none: the
        retries are spent, or the server asked for a wait longer than ``max_wait``."""
        if retry > self.retries:
            return None
        if retry_after is not None:
            return retry_after if retry_after <= self.max_wait else None
        return rand() * min(self.max_wait, self.backoff * 2.0 ** (retry - 1))


def retry_after_seconds(headers: Mapping[str, str], now: float | None = None) -> float | None:
    """The wait a ``retry-after-ms`` or ``retry-after`` header asks for (seconds, or an HTTP
    date), or None when there is none it can read."""
    millis = headers.get("retry-after-ms")
    if millis is not None:
        try:
            return max(0.0, float(millis) / 1000)
        except ValueError:
            pass
    value = headers.get("retry-after")
    if value is None:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        when = parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    if when.tzinfo is None:
        return None
    return max(0.0, when.timestamp() - (time.time() if now is None else now))


def is_retryable(exc: BaseException) -> bool:
    """Whether a request that raised ``exc`` never reached a working server (see the module)."""
    if isinstance(exc, aiohttp.ClientSSLError):
        return False  # a TLS misconfiguration stays one
    return isinstance(
        exc,
        aiohttp.ClientOSError  # connection refused or reset (ClientConnectorError, DNS)
        | aiohttp.ConnectionTimeoutError  # not connected within connect_timeout
        | aiohttp.ServerDisconnectedError  # closed before sending a response
        | ConnectionError,
    )


def create_guard(
    name: str, *, retries: int, backoff: float, max_wait: float, threshold: int, cooldown: float
) -> UpstreamGuard:
    """The guard of upstream ``name``: its retry policy and a circuit breaker of its own."""
    breaker = CircuitBreaker(name, threshold=threshold, cooldown=cooldown)
    return UpstreamGuard(RetryPolicy(retries, backoff, max_wait), breaker, name=name)


class UpstreamGuard:
    """The retry policy and the circuit breaker of one upstream, around each request."""

    def __init__(
        self, policy: RetryPolicy, breaker: CircuitBreaker | None = None, *, name: str = ""
    ) -> None:
        self.policy = policy
        self.breaker = breaker
        # The upstream's configured name, in log lines.
        self.name = name or (breaker.name if breaker is not None else "upstream")

    async def send(
        self, post: Callable[[], Awaitable[aiohttp.ClientResponse]]
    ) -> tuple[aiohttp.ClientResponse, bool]:
        """The response of ``post()`` (status and headers read, body not), after the retries
        it may take, and whether it was retried. A 502 or 503 is returned as it came once
        the retries are spent; a transport failure raises its ``UpstreamError``. The breaker
        counts the request once, by how its last attempt ended (not at all when cancelled)."""
        admitted = self._admit()
        outcome = Outcome.NEUTRAL
        try:
            resp, retries = await self._attempts(post)
            outcome = _FAILURE if resp.status in FAILED_STATUSES else _SUCCESS
        except UpstreamBusyError:
            raise  # busy, not failing: neutral for the breaker
        except UpstreamError:
            outcome = _FAILURE
            raise
        finally:
            if self.breaker is not None and admitted is not None:
                self.breaker.record(admitted, outcome)
        return resp, retries > 0

    async def _attempts(
        self, post: Callable[[], Awaitable[aiohttp.ClientResponse]]
    ) -> tuple[aiohttp.ClientResponse, int]:
        retry = 0
        while True:
            try:
                resp = await post()
            except Exception as exc:
                wait = self.policy.delay(retry + 1) if is_retryable(exc) else None
                if wait is None:
                    error = map_transport_error(exc)
                    if retry:
                        error.headers = NO_RETRY
                    raise error from exc
                logger.info(
                    "upstream %s: connection failed (%s): retry %d in %.2f s",
                    self.name,
                    exc,
                    retry + 1,
                    wait,
                )
            else:
                if resp.status not in RETRIED_STATUSES:
                    return resp, retry
                wait = self.policy.delay(retry + 1, retry_after_seconds(resp.headers))
                if wait is None:
                    return resp, retry
                release(resp)
                logger.info(
                    "upstream %s answered %d: retry %d in %.2f s",
                    self.name,
                    resp.status,
                    retry + 1,
                    wait,
                )
            retry += 1
            await asyncio.sleep(wait)

    def _admit(self) -> Pass | None:
        if self.breaker is None:
            return None
        admitted = self.breaker.admit()
        if admitted is None:
            raise UpstreamUnavailableError(self.breaker.name, self.breaker.retry_after)
        return admitted
