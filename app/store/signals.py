"""``open_job_signals``: the job signals transport (``app.core.job_signals``) a gateway's
settings ask for: Redis pub/sub, PostgreSQL ``LISTEN/NOTIFY`` on the store's database, this
process only, or none."""

from __future__ import annotations

from typing import Literal

from app.core.job_signals import JobSignals, LocalJobSignals
from app.store.pg_signals import PostgresJobSignals

JobSignalsChoice = Literal["auto", "postgres", "redis", "none"]


def open_job_signals(
    choice: JobSignalsChoice, database_url: str, redis_url: str | None
) -> JobSignals | None:
    """``auto``: Redis when ``redis_url`` is set, else PostgreSQL when the store is, else this
    process only. The caller closes what it gets (``aclose``); it connects on first use."""
    if choice == "none":
        return None
    if choice == "redis" or (choice == "auto" and redis_url):
        if not redis_url:
            raise ValueError("job_signals 'redis' needs redis_url")
        try:
            from app.store.redis_signals import RedisJobSignals
        except ImportError as exc:
            raise RuntimeError(
                "redis_url is set but the redis package is not installed: "
                "pip install 'respgate[redis]'"
            ) from exc
        return RedisJobSignals(redis_url)
    if choice == "postgres" or database_url.startswith("postgresql"):
        return PostgresJobSignals(database_url)
    return LocalJobSignals()
