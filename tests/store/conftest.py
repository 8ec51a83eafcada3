"""The same store tests on SQLite (a file under tmp_path) and on a real PostgreSQL server;
the contract tests (``any_backend``, ``response_store``) also on the tests' in-memory store.

PostgreSQL: ``RESPGATE_TEST_POSTGRES_URL`` (default
``postgresql+asyncpg://postgres@127.0.0.1:5432/test``). The session creates a scratch schema
(``respgate_test_<random>``), every engine of the tests works in it (``search_path``), each
test starts from empty tables, and the schema is dropped at the end. When the server does not
answer, the PostgreSQL cases are skipped, unless ``CI`` is set: then they fail. The schema is
built by ``create_schema``: ``chunks.embedding`` is pgvector's type where the server has
pgvector, ``real[]`` elsewhere (nothing here depends on which).
"""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import event, text
from sqlalchemy.ext.asyncio import AsyncEngine

from app.core.ports import ResponseStore
from app.store.engine import create_engine_for, create_schema
from app.store.sql import SqlResponseStore
from app.store.tables import metadata
from tests.fakes import MemoryResponseStore
from tests.postgres import POSTGRES_URL, admin_execute, skip_unusable


@dataclass
class Postgres:
    url: str
    schema: str


@contextlib.contextmanager
def scratch_schema(prefix: str = "respgate_test") -> Iterator[Postgres]:
    """A new schema on the test server, dropped afterwards; skips when the server is not
    usable."""
    schema = f"{prefix}_{uuid.uuid4().hex[:12]}"
    try:
        admin_execute(f"CREATE SCHEMA {schema}")
    except Exception as exc:
        skip_unusable(exc)
    try:
        yield Postgres(POSTGRES_URL, schema)
    finally:
        admin_execute(f"DROP SCHEMA IF EXISTS {schema} CASCADE")


@pytest.fixture(scope="session")
def postgres() -> Iterator[Postgres]:
    with scratch_schema() as pg:
        yield pg


def _in_schema(engine: AsyncEngine, schema: str) -> AsyncEngine:
    @event.listens_for(engine.sync_engine, "connect")
    def _search_path(dbapi_connection: Any, _record: Any) -> None:
        # SQLAlchemy's recipe: outside a transaction, or a later ROLLBACK undoes the SET.
        autocommit = dbapi_connection.autocommit
        dbapi_connection.autocommit = True
        cursor = dbapi_connection.cursor()
        cursor.execute(f"SET SESSION search_path TO {schema}")
        cursor.close()
        dbapi_connection.autocommit = autocommit

    return engine


@dataclass
class Backend:
    """Makes engines on one test database; ``new_store()`` can be called several times
    (several stores on the same database, as several gateway processes would be)."""

    name: str
    make_engine: Callable[[], AsyncEngine]
    stores: list[SqlResponseStore]
    inline_reads: bool = True

    def new_store(self) -> SqlResponseStore:
        store = SqlResponseStore(self.make_engine(), inline_reads=self.inline_reads)
        self.stores.append(store)
        return store


@contextlib.asynccontextmanager
async def sql_backend(
    kind: str, request: pytest.FixtureRequest, tmp_path: Path
) -> AsyncIterator[Backend]:
    """``sqlite``: reads inline (the default); ``sqlite_no_inline``: every read through
    aiosqlite, as when the database is busy or a read is big; ``postgres``."""
    if kind.startswith("sqlite"):
        url = f"sqlite+aiosqlite:///{tmp_path / 'data' / 'respgate.db'}"
        inline = kind == "sqlite"
        backend = Backend("sqlite", lambda: create_engine_for(url), [], inline)
        setup = backend.make_engine()
        await create_schema(setup)
    else:
        pg: Postgres = request.getfixturevalue("postgres")
        backend = Backend("postgres", lambda: _in_schema(create_engine_for(pg.url), pg.schema), [])
        setup = backend.make_engine()
        await create_schema(setup)
        async with setup.begin() as conn:
            names = ", ".join(table.name for table in metadata.sorted_tables)
            await conn.execute(text(f"TRUNCATE {names}"))
    await setup.dispose()
    try:
        yield backend
    finally:
        for store in backend.stores:
            await store.aclose()


SQL_BACKENDS = ["sqlite", "sqlite_no_inline", "postgres"]


@pytest.fixture(params=SQL_BACKENDS)
async def backend(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Backend]:
    """The SQL store's own tests: each on every SQL backend (see ``sql_backend``)."""
    async with sql_backend(request.param, request, tmp_path) as backend:
        yield backend


@pytest.fixture
def store(backend: Backend) -> SqlResponseStore:
    return backend.new_store()


class MemoryBackend:
    """The tests' in-memory ``ResponseStore`` (tests/fakes.py) as a backend: its data lives in
    the one store object, so every ``new_store()`` is that object."""

    name = "memory"

    def __init__(self) -> None:
        self._store = MemoryResponseStore()

    def new_store(self) -> MemoryResponseStore:
        return self._store


@pytest.fixture(params=["memory", *SQL_BACKENDS])
async def any_backend(
    request: pytest.FixtureRequest, tmp_path: Path
) -> AsyncIterator[Backend | MemoryBackend]:
    """The contract tests (test_store_contract_*.py): every ``ResponseStore`` implementation."""
    if request.param == "memory":
        yield MemoryBackend()
        return
    async with sql_backend(request.param, request, tmp_path) as backend:
        yield backend


@pytest.fixture
def response_store(any_backend: Backend | MemoryBackend) -> ResponseStore:
    return any_backend.new_store()
