"""``respgate keys``: create, list and revoke gateway API keys in the store's database.

The keys live in the ``api_keys`` table of the database ``respgate serve`` uses (the same
``--config``, ``--database-url``, ``--data-dir`` and ``RESPGATE_*`` settings): every gateway on
that database accepts a new key at once and refuses a revoked one within ``[auth]
refresh_seconds``. ``create`` prints the key once, on stdout (alone, for scripts); only its
SHA-256 and a short prefix are stored, so a lost key cannot be shown again: revoke it and
create another. The embedded SQLite database is created or migrated on the way, as ``serve``
does; a PostgreSQL one must be current (``respgate migrate``).
"""

from __future__ import annotations

import argparse
import asyncio
import re
import sys
import time
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import TypeVar

from sqlalchemy.exc import SQLAlchemyError

from app.core.api_keys import (
    TENANT_PATTERN,
    ApiKeyNotFoundError,
    ApiKeyRecord,
    ApiKeyStore,
    display_prefix,
    hash_key,
    new_key,
    new_key_id,
)
from app.core.tenancy import DEFAULT_TENANT
from app.settings import Settings
from app.startup import StartupError, load_config
from app.store.migrate import DatabaseError, display_url, prepare_database
from app.store.sql_api_keys import SqlApiKeyStore

T = TypeVar("T")

_COLUMNS = ("ID", "TENANT", "NAME", "PREFIX", "CREATED", "REVOKED")


def add_keys_command(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    keys = sub.add_parser(
        "keys",
        help="create, list and revoke the gateway's API keys",
        description="Gateway API keys in the store's database (the database `respgate serve` "
        "uses: same --config, --database-url, --data-dir, RESPGATE_* variables).",
    )
    actions = keys.add_subparsers(title="actions", dest="action", required=True, metavar="ACTION")
    create = actions.add_parser("create", help="make a key for a tenant and print it once")
    create.add_argument(
        "--tenant",
        default=DEFAULT_TENANT,
        help=f"the tenant (project) the key acts for (default {DEFAULT_TENANT})",
    )
    create.add_argument("--name", default="", help="what the key is for (shown by list)")
    create.set_defaults(func=_create)
    listing = actions.add_parser("list", help="every key: id, tenant, name, prefix, dates")
    listing.set_defaults(func=_list)
    revoke = actions.add_parser("revoke", help="refuse a key from now on")
    revoke.add_argument("key_id", metavar="KEY_ID", help="the key's id (key_..., see list)")
    revoke.set_defaults(func=_revoke)
    for action in (create, listing, revoke):
        action.add_argument("--config", type=Path, help="TOML configuration file")
        action.add_argument("--database-url", help="SQLAlchemy URL of the store (default: serve's)")
        action.add_argument("--data-dir", type=Path, help="where the default SQLite file lives")


def _settings(args: argparse.Namespace) -> Settings:
    return load_config(args.config, data_dir=args.data_dir, database_url=args.database_url)


def _with_store(settings: Settings, action: Callable[[ApiKeyStore], Awaitable[T]]) -> T:
    url = settings.resolved_database_url()

    async def run() -> T:
        await prepare_database(url, auto_migrate=True)
        store = SqlApiKeyStore.open(url)
        try:
            return await action(store)
        finally:
            await store.aclose()

    try:
        return asyncio.run(run())
    except DatabaseError as exc:
        raise StartupError(str(exc), code=1) from None
    except (OSError, SQLAlchemyError) as exc:
        raise StartupError(f"{display_url(url)}: {type(exc).__name__}: {exc}", code=1) from None


def _create(args: argparse.Namespace) -> int:
    if not re.match(TENANT_PATTERN, args.tenant):
        raise StartupError(
            f"--tenant {args.tenant!r}: use 1 to 64 letters, digits, '_', '.' or '-'"
        )
    key = new_key()
    record = ApiKeyRecord(
        id=new_key_id(),
        tenant=args.tenant,
        name=args.name,
        key_hash=hash_key(key),
        prefix=display_prefix(key),
        created_at=int(time.time()),
    )

    async def add(store: ApiKeyStore) -> None:
        await store.add_key(record)

    _with_store(_settings(args), add)
    print(
        f"created {record.id} for tenant {record.tenant!r}; the key is shown only now:",
        file=sys.stderr,
    )
    print(key)
    return 0


def _list(args: argparse.Namespace) -> int:
    async def read(store: ApiKeyStore) -> list[ApiKeyRecord]:
        return await store.list_keys()

    records = _with_store(_settings(args), read)
    rows = [_COLUMNS, *(_row(record) for record in records)]
    widths = [max(len(row[i]) for row in rows) for i in range(len(_COLUMNS))]
    for row in rows:
        cells = (cell.ljust(width) for cell, width in zip(row, widths, strict=True))
        print("  ".join(cells).rstrip())
    return 0


def _revoke(args: argparse.Namespace) -> int:
    async def revoke(store: ApiKeyStore) -> ApiKeyRecord:
        return await store.revoke_key(args.key_id, int(time.time()))

    try:
        record = _with_store(_settings(args), revoke)
    except ApiKeyNotFoundError:
        message = f"no key has the id {args.key_id!r} (see respgate keys list)"
        raise StartupError(message, code=1) from None
    print(f"{record.id} (tenant {record.tenant!r}) revoked at {_when(record.revoked_at)}")
    return 0


def _row(record: ApiKeyRecord) -> tuple[str, ...]:
    return (
        record.id,
        record.tenant,
        record.name or "-",
        record.prefix + "...",
        _when(record.created_at),
        _when(record.revoked_at),
    )


def _when(seconds: int | None) -> str:
    if seconds is None:
        return "-"
    return datetime.fromtimestamp(seconds, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
