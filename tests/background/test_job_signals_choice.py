"""Which job signals transport the settings give (``job_signals``, ``redis_url``), and the
settings that cannot work refused with a clear message."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from app.core.job_signals import LocalJobSignals
from app.settings import Settings
from app.store.pg_signals import PostgresJobSignals
from app.store.signals import open_job_signals

PG = "postgresql+asyncpg://postgres@127.0.0.1:5432/test"
SQLITE = "sqlite+aiosqlite:////tmp/x.db"


def chosen(settings: Settings) -> object:
    return open_job_signals(
        settings.job_signals, settings.resolved_database_url(), settings.redis_url
    )


def test_auto_is_redis_then_postgres_then_this_process() -> None:
    from app.store.redis_signals import RedisJobSignals

    assert isinstance(chosen(Settings(redis_url="redis://127.0.0.1:6379/0")), RedisJobSignals)
    assert isinstance(chosen(Settings(database_url=PG)), PostgresJobSignals)
    assert isinstance(chosen(Settings(database_url=SQLITE)), LocalJobSignals)
    assert chosen(Settings(database_url=PG, job_signals="none")) is None
    explicit = Settings(database_url=PG, job_signals="postgres", redis_url="redis://x:6379")
    assert isinstance(chosen(explicit), PostgresJobSignals)


@pytest.mark.parametrize(
    ("values", "message"),
    [
        ({"job_signals": "redis"}, "job_signals 'redis' needs redis_url"),
        ({"job_signals": "postgres", "database_url": SQLITE}, "needs a PostgreSQL database_url"),
        ({"job_signals": "kafka"}, "job_signals"),
    ],
)
def test_settings_that_cannot_work_are_refused(values: dict[str, str], message: str) -> None:
    with pytest.raises(ValidationError, match=message):
        Settings(**values)  # type: ignore[arg-type]


def test_the_listening_connection_gets_the_store_url_without_sqlalchemy_options() -> None:
    from app.store.pg_signals import asyncpg_dsn

    url = "postgresql+asyncpg://u:secret@db:5433/gw?prepared_statement_cache_size=0&sslmode=require"
    assert asyncpg_dsn(url) == "postgresql://u:secret@db:5433/gw?sslmode=require"
