"""Alembic environment of the respgate store.

Where the database is, first match wins:

1. ``config.attributes["connection"]``: a connection handed over by ``app.store.migrate``
   (``respgate migrate``, ``respgate serve``); the migrations run on it, in its transaction;
2. ``alembic -x url=postgresql+asyncpg://...``;
3. ``sqlalchemy.url`` set on the Alembic config (programmatically or in an ini file);
4. respgate's Settings: ``RESPGATE_DATABASE_URL`` / ``RESPGATE_DATA_DIR`` from the environment,
   plus the TOML file given with ``alembic -x config=path/to/respgate.toml``; unset, the SQLite
   file respgate.db in the data dir.

The schema is ``app.store.tables.metadata`` (``target_metadata``, for ``--autogenerate``).
"""

from __future__ import annotations

import asyncio
from logging.config import fileConfig
from pathlib import Path
from typing import Any

from alembic import context
from sqlalchemy.engine import Connection

from app.settings import load_settings
from app.store.migrate import create_migration_engine, ensure_sqlite_directory
from app.store.tables import compare_type, include_name, metadata

config = context.config
target_metadata = metadata

if config.config_file_name is not None and config.attributes.get("configure_logger", True):
    fileConfig(config.config_file_name, disable_existing_loggers=False)


def database_url() -> str:
    arguments = context.get_x_argument(as_dictionary=True)
    if arguments.get("url"):
        return arguments["url"]
    configured = config.get_main_option("sqlalchemy.url")
    if configured:
        return configured
    config_file = arguments.get("config")
    settings = load_settings(Path(config_file) if config_file else None)
    return settings.resolved_database_url()


def configure(**options: Any) -> None:
    context.configure(
        target_metadata=target_metadata,
        compare_type=compare_type,
        include_name=include_name,
        **options,
    )


def run_migrations_offline() -> None:
    """``alembic upgrade head --sql``: print the SQL instead of running it."""
    url = database_url()
    configure(
        url=url,
        literal_binds=True,
        dialect_opts={"paramstyle": "named"},
        render_as_batch=url.startswith("sqlite"),
    )
    with context.begin_transaction():
        context.run_migrations()


def run_migrations_on(connection: Connection) -> None:
    # Always inside one transaction (see create_migration_engine), SQLite included.
    configure(
        connection=connection,
        transactional_ddl=True,
        render_as_batch=connection.dialect.name == "sqlite",
    )
    with context.begin_transaction():
        context.run_migrations()


async def run_migrations_async(url: str) -> None:
    ensure_sqlite_directory(url)
    engine = create_migration_engine(url)
    try:
        async with engine.begin() as connection:
            await connection.run_sync(run_migrations_on)
    finally:
        await engine.dispose()


def run_migrations_online() -> None:
    connection = config.attributes.get("connection")
    if connection is not None:
        run_migrations_on(connection)
    else:
        asyncio.run(run_migrations_async(database_url()))


if context.is_offline_mode():
    run_migrations_offline()
else:
    run_migrations_online()
