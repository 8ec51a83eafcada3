"""Retry decisions: the backoff with full jitter, ``retry-after``, which failures are retried,
and the guard's loop around a request that never got an answer (no HTTP here; the end-to-end
cases are tests/api/test_upstream_retries.py)."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime
from email.utils import format_datetime

import aiohttp
import pytest
from pydantic import ValidationError

from app.errors import UpstreamTimeoutError, UpstreamUnavailableError, UpstreamUnreachableError
from app.main import build_upstream
from app.settings import Settings
from app.upstream.breaker import CircuitBreaker, CircuitState
from app.upstream.http import HttpUpstream
from app.upstream.retry import RetryPolicy, UpstreamGuard, is_retryable, retry_after_seconds


def test_backoff_is_full_jitter_doubling_up_to_the_cap() -> None:
    policy = RetryPolicy(retries=5, backoff=0.5, max_wait=3.0)
    assert [policy.delay(n, rand=lambda: 1.0) for n in (1, 2, 3, 4)] == [0.5, 1.0, 2.0, 3.0]
    assert policy.delay(2, rand=lambda: 0.25) == 0.25
    assert policy.delay(1, rand=lambda: 0.0) == 0.0


def test_no_delay_once_the_retries_are_spent() -> None:
    policy = RetryPolicy(retries=2)
    assert policy.delay(2) is not None
    assert policy.delay(3) is None
    assert RetryPolicy(retries=0).delay(1) is None


def test_retry_after_is_honoured_within_the_cap() -> None:
    policy = RetryPolicy(retries=2, max_wait=10.0)
    assert policy.delay(1, retry_after=7.0) == 7.0
    assert policy.delay(1, retry_after=0.0) == 0.0
    # Longer than the cap: not waited for, the error goes to the client at once.
    assert policy.delay(1, retry_after=60.0) is None


def test_retry_after_headers() -> None:
    assert retry_after_seconds({"retry-after": "3"}) == 3.0
    assert retry_after_seconds({"retry-after": "1.5"}) == 1.5
    assert retry_after_seconds({"retry-after-ms": "250", "retry-after": "9"}) == 0.25
    assert retry_after_seconds({"retry-after": "-4"}) == 0.0
    assert retry_after_seconds({}) is None
    assert retry_after_seconds({"retry-after": "soon"}) is None
    now = datetime(2026, 1, 1, 12, 0, 0, tzinfo=UTC)
    later = format_datetime(datetime(2026, 1, 1, 12, 0, 20, tzinfo=UTC), usegmt=True)
    assert retry_after_seconds({"retry-after": later}, now=now.timestamp()) == 20.0


def refused() -> aiohttp.ClientConnectorError:
    key = aiohttp.client_reqrep.ConnectionKey("h", 1, False, True, None, None, None)
    return aiohttp.ClientConnectorError(key, ConnectionRefusedError(111, "refused"))


def test_what_is_retried() -> None:
    assert is_retryable(refused())
    assert is_retryable(aiohttp.ServerDisconnectedError())
    assert is_retryable(aiohttp.ConnectionTimeoutError())
    assert is_retryable(aiohttp.ClientOSError(104, "Connection reset by peer"))
    # Sent, then no answer in time: the server may be generating it.
    assert not is_retryable(aiohttp.SocketTimeoutError())
    assert not is_retryable(aiohttp.ServerTimeoutError())
    assert not is_retryable(aiohttp.ClientPayloadError())
    assert not is_retryable(ValueError())


class FailingPost:
    """A ``post`` that never gets an answer: it raises ``error`` and counts its calls."""

    def __init__(self, error: BaseException) -> None:
        self.error = error
        self.calls = 0
        self.called = asyncio.Event()

    async def __call__(self) -> aiohttp.ClientResponse:
        self.calls += 1
        self.called.set()
        raise self.error


async def test_a_connection_failure_is_retried_then_reported() -> None:
    post = FailingPost(refused())
    guard = UpstreamGuard(RetryPolicy(retries=2, backoff=0.001))
    with pytest.raises(UpstreamUnreachableError) as failed:
        await guard.send(post)
    assert post.calls == 3
    # The gateway retried already: the openai SDK is told not to multiply the attempts.
    assert failed.value.headers == {"x-should-retry": "false"}


async def test_a_read_timeout_is_not_retried() -> None:
    post = FailingPost(aiohttp.SocketTimeoutError())
    guard = UpstreamGuard(RetryPolicy(retries=2, backoff=0.001))
    with pytest.raises(UpstreamTimeoutError) as failed:
        await guard.send(post)
    assert post.calls == 1
    assert failed.value.headers is None


async def test_an_open_circuit_fails_fast_without_sending() -> None:
    circuit = CircuitBreaker("vllm", threshold=2, cooldown=30.0, clock=lambda: 5.0)
    post = FailingPost(refused())
    guard = UpstreamGuard(RetryPolicy(retries=1, backoff=0.001), circuit)
    # A request counts once, however many attempts it made: the second one opens the circuit.
    for _ in range(2):
        with pytest.raises(UpstreamUnreachableError):
            await guard.send(post)
    assert post.calls == 4
    assert circuit.state is CircuitState.OPEN
    with pytest.raises(UpstreamUnavailableError) as refused_fast:
        await guard.send(post)
    assert post.calls == 4
    error = refused_fast.value
    assert error.status_code == 503
    assert error.code == "upstream_unavailable"
    assert "'vllm'" in error.message
    assert error.headers is not None and error.headers["retry-after"] == "30"


async def test_a_cancelled_request_is_not_a_failure() -> None:
    circuit = CircuitBreaker("vllm", threshold=1, cooldown=30.0)
    post = FailingPost(asyncio.CancelledError())
    guard = UpstreamGuard(RetryPolicy(retries=2, backoff=0.001), circuit)
    with pytest.raises(asyncio.CancelledError):
        await guard.send(post)
    assert post.calls == 1
    assert circuit.state is CircuitState.CLOSED


async def test_cancelling_during_the_backoff_ends_the_retries() -> None:
    post = FailingPost(aiohttp.ServerDisconnectedError())
    guard = UpstreamGuard(RetryPolicy(retries=2, backoff=60.0, max_wait=60.0))
    task = asyncio.create_task(guard.send(post))
    await post.called.wait()
    task.cancel()  # the guard is waiting out its backoff
    with pytest.raises(asyncio.CancelledError):
        await task
    assert post.calls == 1


def test_the_settings_reach_each_upstreams_guard() -> None:
    single = Settings(
        upstream_retries=4,
        upstream_retry_backoff_seconds=0.25,
        upstream_retry_max_wait_seconds=3,
        upstream_breaker_threshold=7,
        upstream_breaker_cooldown_seconds=9,
    )
    several = Settings(
        upstreams=[
            {"name": "a", "url": "http://127.0.0.1:1"},
            {"name": "b", "url": "http://127.0.0.1:2", "retries": 0, "breaker_threshold": 0},
        ]
    )
    guards = [
        route.upstream.guard
        for settings in (single, several)
        for route in build_upstream(settings).routes
        if isinstance(route.upstream, HttpUpstream)
    ]
    assert [g.policy for g in guards] == [
        RetryPolicy(4, 0.25, 3.0),
        RetryPolicy(2, 0.5, 10.0),
        RetryPolicy(0, 0.5, 10.0),
    ]
    breakers = [g.breaker for g in guards]
    assert [(b.name, b.threshold, b.cooldown) for b in breakers if b is not None] == [
        ("default", 7, 9.0),
        ("a", 5, 30.0),
        ("b", 0, 30.0),
    ]
    with pytest.raises(ValidationError):
        Settings(upstreams=[{"name": "a", "url": "http://127.0.0.1:1", "retries": -1}])
