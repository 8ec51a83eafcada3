"""Gateways with real API keys for several tenants, and clients as each of them.

``keyed(settings, *tenants)`` turns authentication on (``[auth] mode = "on"``) with one
configured key (``[[auth.keys]]``) per tenant, ``tenant_key(tenant)``; ``tenants_gateway`` runs
that gateway in this process (``tests.helpers.in_process``). A client is its tenant's because it
sends its tenant's key, through the real authentication middleware: ``client_as`` is the
``openai`` SDK (``Authorization: Bearer``), ``claude_as`` the ``anthropic`` SDK (``x-api-key``),
``headers_as`` the header of a raw request or WebSocket.

Keys of the gateway's ``api_keys`` table, as ``respgate keys create`` makes them (the embedded
SQLite database created or migrated on the way): ``store_key`` and ``revoke_key``.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import time
from collections.abc import Callable, Iterator
from typing import Any

import anthropic
import openai
from starlette.testclient import TestClient

from app.core.api_keys import (
    ApiKeyRecord,
    display_prefix,
    hash_key,
    new_key,
    new_key_id,
)
from app.core.ports import Upstream
from app.main import create_app
from app.options.auth import AuthSettings
from app.settings import Settings
from app.store.migrate import prepare_database
from app.store.sql_api_keys import SqlApiKeyStore
from tests.helpers import IN_PROCESS_URL, in_process


def tenant_key(tenant: str) -> str:
    """The key configured for ``tenant`` (``keyed``): the same in every test, another per
    tenant."""
    return f"sk-test-{tenant}-{hashlib.sha256(tenant.encode()).hexdigest()[:24]}"


def configured_key_id(key: str) -> str:
    """The id a configured key acts under (``Principal.key_id``): ``key_cfg_`` and the start of
    its SHA-256."""
    return f"key_cfg_{hash_key(key)[:12]}"


def keyed(settings: Settings, *tenants: str, **auth: Any) -> Settings:
    """``settings`` with authentication on and a configured key for each of ``tenants`` added
    to its ``[auth]`` (``auth``: more ``[auth]`` settings, such as ``jwt``)."""
    current = settings.auth.model_dump()
    keys = [{"tenant": tenant, "name": tenant, "key": tenant_key(tenant)} for tenant in tenants]
    options = {**current, **auth, "mode": "on", "keys": [*current["keys"], *keys]}
    return settings.model_copy(update={"auth": AuthSettings.model_validate(options)})


@contextlib.contextmanager
def tenants_gateway(
    settings: Settings, upstream: Upstream, *tenants: str, **app: Any
) -> Iterator[TestClient]:
    """The gateway of ``keyed(settings, *tenants)`` in this process (``app``: more arguments of
    ``create_app``, such as ``embedder``)."""
    with in_process(create_app(keyed(settings, *tenants), upstream=upstream, **app)) as http:
        yield http


def sdk(http: TestClient, key: str) -> openai.OpenAI:
    """The ``openai`` SDK on an ``in_process`` gateway, sending ``key``."""
    return openai.OpenAI(
        base_url=f"{IN_PROCESS_URL}/v1", api_key=key, max_retries=0, http_client=http
    )


def client_as(http: TestClient, tenant: str) -> openai.OpenAI:
    """The ``openai`` SDK as ``tenant`` (its configured key)."""
    return sdk(http, tenant_key(tenant))


def claude_as(http: TestClient, tenant: str) -> anthropic.Anthropic:
    """The ``anthropic`` SDK as ``tenant`` (its configured key, in ``x-api-key``)."""
    return anthropic.Anthropic(
        base_url=IN_PROCESS_URL, api_key=tenant_key(tenant), max_retries=0, http_client=http
    )


def headers_as(tenant: str) -> dict[str, str]:
    """The header that makes a raw request (``http.get``, a WebSocket) ``tenant``'s."""
    return {"authorization": f"Bearer {tenant_key(tenant)}"}


def store_key(database_url: str, tenant: str, name: str = "") -> tuple[str, str]:
    """A new key of ``tenant`` in the ``api_keys`` table at ``database_url``: (key, key id)."""
    key = new_key()
    record = ApiKeyRecord(
        id=new_key_id(),
        tenant=tenant,
        name=name,
        key_hash=hash_key(key),
        prefix=display_prefix(key),
        created_at=int(time.time()),
    )
    _on_table(database_url, lambda store: store.add_key(record))
    return key, record.id


def revoke_key(database_url: str, key_id: str) -> None:
    _on_table(database_url, lambda store: store.revoke_key(key_id, int(time.time())))


def _on_table(database_url: str, action: Callable[[SqlApiKeyStore], Any]) -> None:
    async def run() -> None:
        await prepare_database(database_url, auto_migrate=True)
        store = SqlApiKeyStore.open(database_url)
        try:
            await action(store)
        finally:
            await store.aclose()

    asyncio.run(run())
