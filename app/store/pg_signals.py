"""``PostgresJobSignals``: job signals (``app.core.job_signals``) through PostgreSQL's
``LISTEN/NOTIFY`` on the store's database, channel ``respgate_jobs``.

One dedicated asyncpg connection per process (not the store's pool: a listening connection is
held for good; ``application_name`` ``respgate-signals-<random>``) both listens and sends. A
task of its own owns it: it connects, ``LISTEN``s, then sends what ``publish`` queued, every
queued signal in one round trip (``pg_notify`` over an array: a burst of log writes costs one
statement, and PostgreSQL folds repeats sent in one transaction), and checks the connection
every ``keepalive`` seconds when idle. When the connection drops (server restart,
``pg_terminate_backend``, network) it reconnects with a growing back-off (up to
``max_backoff``), listening again before it sends what waited; what was published in between is
sent then, signals others sent in between are lost (the lease and the log poll make up for
them).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import uuid
from typing import Any

import asyncpg
from sqlalchemy.engine import make_url

from app.store.signal_transport import CHANNEL, SignalTransport

logger = logging.getLogger(__name__)

_NOTIFY = "SELECT pg_notify($1, payload) FROM unnest($2::text[]) AS payload"


# Query keys of the store's URL that are SQLAlchemy's options, not the server's (asyncpg would
# send them as server settings).
_SQLALCHEMY_KEYS = ("prepared_statement_cache_size", "async_fallback")


def asyncpg_dsn(database_url: str) -> str:
    """A ``postgresql+asyncpg://`` URL as asyncpg's DSN (``postgresql://``)."""
    url = make_url(database_url).set(drivername="postgresql")
    url = url.difference_update_query(_SQLALCHEMY_KEYS)
    return url.render_as_string(hide_password=False)


class PostgresJobSignals(SignalTransport):
    """Job signals on one PostgreSQL database (see the module docstring)."""

    server_name = "PostgreSQL"

    def __init__(
        self, database_url: str, *, keepalive: float = 30.0, max_backoff: float = 5.0
    ) -> None:
        super().__init__(keepalive=keepalive, max_backoff=max_backoff)
        self._dsn = asyncpg_dsn(database_url)
        # Its connection's application_name (pg_stat_activity).
        self.application_name = f"respgate-signals-{uuid.uuid4().hex[:12]}"
        self._task: asyncio.Task[None] | None = None

    async def aclose(self) -> None:
        self._closed = True
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
        self._receivers.clear()

    # ------------------------------------------------------------------ the connection

    def _ensure_running(self) -> None:
        if self._task is None and not self._closed:
            self._task = asyncio.create_task(self._run(), name="job signals (PostgreSQL)")

    async def _run(self) -> None:
        backoff = 0.1
        while True:
            try:
                connection: Any = await asyncpg.connect(
                    self._dsn, server_settings={"application_name": self.application_name}
                )
            except Exception as exc:
                logger.warning("job signals: cannot connect to PostgreSQL: %s", exc)
                await asyncio.sleep(backoff)
                backoff = min(backoff * 2, self._max_backoff)
                continue
            try:
                await self._serve(connection)
            except Exception as exc:
                logger.warning("job signals: PostgreSQL connection lost (%s): reconnecting", exc)
                backoff = 0.1
            finally:
                self._listening.clear()
                with contextlib.suppress(Exception):
                    await asyncio.shield(connection.close(timeout=2))

    async def _serve(self, connection: Any) -> None:
        lost = asyncio.Event()
        connection.add_termination_listener(lambda _: lost.set())
        await connection.add_listener(CHANNEL, self._notified)
        self.connections += 1
        self._listening.set()
        while not lost.is_set():
            if not self._queued:
                self._wake.clear()
                woken = asyncio.ensure_future(self._wake.wait())
                ended = asyncio.ensure_future(lost.wait())
                try:
                    await asyncio.wait(
                        (woken, ended),
                        timeout=self._keepalive,
                        return_when=asyncio.FIRST_COMPLETED,
                    )
                finally:
                    woken.cancel()
                    ended.cancel()
            if lost.is_set():
                break
            if not self._queued:
                await connection.execute("SELECT 1", timeout=self._keepalive)
                continue
            sending = self._take_queued()
            try:
                await connection.execute(_NOTIFY, CHANNEL, sending, timeout=self._keepalive)
            except BaseException:  # sent again once reconnected
                self._requeue(sending)
                raise
        raise asyncpg.InterfaceError("the listening connection was closed")

    def _notified(self, _connection: Any, _pid: int, _channel: str, payload: str) -> None:
        self._deliver(payload)
