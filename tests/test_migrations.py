"""Alembic migrations build exactly ``app.store.tables`` on SQLite and on a real PostgreSQL.

PostgreSQL: ``RESPGATE_TEST_POSTGRES_URL`` (default the machine's ``test`` database as user
``postgres``) is only used to create and drop a throwaway database per test. When the server
does not answer, the PostgreSQL cases are skipped, unless ``CI`` is set: then they fail.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest
from alembic import command
from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext
from sqlalchemy import inspect, text
from sqlalchemy.engine import Connection, make_url
from sqlalchemy.ext.asyncio import create_async_engine
from sqlalchemy.pool import NullPool

from app.files.ports import IndexedChunk
from app.settings import Settings, load_settings
from app.store import tables
from app.store.engine import create_engine_for
from app.store.migrate import (
    DatabaseError,
    DatabaseUnavailableError,
    SchemaOutOfDateError,
    alembic_config,
    create_migration_engine,
    current_revisions,
    downgrade_to,
    ensure_sqlite_directory,
    head_revisions,
    prepare_database,
    schema_is_current,
    upgrade_to_head,
)
from app.store.pgvector import read_pgvector_state
from app.store.sql import SqlResponseStore
from app.store.vector_index.choice import open_vector_index
from app.store.vector_index.pg_array import PgArrayIndex
from app.store.vector_index.pg_vector import PgVectorIndex
from tests.helpers import free_port
from tests.postgres import throwaway_database

ROOT = Path(__file__).resolve().parent.parent
TABLES = set(tables.metadata.tables)
HEAD = "0008"
SUBPROCESS_TIMEOUT = 60


@pytest.fixture
def postgres_url() -> Iterator[str]:
    with throwaway_database("respgate_migr") as url:
        yield url


@pytest.fixture(params=["sqlite", "postgresql"])
async def database_url(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[str]:
    if request.param == "sqlite":
        yield f"sqlite+aiosqlite:///{tmp_path / 'data' / 'respgate.db'}"
    else:
        with throwaway_database("respgate_migr") as url:
            yield url


async def _inspect(url: str, function: Any) -> Any:
    engine = create_async_engine(url, poolclass=NullPool)
    try:
        async with engine.connect() as connection:
            return await connection.run_sync(function)
    finally:
        await engine.dispose()


def _table_names(connection: Connection) -> set[str]:
    """The tables, less those the metadata does not describe (SQLite's FTS5 index)."""
    names = inspect(connection).get_table_names()
    return {name for name in names if tables.include_name(name, "table", {})}


def _schema_diff(connection: Connection) -> list[Any]:
    context = MigrationContext.configure(
        connection, opts={"compare_type": tables.compare_type, "include_name": tables.include_name}
    )
    return list(compare_metadata(context, tables.metadata))


def _foreign_keys(connection: Connection) -> list[Any]:
    return list(inspect(connection).get_foreign_keys("conversation_items"))


def _run_cli(*args: str, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "app.cli", *args],
        cwd=ROOT,
        env={**os.environ, **env},
        capture_output=True,
        text=True,
        timeout=SUBPROCESS_TIMEOUT,
    )


# --- migrations ---------------------------------------------------------------------------------


async def test_upgrade_builds_exactly_the_schema_of_tables(database_url: str) -> None:
    assert head_revisions() == (HEAD,)
    assert not await schema_is_current(database_url)

    assert await upgrade_to_head(database_url) == HEAD

    assert await schema_is_current(database_url)
    assert await current_revisions(database_url) == (HEAD,)
    assert await _inspect(database_url, _table_names) == TABLES | {"alembic_version"}
    assert await _inspect(database_url, _schema_diff) == []
    [foreign_key] = await _inspect(database_url, _foreign_keys)
    assert foreign_key["referred_table"] == "conversations"
    assert foreign_key["options"].get("ondelete") == "CASCADE"
    if database_url.startswith("postgresql"):
        # pgvector's column where the server has pgvector; else real[], and no extension
        state = await _inspect(database_url, read_pgvector_state)
        assert state.column == ("vector" if state.available else "_float4")
        assert (state.schema is not None) == state.available
    # a second upgrade is a no-op
    assert await upgrade_to_head(database_url) == HEAD
    assert await _inspect(database_url, _schema_diff) == []


async def test_downgrade_to_base_and_upgrade_again(database_url: str) -> None:
    await upgrade_to_head(database_url)

    assert await downgrade_to(database_url, "base") == "none"

    assert await _inspect(database_url, _table_names) == {"alembic_version"}
    assert await current_revisions(database_url) == ()
    assert not await schema_is_current(database_url)
    assert await upgrade_to_head(database_url) == HEAD
    assert await _inspect(database_url, _schema_diff) == []


async def test_concurrent_upgrades_are_serialized(database_url: str) -> None:
    # e.g. several replicas running `respgate migrate` at once
    results = await asyncio.gather(*(upgrade_to_head(database_url) for _ in range(3)))

    assert results == [HEAD] * 3
    assert await _inspect(database_url, _schema_diff) == []


async def test_a_failed_migration_leaves_nothing_half_done(database_url: str) -> None:
    # conversation_items is created last: its clash comes after the other tables were created.
    ddl = "CREATE TABLE conversation_items (x INTEGER)"
    engine = create_async_engine(database_url, poolclass=NullPool)
    if database_url.startswith("sqlite"):
        Path(make_url(database_url).database or "").parent.mkdir(parents=True)
    try:
        async with engine.begin() as connection:
            await connection.execute(text(ddl))
    finally:
        await engine.dispose()

    with pytest.raises(DatabaseError, match="migrating"):
        await upgrade_to_head(database_url)

    assert await _inspect(database_url, _table_names) == {"conversation_items"}


async def test_an_unknown_revision_is_reported(database_url: str) -> None:
    await upgrade_to_head(database_url)
    engine = create_async_engine(database_url, poolclass=NullPool)
    try:
        async with engine.begin() as connection:
            await connection.execute(text("UPDATE alembic_version SET version_num = 'fffe'"))
    finally:
        await engine.dispose()

    assert not await schema_is_current(database_url)
    with pytest.raises(SchemaOutOfDateError, match="newer respgate"):
        await prepare_database(database_url, auto_migrate=False)
    with pytest.raises(DatabaseError, match="fffe"):
        await upgrade_to_head(database_url)


async def test_0002_upgrades_a_0001_database_and_downgrades_to_it(database_url: str) -> None:
    # a database of the previous release, with a conversation in it
    await _upgrade_to(database_url, "0001")
    engine = create_async_engine(database_url, poolclass=NullPool)
    try:
        async with engine.begin() as connection:
            await connection.execute(
                text(
                    "INSERT INTO conversations (id, created_at, metadata, next_position) "
                    "VALUES ('conv_1', 1, '{}', 0)"
                )
            )
    finally:
        await engine.dispose()
    assert await current_revisions(database_url) == ("0001",)

    assert await upgrade_to_head(database_url) == HEAD

    assert await _inspect(database_url, _schema_diff) == []
    assert await _count(database_url, "conversations") == 1
    assert await _count(database_url, "chunks") == 0
    assert await downgrade_to(database_url, "0001") == "0001"
    assert await _inspect(database_url, lambda c: set(inspect(c).get_table_names())) == {
        "alembic_version",
        "items",
        "responses",
        "conversations",
        "conversation_items",
    }  # the FTS5 table (SQLite) went with chunks
    assert await _count(database_url, "conversations") == 1


async def test_0003_upgrades_a_0002_database_and_downgrades_to_it(database_url: str) -> None:
    # a database of the previous release, with a response in it: no root recorded
    await _upgrade_to(database_url, "0002")
    engine = create_async_engine(database_url, poolclass=NullPool)
    try:
        async with engine.begin() as connection:
            await connection.execute(
                text(
                    "INSERT INTO responses (id, created_at, status, model, checkpoint_ids, "
                    "input_item_ids, response) VALUES ('resp_old', 1, 'completed', 'm', '[]', "
                    "'[]', '{\"id\": \"resp_old\"}')"
                )
            )
    finally:
        await engine.dispose()

    assert await upgrade_to_head(database_url) == HEAD

    assert await _inspect(database_url, _schema_diff) == []
    store = SqlResponseStore(create_engine_for(database_url))
    try:
        old = await store.get_response("resp_old")
        assert old is not None and old.root_id == "resp_old"  # NULL: its own root
        await store.save_tool_session("resp_old", {"history": []})
        assert await store.load_tool_session("resp_old") == {"history": []}
    finally:
        await store.aclose()
    assert await downgrade_to(database_url, "0002") == "0002"
    assert "tool_sessions" not in await _inspect(database_url, _table_names)
    columns = await _inspect(
        database_url, lambda c: {column["name"] for column in inspect(c).get_columns("responses")}
    )
    assert "root_id" not in columns
    assert await _count(database_url, "responses") == 1


async def test_migrate_switches_embeddings_to_pgvector_once_installed(postgres_url: str) -> None:
    # The revisions alone leave chunks.embedding a real[], as on a server without pgvector;
    # `respgate migrate` (upgrade_to_head) switches it when pgvector is there, keeping chunks.
    await _upgrade_to(postgres_url, HEAD)
    state = await _inspect(postgres_url, read_pgvector_state)
    assert (state.column, state.schema) == ("_float4", None)
    engine = create_engine_for(postgres_url)
    try:
        chunk = IndexedChunk(position=0, text="red apple", tokens=2, embedding=[0.6, 0.8, 0.0])
        await PgArrayIndex(engine).replace_file_chunks("vs_1", "file_1", [chunk])
        if not state.available:
            pytest.skip("pgvector is not installed on the PostgreSQL server")

        assert await upgrade_to_head(postgres_url) == HEAD

        assert (await _inspect(postgres_url, read_pgvector_state)).uses_pgvector
        assert await _inspect(postgres_url, _schema_diff) == []
        assert isinstance(await open_vector_index(engine), PgVectorIndex)
        hits = await PgVectorIndex(engine).search(
            "vs_1", embedding=[0.6, 0.8, 0.0], query="apple", limit=3, ranker="semantic"
        )
        assert [(hit.text, round(hit.score, 5)) for hit in hits] == [("red apple", 1.0)]
        assert await _embedding_storage(postgres_url) == "m"
        assert await upgrade_to_head(postgres_url) == HEAD  # nothing left to switch
    finally:
        await engine.dispose()


async def _embedding_storage(url: str) -> str:
    engine = create_async_engine(url, poolclass=NullPool)
    try:
        async with engine.connect() as connection:
            return str(
                await connection.scalar(
                    text(
                        "SELECT attstorage::text FROM pg_attribute "
                        "WHERE attrelid = 'chunks'::regclass AND attname = 'embedding'"
                    )
                )
            )
    finally:
        await engine.dispose()


async def _upgrade_to(url: str, revision: str) -> None:
    ensure_sqlite_directory(url)

    def run(connection: Connection) -> None:
        config = alembic_config()
        config.attributes["connection"] = connection
        command.upgrade(config, revision)

    engine = create_migration_engine(url)
    try:
        async with engine.begin() as connection:
            await connection.run_sync(run)
    finally:
        await engine.dispose()


async def _count(url: str, table: str) -> int:
    engine = create_async_engine(url, poolclass=NullPool)
    try:
        async with engine.connect() as connection:
            return int(
                (await connection.execute(text(f"SELECT count(*) FROM {table}"))).scalar_one()
            )
    finally:
        await engine.dispose()


# --- prepare_database: what `respgate serve` does ---------------------------------------------


async def test_prepare_database_creates_and_migrates_embedded_sqlite(tmp_path: Path) -> None:
    data_dir = tmp_path / "not" / "yet"
    url = load_settings(data_dir=data_dir).resolved_database_url()

    assert await prepare_database(url, auto_migrate=True) == HEAD

    assert (data_dir / "respgate.db").is_file()
    assert await schema_is_current(url)
    assert await prepare_database(url, auto_migrate=True) == HEAD


async def test_prepare_database_without_auto_migrate_checks_sqlite_too(tmp_path: Path) -> None:
    url = f"sqlite+aiosqlite:///{tmp_path / 'respgate.db'}"

    with pytest.raises(SchemaOutOfDateError, match="respgate migrate"):
        await prepare_database(url, auto_migrate=False)
    assert not (tmp_path / "respgate.db").exists()  # looking does not create the file


async def test_prepare_database_never_migrates_postgres(postgres_url: str) -> None:
    with pytest.raises(SchemaOutOfDateError) as raised:
        await prepare_database(postgres_url, auto_migrate=True)

    message = str(raised.value)
    assert "respgate migrate" in message
    assert f"database revision: none, required: {HEAD}" in message
    assert await _inspect(postgres_url, _table_names) == set()
    await upgrade_to_head(postgres_url)
    assert await prepare_database(postgres_url, auto_migrate=True) == HEAD


async def test_an_unreachable_database_is_a_clear_error() -> None:
    url = f"postgresql+asyncpg://user:s3cret@127.0.0.1:{free_port()}/nowhere"

    with pytest.raises(DatabaseUnavailableError) as raised:
        await prepare_database(url, auto_migrate=True)

    assert "127.0.0.1" in str(raised.value)
    assert "s3cret" not in str(raised.value)


# --- settings -----------------------------------------------------------------------------------


def test_database_url_defaults_to_sqlite_in_the_data_dir(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("RESPGATE_DATABASE_URL", raising=False)
    monkeypatch.delenv("RESPGATE_DATA_DIR", raising=False)
    assert Settings().database_url is None
    monkeypatch.chdir(tmp_path)
    expected = f"sqlite+aiosqlite:///{tmp_path / 'data' / 'respgate.db'}"
    assert Settings().resolved_database_url() == expected
    assert Settings(database_url="").resolved_database_url() == expected
    other = tmp_path / "elsewhere"
    assert Settings(data_dir=other).resolved_database_url().endswith(f"{other}/respgate.db")


def test_database_url_from_environment_gets_an_async_driver(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("RESPGATE_DATABASE_URL", "postgresql://u:p@db:5432/respgate")
    assert load_settings().resolved_database_url() == "postgresql+asyncpg://u:p@db:5432/respgate"
    assert (
        load_settings(database_url="postgres://db/x").resolved_database_url()
        == "postgresql+asyncpg://db/x"
    )
    assert (
        load_settings(database_url="sqlite:////tmp/x.db").resolved_database_url()
        == "sqlite+aiosqlite:////tmp/x.db"
    )
    explicit = "postgresql+psycopg://db/x"
    assert load_settings(database_url=explicit).resolved_database_url() == explicit


# --- the CLI ------------------------------------------------------------------------------------


def test_cli_migrate_upgrades_to_head(database_url: str) -> None:
    result = _run_cli("migrate", "--database-url", database_url)

    assert result.returncode == 0, result.stderr
    assert f"revision {HEAD} (head)" in result.stdout
    assert "Running upgrade  -> 0001" in result.stderr
    assert "Running upgrade 0001 -> 0002" in result.stderr
    assert "Running upgrade 0002 -> 0003" in result.stderr
    again = _run_cli("migrate", "--database-url", database_url)
    assert again.returncode == 0, again.stderr
    assert f"revision {HEAD} (head)" in again.stdout


def test_cli_migrate_uses_the_configured_data_dir(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("RESPGATE_DATA_DIR", raising=False)
    config = tmp_path / "respgate.toml"
    config.write_text(f"data_dir = {str(tmp_path / 'from-toml')!r}\n")

    result = _run_cli("migrate", "--config", str(config), RESPGATE_DATABASE_URL="")

    assert result.returncode == 0, result.stderr
    assert (tmp_path / "from-toml" / "respgate.db").is_file()
    flagged = _run_cli("migrate", "--data-dir", str(tmp_path / "flag"), RESPGATE_DATABASE_URL="")
    assert flagged.returncode == 0, flagged.stderr
    assert (tmp_path / "flag" / "respgate.db").is_file()


def test_cli_migrate_reports_an_unreachable_database() -> None:
    url = f"postgresql+asyncpg://user:s3cret@127.0.0.1:{free_port()}/nowhere"

    result = _run_cli("migrate", "--database-url", url)

    assert result.returncode == 1
    assert "respgate: migrating postgresql+asyncpg://user:***@127.0.0.1" in result.stderr
    assert "s3cret" not in result.stderr + result.stdout


def test_serve_refuses_an_out_of_date_postgres(postgres_url: str) -> None:
    result = _run_cli(
        "serve",
        "--database-url",
        postgres_url,
        "--host",
        "127.0.0.1",
        "--port",
        str(free_port()),
        "--upstream-url",
        f"http://127.0.0.1:{free_port()}",
    )

    assert result.returncode == 2
    assert "is not up to date" in result.stderr
    assert "Run `respgate migrate`" in result.stderr


async def test_serve_migrates_embedded_sqlite_before_starting(tmp_path: Path) -> None:
    # No upstream ever answers: serve gives up after the database step, having migrated it.
    result = _run_cli(
        "serve",
        "--data-dir",
        str(tmp_path / "data"),
        "--host",
        "127.0.0.1",
        "--port",
        str(free_port()),
        "--upstream-url",
        f"http://127.0.0.1:{free_port()}",
        "--wait-for-upstream",
        "0.2",
        RESPGATE_DATABASE_URL="",
    )

    assert result.returncode != 0
    assert "not ready" in result.stdout + result.stderr
    url = f"sqlite+aiosqlite:///{tmp_path / 'data' / 'respgate.db'}"
    assert await schema_is_current(url)


def test_alembic_command_line_for_developers(tmp_path: Path) -> None:
    url = f"sqlite+aiosqlite:///{tmp_path / 'dev' / 'respgate.db'}"

    def alembic(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "alembic", "-x", f"url={url}", *args],
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=SUBPROCESS_TIMEOUT,
        )

    upgraded = alembic("upgrade", "head")
    assert upgraded.returncode == 0, upgraded.stderr
    checked = alembic("check")  # autogenerate finds nothing to add: migrations == tables.py
    assert checked.returncode == 0, checked.stderr + checked.stdout
    assert "No new upgrade operations detected" in checked.stdout + checked.stderr
    offline = alembic("upgrade", "head", "--sql")
    assert offline.returncode == 0, offline.stderr
    assert "CREATE TABLE conversation_items" in offline.stdout
    assert "CREATE VIRTUAL TABLE chunks_fts USING fts5" in offline.stdout
