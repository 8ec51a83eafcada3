"""Gateway API keys: what one is, how it is made and hashed, and the port of their table.

A key is shown once, when it is made (``respgate keys create``), and never stored: the
``api_keys`` table keeps its SHA-256 (hex) and a short display prefix. A request's key is
hashed once and looked up by that hash (``app.api.auth_keys``). Keys are 32 random bytes, so
an unsalted hash is as strong as the key itself (no dictionary of likely keys exists).
"""

from __future__ import annotations

import hashlib
import secrets
from dataclasses import dataclass
from typing import Protocol

# Every key the gateway makes starts so (OpenAI's keys start with "sk-"): a key found in a log
# or a repository is recognisably the gateway's.
KEY_PREFIX = "sk-rg-"
KEY_RANDOM_BYTES = 32
# How much of a key ``respgate keys list`` shows: the prefix and a few random characters.
DISPLAY_PREFIX_LENGTH = len(KEY_PREFIX) + 4
KEY_ID_PREFIX = "key_"
# The tenants a key may name (a project name: letters, digits, "_", ".", "-").
TENANT_PATTERN = r"^[A-Za-z0-9_.-]{1,64}$"


def hash_key(key: str) -> str:
    """The SHA-256 of ``key`` (UTF-8), as 64 lowercase hex digits: what is stored."""
    return hashlib.sha256(key.encode()).hexdigest()


def new_key() -> str:
    """A fresh key: ``sk-rg-`` and 32 random bytes, URL-safe base64 (43 characters)."""
    return KEY_PREFIX + secrets.token_urlsafe(KEY_RANDOM_BYTES)


def new_key_id() -> str:
    return KEY_ID_PREFIX + secrets.token_hex(12)


def display_prefix(key: str) -> str:
    """The start of ``key`` that identifies it in lists (never enough to use it)."""
    return key[:DISPLAY_PREFIX_LENGTH]


@dataclass(frozen=True, slots=True)
class ApiKeyRecord:
    """One row of ``api_keys``: never the key, only its hash."""

    id: str
    tenant: str
    name: str
    key_hash: str
    prefix: str
    created_at: int
    revoked_at: int | None = None

    @property
    def active(self) -> bool:
        return self.revoked_at is None


class ApiKeyNotFoundError(LookupError):
    """No key has that id."""


class ApiKeyStore(Protocol):
    """The ``api_keys`` table (``app.store.sql_api_keys``)."""

    async def add_key(self, record: ApiKeyRecord) -> None: ...

    async def list_keys(self) -> list[ApiKeyRecord]:
        """Every key, revoked ones too, oldest first."""
        ...

    async def revoke_key(self, key_id: str, at: int) -> ApiKeyRecord:
        """Mark the key revoked (once: revoking again keeps the first time); raises
        ApiKeyNotFoundError for an unknown id."""
        ...

    async def aclose(self) -> None: ...
