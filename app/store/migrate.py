"""Schema migrations: ``respgate migrate``, and the check ``respgate serve`` runs before starting.

Alembic is configured here, in code (no alembic.ini needed at run time): ``script_location`` is
the directory of the installed ``migrations`` package, so this works from a wheel or a Docker
image as well as from a checkout. Each operation opens its own short-lived engine and hands its
connection to ``migrations/env.py`` (``config.attributes["connection"]``), so the migrations run
inside the caller's event loop and inside one transaction:

- PostgreSQL has transactional DDL, and a transaction-scoped advisory lock serializes concurrent
  ``respgate migrate`` runs (replicas starting together);
- SQLite gets the same through ``BEGIN IMMEDIATE`` (pysqlite's implicit transactions would
  commit each ``CREATE TABLE`` on its own), so a failed migration leaves nothing half-done and a
  second process waits for the first instead of colliding with it.

The embedded SQLite database is migrated automatically at startup; a PostgreSQL database never
is: an out-of-date schema there is an error telling the operator to run ``respgate migrate``.
On PostgreSQL every upgrade ends, in the same transaction, by switching ``chunks.embedding`` to
pgvector's type where the server has the extension (``app.store.pgvector``): a database
migrated without pgvector switches when pgvector is installed and ``respgate migrate`` runs
again.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from alembic.util import CommandError
from sqlalchemy import event
from sqlalchemy.engine import Connection, make_url
from sqlalchemy.exc import DBAPIError, SQLAlchemyError
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine, create_async_engine
from sqlalchemy.pool import NullPool

from app.store.pgvector import use_pgvector_for_embeddings
from migrations import SCRIPT_LOCATION

logger = logging.getLogger(__name__)

# Any constant works; it only has to be the same for every respgate process.
_PG_MIGRATION_LOCK = 0x7265_7370_6761_7465  # "respgate"


class DatabaseError(RuntimeError):
    """The store's database cannot be used as it is; the message says what to do."""


class DatabaseUnavailableError(DatabaseError):
    """The database could not be reached or opened."""


class SchemaOutOfDateError(DatabaseError):
    """The database schema is not at the revision this respgate needs."""


def alembic_config() -> Config:
    """Alembic's configuration for the installed ``migrations`` package (no ini file)."""
    config = Config()
    # ConfigParser interpolation: a literal "%" in the path must be doubled.
    config.set_main_option("script_location", str(SCRIPT_LOCATION).replace("%", "%%"))
    config.set_main_option("file_template", "%%(rev)s_%%(slug)s")
    return config


def head_revisions() -> tuple[str, ...]:
    """The revision(s) a current schema is at."""
    return tuple(ScriptDirectory.from_config(alembic_config()).get_heads())


def display_url(url: str) -> str:
    """``url`` with its password masked, for messages and logs."""
    return make_url(url).render_as_string(hide_password=True)


def is_sqlite(url: str) -> bool:
    return make_url(url).get_backend_name() == "sqlite"


def sqlite_path(url: str) -> Path | None:
    """The file of a SQLite URL; None for in-memory databases and other backends."""
    parsed = make_url(url)
    if parsed.get_backend_name() != "sqlite":
        return None
    database = parsed.database or ""
    if database in ("", ":memory:") or database.startswith("file:"):
        return None
    return Path(database)


def ensure_sqlite_directory(url: str) -> None:
    """Create the directory of a SQLite database file (the data dir) if it is missing."""
    path = sqlite_path(url)
    if path is None:
        return
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise DatabaseUnavailableError(
            f"cannot create the directory of the SQLite database {path}: {exc}"
        ) from exc


def create_migration_engine(url: str, *, write: bool = True) -> AsyncEngine:
    """A pool-less engine whose ``begin()`` is a real transaction on SQLite as well.

    On SQLite a ``write`` transaction takes the database's write lock up front (``BEGIN
    IMMEDIATE``): a second migrating process waits for the first rather than colliding with it.
    """
    engine = create_async_engine(url, poolclass=NullPool)
    begin = "BEGIN IMMEDIATE" if write else "BEGIN"
    if is_sqlite(url):

        @event.listens_for(engine.sync_engine, "connect")
        def _no_implicit_transactions(dbapi_connection: Any, _record: Any) -> None:
            dbapi_connection.isolation_level = None

        @event.listens_for(engine.sync_engine, "begin")
        def _begin(connection: Connection) -> None:
            connection.exec_driver_sql(begin)

    return engine


@contextlib.asynccontextmanager
async def _transaction(
    url: str, action: str, *, write: bool = True
) -> AsyncIterator[AsyncConnection]:
    """One connection in one transaction; failures become a DatabaseError naming ``url``."""
    engine = create_migration_engine(url, write=write)
    try:
        async with engine.begin() as connection:
            yield connection
    except DatabaseError:
        raise
    except CommandError as exc:
        raise DatabaseError(f"{action} {display_url(url)} failed: {exc}") from exc
    except (SQLAlchemyError, OSError) as exc:
        raise DatabaseUnavailableError(
            f"{action} {display_url(url)} failed: {_describe(exc)}"
        ) from exc
    finally:
        await engine.dispose()


def _describe(exc: BaseException) -> str:
    """The driver's own words when there are some (without SQLAlchemy's background link)."""
    if isinstance(exc, DBAPIError) and exc.orig is not None:
        return str(exc.orig).strip() or type(exc.orig).__name__
    return f"{type(exc).__name__}: {exc}"


def _current(connection: Connection) -> tuple[str, ...]:
    context = MigrationContext.configure(connection, opts={"transactional_ddl": True})
    return tuple(context.get_current_heads())


def _run_command(connection: Connection, operation: Callable[[Config], None]) -> tuple[str, ...]:
    if connection.dialect.name == "postgresql":
        connection.exec_driver_sql(f"SELECT pg_advisory_xact_lock({_PG_MIGRATION_LOCK})")
    config = alembic_config()
    config.attributes["connection"] = connection
    operation(config)
    return _current(connection)


def _revision_text(revisions: tuple[str, ...]) -> str:
    return ", ".join(revisions) if revisions else "none"


async def upgrade_to_head(url: str) -> str:
    """Upgrade the schema at ``url`` to the newest revision; returns that revision."""
    ensure_sqlite_directory(url)
    async with _transaction(url, "migrating") as connection:
        before = await connection.run_sync(_current)
        after = await connection.run_sync(_run_command, lambda c: command.upgrade(c, "heads"))
        if connection.dialect.name == "postgresql":
            await connection.run_sync(use_pgvector_for_embeddings)
    if before != after:
        logger.info(
            "database %s migrated from %s to %s",
            display_url(url),
            _revision_text(before),
            _revision_text(after),
        )
    return _revision_text(after)


async def downgrade_to(url: str, revision: str = "base") -> str:
    """Downgrade the schema at ``url`` to ``revision`` ("base": no tables left)."""
    async with _transaction(url, "downgrading") as connection:
        after = await connection.run_sync(_run_command, lambda c: command.downgrade(c, revision))
    return _revision_text(after)


async def current_revisions(url: str) -> tuple[str, ...]:
    """The revision(s) recorded in the database; () for an empty (never migrated) database."""
    path = sqlite_path(url)
    if path is not None and not path.exists():
        return ()  # do not create the file just to look at it
    async with _transaction(url, "reading the schema revision of", write=False) as connection:
        return await connection.run_sync(_current)


async def schema_is_current(url: str) -> bool:
    """Whether the database's ``alembic_version`` is exactly the scripts' head(s)."""
    return set(await current_revisions(url)) == set(head_revisions())


async def prepare_database(url: str, *, auto_migrate: bool) -> str:
    """Make sure the store at ``url`` can be used; returns its schema revision.

    SQLite (the embedded default) is migrated when ``auto_migrate`` is true, after creating its
    directory. PostgreSQL is never migrated here: when its schema is not at head this raises
    SchemaOutOfDateError telling the operator to run ``respgate migrate``.
    """
    current = await current_revisions(url)
    heads = head_revisions()
    if set(current) == set(heads):
        return _revision_text(current)
    if auto_migrate and is_sqlite(url):
        return await upgrade_to_head(url)
    raise SchemaOutOfDateError(_out_of_date_message(url, current, heads))


def _out_of_date_message(url: str, current: tuple[str, ...], heads: tuple[str, ...]) -> str:
    scripts = ScriptDirectory.from_config(alembic_config())
    known = {script.revision for script in scripts.walk_revisions()}
    where = f"the database schema at {display_url(url)}"
    if any(revision not in known for revision in current):
        return (
            f"{where} is at revision {_revision_text(current)}, which this respgate does not "
            f"know (it needs {_revision_text(heads)}): was it migrated by a newer respgate?"
        )
    return (
        f"{where} is not up to date (database revision: {_revision_text(current)}, "
        f"required: {_revision_text(heads)}). Run `respgate migrate` with the same "
        "configuration (--config, --database-url or RESPGATE_DATABASE_URL) first; "
        "`respgate serve` migrates only the embedded SQLite database by itself."
    )


def upgrade_to_head_sync(url: str) -> str:
    """``upgrade_to_head`` for synchronous callers (the CLI)."""
    return asyncio.run(upgrade_to_head(url))


def prepare_database_sync(url: str, *, auto_migrate: bool) -> str:
    """``prepare_database`` for synchronous callers (the CLI)."""
    return asyncio.run(prepare_database(url, auto_migrate=auto_migrate))
