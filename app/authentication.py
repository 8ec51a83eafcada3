"""Wires client authentication into the app (``install_auth``, one call in ``create_app``):
the ``[auth]`` settings decide whether it is on, the configured keys and the ``api_keys`` table
fill the key ring, ``[auth.jwt]`` makes the JWT verifier, and ``app.api.auth.AuthMiddleware``
runs outermost.

While the app runs (its lifespan), the ring reads the ``api_keys`` table every
``refresh_seconds``; at start-up one log line says whether authentication is on and why, and
a warning says when it is on with nothing to accept (every request then answers 401).
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import AsyncIterator, Mapping
from typing import Any

from fastapi import FastAPI

from app.api.auth import Authenticator, AuthMiddleware
from app.api.auth_jwt import JwksUnavailableError, JwtVerifier
from app.api.auth_keys import KeyOwner, KeyRing
from app.options.auth import AuthSettings
from app.options.secrets import secret_environ
from app.settings import Settings
from app.store.sql_api_keys import SqlApiKeyStore

logger = logging.getLogger(__name__)

NO_CREDENTIALS_HINT = (
    "authentication is on but no API key or JWT issuer is configured: every request answers "
    "401. Create a key with `respgate keys create --tenant NAME` (with the same --config / "
    "--database-url as serve), or configure [[auth.keys]] or [auth.jwt] (or set [auth] mode = "
    '"off" on a trusted network).'
)


def configured_keys(auth: AuthSettings, environ: Mapping[str, str]) -> dict[str, KeyOwner]:
    """The configured keys by SHA-256; ValueError for an unset ``key_env``."""
    return {
        digest: KeyOwner(key.tenant, f"key_cfg_{digest[:12]}")
        for digest, key in auth.key_hashes(environ)
    }


def install_auth(app: FastAPI, settings: Settings) -> Authenticator:
    """Add the authentication middleware to ``app`` (call it after every other middleware:
    the last one added runs outermost) and the key ring's refresh to its lifespan."""
    auth = settings.auth
    enabled, why = auth.enabled_for(settings.host)
    ring = KeyRing(configured_keys(auth, secret_environ()), refresh_seconds=auth.refresh_seconds)
    verifier = JwtVerifier(auth.jwt) if enabled and auth.jwt is not None else None
    authenticator = Authenticator(enabled, ring, verifier)
    app.add_middleware(AuthMiddleware, authenticator=authenticator)
    inner = app.router.lifespan_context

    @contextlib.asynccontextmanager
    async def lifespan(application: Any) -> AsyncIterator[Any]:
        async with inner(application) as state:
            logger.info("authentication %s: %s", "on" if enabled else "off", why)
            if not enabled:
                yield state
                return
            store = SqlApiKeyStore.open(settings.resolved_database_url())
            try:
                async with ring.running(store):
                    await _check_credentials(ring, verifier)
                    yield state
            finally:
                await store.aclose()

    app.router.lifespan_context = lifespan
    return authenticator


async def _check_credentials(ring: KeyRing, verifier: JwtVerifier | None) -> None:
    """Read the JWKS once; warn when nothing can be accepted."""
    if verifier is not None:
        try:
            count = await verifier.warm()
        except JwksUnavailableError as exc:
            logger.warning("[auth.jwt]: the JWKS cannot be read yet (%s); retried per request", exc)
        else:
            logger.info("[auth.jwt]: %d signing keys read", count)
    if verifier is None and len(ring) == 0:
        logger.warning(NO_CREDENTIALS_HINT)
