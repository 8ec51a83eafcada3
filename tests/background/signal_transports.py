"""The job signal transports of the tests: in-process, PostgreSQL (``tests.postgres``) and
Redis (``RESPGATE_TEST_REDIS_URL``, default ``redis://127.0.0.1:6379/0``). A transport that is
not usable skips the calling test with a reason naming it."""

from __future__ import annotations

import os

import pytest

REDIS_URL = os.environ.get("RESPGATE_TEST_REDIS_URL", "redis://127.0.0.1:6379/0")


async def require_redis() -> None:
    """Skip the calling test unless Redis answers at ``REDIS_URL`` (and redis-py is there)."""
    try:
        import redis.asyncio as redis
    except ImportError as exc:
        pytest.skip(f"redis-py is not installed (pip install 'respgate[redis]'): {exc}")
    client = redis.Redis.from_url(REDIS_URL, socket_connect_timeout=2)
    try:
        await client.ping()
    except Exception as exc:
        pytest.skip(f"Redis at {REDIS_URL} is not usable (RESPGATE_TEST_REDIS_URL): {exc}")
    finally:
        await client.aclose()


def require_redis_sync() -> None:
    """``require_redis`` for a synchronous test."""
    from tests.postgres import run_in_thread

    run_in_thread(require_redis)
