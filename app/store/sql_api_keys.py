"""``SqlApiKeyStore``: the ``api_keys`` table (``app.core.api_keys.ApiKeyStore``) on SQLite or
PostgreSQL, for ``respgate keys`` and for the gateway, which reads the whole table every few
seconds (``app.api.auth_keys``) and never per request.

It opens its own small engine on the store's database (no pool to share with the hot path:
the gateway holds one connection for one short ``SELECT`` every few seconds).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from sqlalchemy import select, update
from sqlalchemy.ext.asyncio import AsyncEngine

from app.core.api_keys import ApiKeyNotFoundError, ApiKeyRecord
from app.store.engine import SQLITE_BEGIN, create_engine_for
from app.store.tables import api_keys

_COLUMNS = (
    api_keys.c.id,
    api_keys.c.tenant,
    api_keys.c.name,
    api_keys.c.key_hash,
    api_keys.c.prefix,
    api_keys.c.created_at,
    api_keys.c.revoked_at,
)


class SqlApiKeyStore:
    """Gateway API keys in the store's database."""

    def __init__(self, engine: AsyncEngine) -> None:
        self._engine = engine
        self._writer = engine.execution_options(**{SQLITE_BEGIN: "BEGIN IMMEDIATE"})

    @classmethod
    def open(cls, url: str) -> SqlApiKeyStore:
        """A store with its own engine on ``url`` (closed by ``aclose``)."""
        return cls(create_engine_for(url))

    async def add_key(self, record: ApiKeyRecord) -> None:
        async with self._writer.begin() as conn:
            await conn.execute(
                api_keys.insert().values(
                    id=record.id,
                    tenant=record.tenant,
                    name=record.name,
                    key_hash=record.key_hash,
                    prefix=record.prefix,
                    created_at=record.created_at,
                    revoked_at=record.revoked_at,
                )
            )

    async def list_keys(self) -> list[ApiKeyRecord]:
        query = select(*_COLUMNS).order_by(api_keys.c.created_at, api_keys.c.id)
        async with self._engine.connect() as conn:
            rows = (await conn.execute(query)).all()
        return [_record(row) for row in rows]

    async def revoke_key(self, key_id: str, at: int) -> ApiKeyRecord:
        async with self._writer.begin() as conn:
            await conn.execute(
                update(api_keys)
                .where(api_keys.c.id == key_id, api_keys.c.revoked_at.is_(None))
                .values(revoked_at=at)
            )
            row = (await conn.execute(select(*_COLUMNS).where(api_keys.c.id == key_id))).first()
        if row is None:
            raise ApiKeyNotFoundError(key_id)
        return _record(row)

    async def aclose(self) -> None:
        await self._engine.dispose()


def _record(row: Sequence[Any]) -> ApiKeyRecord:
    key_id, tenant, name, key_hash, prefix, created_at, revoked_at = row
    return ApiKeyRecord(
        id=key_id,
        tenant=tenant,
        name=name,
        key_hash=key_hash,
        prefix=prefix,
        created_at=int(created_at),
        revoked_at=None if revoked_at is None else int(revoked_at),
    )
