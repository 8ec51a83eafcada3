"""Engines: SQLite pragmas and transaction control, JSON through orjson, URLs."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest
from sqlalchemy import inspect, text

from app.core.tenancy import DEFAULT_TENANT
from app.store.engine import (
    SQLITE_BEGIN,
    create_engine_for,
    create_schema,
    default_database_url,
    json_dumps,
    json_loads,
)
from app.store.sql import SqlResponseStore
from app.store.tables import metadata
from tests.store.builders import turn
from tests.store.conftest import Backend, Postgres


def test_default_database_url(tmp_path: Path) -> None:
    url = default_database_url(tmp_path / "data")
    assert url == f"sqlite+aiosqlite:///{(tmp_path / 'data' / 'respgate.db').resolve()}"


def test_unsupported_url() -> None:
    with pytest.raises(ValueError, match="unsupported"):
        create_engine_for("mysql+aiomysql://u:secret@localhost/db")


async def test_sqlite_creates_the_directory_and_sets_pragmas(tmp_path: Path) -> None:
    engine = create_engine_for(default_database_url(tmp_path / "deep" / "er"))
    try:
        async with engine.connect() as conn:
            pragmas = {
                name: (await conn.exec_driver_sql(f"PRAGMA {name}")).scalar()
                for name in ("journal_mode", "synchronous", "foreign_keys", "busy_timeout")
            }
    finally:
        await engine.dispose()
    assert (tmp_path / "deep" / "er" / "respgate.db").is_file()
    assert pragmas == {
        "journal_mode": "wal",
        "synchronous": 1,  # NORMAL
        "foreign_keys": 1,
        "busy_timeout": 10_000,
    }


async def test_sqlite_writers_take_the_write_lock_at_begin(tmp_path: Path) -> None:
    url = default_database_url(tmp_path)
    engine = create_engine_for(url)
    await create_schema(engine)
    other = sqlite3.connect(tmp_path / "respgate.db", timeout=0, isolation_level=None)
    try:
        writer = engine.execution_options(**{SQLITE_BEGIN: "BEGIN IMMEDIATE"})
        async with writer.begin() as conn:
            await conn.execute(text("SELECT 1"))  # a read only: the lock is already held
            with pytest.raises(sqlite3.OperationalError, match="locked"):
                other.execute("BEGIN IMMEDIATE")
        other.execute("BEGIN IMMEDIATE")  # released at commit
        other.execute("ROLLBACK")
        # A deferred transaction (the default) takes no write lock for a read.
        async with engine.begin() as conn:
            await conn.execute(text("SELECT 1"))
            other.execute("BEGIN IMMEDIATE")
            other.execute("ROLLBACK")
    finally:
        other.close()
        await engine.dispose()


async def test_sqlite_reads_without_transaction(tmp_path: Path) -> None:
    engine = create_engine_for(default_database_url(tmp_path))
    try:
        reader = engine.execution_options(**{SQLITE_BEGIN: None})
        async with reader.connect() as conn:
            await conn.execute(text("SELECT 1"))
            raw = await conn.get_raw_connection()
            assert raw.driver_connection is not None
            assert raw.driver_connection.in_transaction is False
    finally:
        await engine.dispose()


async def test_create_schema_creates_every_table(backend: Backend) -> None:
    engine = backend.make_engine()
    try:
        async with engine.connect() as conn:
            names = await conn.run_sync(lambda sync: set(inspect(sync).get_table_names()))
    finally:
        await engine.dispose()
    assert set(metadata.tables) <= names


async def test_json_is_stored_compact_in_written_order(
    backend: Backend, store: SqlResponseStore
) -> None:
    new = turn("x")
    await store.save_response(new, tenant=DEFAULT_TENANT)
    engine = backend.make_engine()
    try:
        async with engine.connect() as conn:
            stored = (
                await conn.execute(
                    text("SELECT CAST(response AS TEXT) FROM responses WHERE id = :id"),
                    {"id": new.response["id"]},
                )
            ).scalar_one()
    finally:
        await engine.dispose()
    assert stored == json_dumps(new.response)
    assert list(json_loads(stored)) == list(new.response)


def test_json_dumps_falls_back_for_what_orjson_refuses() -> None:
    big = {"n": 2**70, "s": "é"}
    assert json_loads(json_dumps(big)) == big


async def test_postgres_pool_is_sized_for_a_gateway(postgres: Postgres) -> None:
    engine = create_engine_for(postgres.url)
    try:
        assert engine.pool.size() >= 10  # type: ignore[attr-defined]
    finally:
        await engine.dispose()


async def test_aclose_disposes_the_engine(backend: Backend) -> None:
    store = backend.new_store()
    await store.save_response(turn("x"), tenant=DEFAULT_TENANT)
    await store.aclose()
    assert store.db.engine.pool.checkedout() == 0  # type: ignore[attr-defined]


async def test_sqlite_in_memory(tmp_path: Path) -> None:
    store = SqlResponseStore(create_engine_for("sqlite+aiosqlite://"))
    try:
        await create_schema(store.db.engine)
        new = turn("x")
        await store.save_response(new, tenant=DEFAULT_TENANT)
        assert (
            await store.load_items(new.input_item_ids, tenant=DEFAULT_TENANT) == new.new_items[:1]
        )
    finally:
        await store.aclose()
