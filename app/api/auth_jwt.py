"""``JwtVerifier``: bearer tokens of an identity provider (``[auth.jwt]``), verified with PyJWT
against the provider's JWKS.

The JWKS (a URL or a file) is read off the event loop (a thread), kept for
``jwks_cache_seconds``, and read again early when a token names a key id it does not have (a
rotated key), at most every ``jwks_min_refetch_seconds``: tokens with made-up key ids cannot
make the gateway hammer the provider. A read that fails keeps the keys read before.

A token must be signed by a key of the JWKS with one of ``algorithms`` (public-key ones only),
carry the configured ``iss`` and one of the ``aud``, be within ``exp`` / ``nbf`` (give or take
``leeway_seconds``) and name its tenant in ``tenant_claim``. The principal's key id is the
token's ``sub``; the token itself is the client's credential (forwarded only to an upstream
configured with ``forward_client_key``).
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
import urllib.request
from collections.abc import Callable, Mapping
from typing import Any

import jwt

from app.core.tenancy import Principal
from app.options.auth import JwtSettings

logger = logging.getLogger(__name__)

_MAX_JWKS_BYTES = 1024 * 1024
_MAX_TENANT_LENGTH = 128

JwksReader = Callable[[], bytes]


class TokenRejectedError(Exception):
    """The token is not acceptable; the message says why (for the client)."""


class JwksUnavailableError(Exception):
    """The provider's keys could not be read and none were read before."""


class JwtVerifier:
    """Verifies tokens against one provider's JWKS (see the module docstring)."""

    def __init__(
        self,
        settings: JwtSettings,
        read_jwks: JwksReader | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._settings = settings
        self._read = read_jwks or jwks_reader(settings)
        self._clock = clock
        self._keys: dict[str | None, Mapping[str, Any]] = {}
        self._prepared: dict[tuple[str | None, str], jwt.PyJWK] = {}
        self._fetched_at: float | None = None
        self._lock = asyncio.Lock()
        self._algorithms = list(settings.algorithms)
        self._audience = settings.audiences()
        self._tenant_path = settings.tenant_claim.split(".")

    async def warm(self) -> int:
        """Read the JWKS now (at start-up); the number of keys."""
        await self._refetch(force=True, quietly=True)
        return len(self._keys)

    async def verify(self, token: str) -> Principal:
        """The principal of a valid token; TokenRejectedError (or JwksUnavailableError)."""
        try:
            header = jwt.get_unverified_header(token)
        except jwt.PyJWTError as exc:
            raise TokenRejectedError(f"The bearer token is not a valid JWT ({exc}).") from None
        alg = header.get("alg")
        if alg not in self._algorithms:
            raise TokenRejectedError(f"The bearer token's algorithm {alg!r} is not accepted.")
        key = await self._key_for(header.get("kid"), alg)
        try:
            claims = jwt.decode(
                token,
                key,
                algorithms=self._algorithms,
                audience=self._audience,
                issuer=self._settings.issuer,
                leeway=self._settings.leeway_seconds,
                options={"require": ["exp", "iss", "aud"]},
            )
        except jwt.PyJWTError as exc:
            raise TokenRejectedError(f"The bearer token was refused: {exc}.") from None
        subject = claims.get("sub")
        return Principal(
            tenant=self._tenant(claims),
            key_id=subject if isinstance(subject, str) else None,
            client_credential=token,
        )

    def _tenant(self, claims: Mapping[str, Any]) -> str:
        value: Any = claims
        for part in self._tenant_path:
            value = value.get(part) if isinstance(value, Mapping) else None
        if not isinstance(value, str) or not value or len(value) > _MAX_TENANT_LENGTH:
            raise TokenRejectedError(
                f"The bearer token names no tenant (claim {self._settings.tenant_claim!r})."
            )
        return value

    async def _key_for(self, kid: Any, alg: str) -> jwt.PyJWK:
        if not isinstance(kid, str | None):
            raise TokenRejectedError("The bearer token's key id is not a string.")
        await self._refetch(force=False)
        jwk = self._find(kid)
        if jwk is None:
            await self._refetch(force=True, quietly=True)
            jwk = self._find(kid)
        if jwk is None and not self._keys:
            raise JwksUnavailableError("no signing keys were read from the JWKS")
        if jwk is None:
            raise TokenRejectedError(f"The bearer token's signing key {kid!r} is not known.")
        prepared = self._prepared.get((kid, alg))
        if prepared is None:
            try:
                prepared = jwt.PyJWK(dict(jwk), algorithm=jwk.get("alg") or alg)
            except jwt.PyJWTError as exc:
                raise TokenRejectedError(
                    f"The bearer token's signing key {kid!r} cannot verify {alg}: {exc}."
                ) from None
            self._prepared[(kid, alg)] = prepared
        return prepared

    def _find(self, kid: str | None) -> Mapping[str, Any] | None:
        if kid is None and len(self._keys) == 1:
            return next(iter(self._keys.values()))
        return self._keys.get(kid)

    async def _refetch(self, *, force: bool, quietly: bool = False) -> None:
        """Read the JWKS when it is older than the cache time (``force``: unless it was read
        within ``jwks_min_refetch_seconds``); one read for every request waiting on it."""
        asked = self._clock()
        if not self._stale(asked, force):
            return
        async with self._lock:
            if self._fetched_at is not None and self._fetched_at >= asked:
                return  # read while this request waited
            try:
                raw = await asyncio.to_thread(self._read)
                keys = parse_jwks(raw)
            except Exception as exc:
                self._fetched_at = self._clock()
                logger.warning("reading the JWKS failed: %s: %s", type(exc).__name__, exc)
                if not self._keys:
                    raise JwksUnavailableError(str(exc)) from None
                return
            self._fetched_at = self._clock()
            if keys != self._keys:
                self._keys = keys
                self._prepared.clear()
                if not quietly:
                    logger.info("JWKS read: %d signing keys", len(keys))

    def _stale(self, now: float, force: bool) -> bool:
        if self._fetched_at is None:
            return True
        settings = self._settings
        limit = settings.jwks_min_refetch_seconds if force else settings.jwks_cache_seconds
        return now - self._fetched_at >= limit


def parse_jwks(raw: bytes) -> dict[str | None, Mapping[str, Any]]:
    """The signing keys of a JWKS document, by key id (keys for encryption left out)."""
    document = json.loads(raw)
    entries = document.get("keys") if isinstance(document, dict) else None
    if not isinstance(entries, list):
        raise ValueError("not a JWKS: no 'keys' list")
    keys: dict[str | None, Mapping[str, Any]] = {}
    for entry in entries:
        if not isinstance(entry, dict) or entry.get("use", "sig") != "sig":
            continue
        kid = entry.get("kid")
        keys[kid if isinstance(kid, str) else None] = entry
    return keys


def jwks_reader(settings: JwtSettings) -> JwksReader:
    """Reads the configured JWKS (blocking: called in a thread)."""
    if settings.jwks_file is not None:
        path = settings.jwks_file
        return path.read_bytes
    url = settings.jwks_url
    assert url is not None  # validated: exactly one of jwks_url and jwks_file
    timeout = settings.jwks_timeout_seconds

    def fetch() -> bytes:
        request = urllib.request.Request(url, headers={"accept": "application/json"})
        with urllib.request.urlopen(request, timeout=timeout) as answer:
            data: bytes = answer.read(_MAX_JWKS_BYTES + 1)
        if len(data) > _MAX_JWKS_BYTES:
            raise ValueError(f"the JWKS at {url} is larger than {_MAX_JWKS_BYTES} bytes")
        return data

    return fetch
