"""The PostgreSQL server the tests use, and throwaway databases on it.

``RESPGATE_TEST_POSTGRES_URL`` (default ``postgresql+asyncpg://postgres@127.0.0.1:5432/test``):
a role that may create databases and schemas. Without a usable server the tests that need one
skip with one reason naming it (under ``CI`` every skip is a failure, see tests/conftest.py).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import uuid
from collections.abc import Callable, Coroutine, Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any, NoReturn, TypeVar

import pytest
from sqlalchemy import text
from sqlalchemy.engine import make_url
from sqlalchemy.ext.asyncio import create_async_engine
from sqlalchemy.pool import NullPool

POSTGRES_URL = os.environ.get(
    "RESPGATE_TEST_POSTGRES_URL", "postgresql+asyncpg://postgres@127.0.0.1:5432/test"
)

T = TypeVar("T")


def skip_unusable(exc: BaseException) -> NoReturn:
    """Skip the calling test: the server at ``POSTGRES_URL`` did not let it in."""
    shown = make_url(POSTGRES_URL).render_as_string(hide_password=True)
    pytest.skip(
        f"PostgreSQL at {shown} is not usable (RESPGATE_TEST_POSTGRES_URL): "
        f"{type(exc).__name__}: {exc}"
    )


def run_in_thread(job: Callable[[], Coroutine[Any, Any, T]]) -> T:
    """Run a coroutine function on an event loop of its own, in a thread: callers may be
    inside the test's running loop."""
    with ThreadPoolExecutor(1) as pool:
        return pool.submit(lambda: asyncio.run(asyncio.wait_for(job(), 30))).result()


def admin_execute(statement: str, url: str = POSTGRES_URL) -> None:
    """One statement, autocommitted, on an engine of its own (``CREATE DATABASE`` cannot run
    in a transaction)."""

    async def execute() -> None:
        engine = create_async_engine(url, poolclass=NullPool, isolation_level="AUTOCOMMIT")
        try:
            async with engine.connect() as connection:
                await connection.execute(text(statement))
        finally:
            await engine.dispose()

    run_in_thread(execute)


@contextlib.contextmanager
def throwaway_database(prefix: str) -> Iterator[str]:
    """A new, empty database on the test server (its URL), dropped afterwards; skips the
    calling test when the server is not usable."""
    name = f"{prefix}_{uuid.uuid4().hex[:12]}"
    try:
        admin_execute(f'CREATE DATABASE "{name}"')
    except Exception as exc:
        skip_unusable(exc)
    try:
        yield make_url(POSTGRES_URL).set(database=name).render_as_string(hide_password=False)
    finally:
        admin_execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
