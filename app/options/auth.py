"""``[auth]``: client authentication (gateway API keys, JWT bearer tokens).

``mode``: "auto" turns authentication on unless the gateway listens on a loopback address only
(127.0.0.1, ::1, localhost: the embedded quick start), "on" and "off" say so. Keys come from
``[[auth.keys]]`` (each the key itself, the name of an environment variable holding it, or
its SHA-256) and from the database's ``api_keys`` table (``respgate keys``); a JWT from an
identity provider is verified against its JWKS (``[auth.jwt]``). From the environment:
``RESPGATE_AUTH__MODE=on``, ``RESPGATE_AUTH__KEYS='[{"tenant": "team-a", "key_env": "KEY_A"}]'``,
``RESPGATE_AUTH__JWT__JWKS_URL=...``. No key is ever logged.
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Literal, Self

from pydantic import BaseModel, ConfigDict, Field, SecretStr, field_validator, model_validator

from app.core.api_keys import TENANT_PATTERN, hash_key

AuthMode = Literal["auto", "on", "off"]

# The JWT signature algorithms a JWKS can vouch for: public-key ones only (an HMAC secret in a
# JWKS would be a shared secret published as a key; "none" is no signature).
ASYMMETRIC_ALGORITHMS = frozenset(
    {
        *(f"{family}{bits}" for family in ("RS", "PS", "ES") for bits in (256, 384, 512)),
        "ES256K",
        "EdDSA",
    }
)

# Shorter configured keys are refused: a key is a password nobody types.
MIN_KEY_LENGTH = 20

_SHA256 = re.compile(r"^[0-9a-f]{64}$")


class ApiKeyConfig(BaseModel):
    """One gateway key from the configuration (``[[auth.keys]]``): exactly one of ``key``,
    ``key_env`` and ``key_sha256``."""

    model_config = ConfigDict(extra="forbid")

    tenant: str = Field(pattern=TENANT_PATTERN)
    name: str = Field(default="", max_length=256)
    key: SecretStr | None = None
    # The name of an environment variable holding the key.
    key_env: str | None = None
    # The key's SHA-256, 64 hex digits (``printf %s "$KEY" | sha256sum``): the file holds no key.
    key_sha256: str | None = None

    @field_validator("key")
    @classmethod
    def _long_enough(cls, value: SecretStr | None) -> SecretStr | None:
        if value is not None and len(value.get_secret_value()) < MIN_KEY_LENGTH:
            raise ValueError(f"an API key must be at least {MIN_KEY_LENGTH} characters")
        return value

    @field_validator("key_sha256")
    @classmethod
    def _hex_digest(cls, value: str | None) -> str | None:
        if value is not None and not _SHA256.match(value.lower()):
            raise ValueError("key_sha256 must be a SHA-256 in hex (64 digits)")
        return None if value is None else value.lower()

    @model_validator(mode="after")
    def _one_source(self) -> Self:
        given = [self.key is not None, self.key_env is not None, self.key_sha256 is not None]
        if sum(given) != 1:
            raise ValueError(
                f"auth key of tenant {self.tenant!r}: set exactly one of key, key_env, key_sha256"
            )
        return self

    def resolved_hash(self, environ: Mapping[str, str]) -> str:
        """The key's SHA-256; ValueError naming ``key_env`` when it is not set (or too short)."""
        if self.key_sha256 is not None:
            return self.key_sha256
        if self.key is not None:
            return hash_key(self.key.get_secret_value())
        assert self.key_env is not None  # validated: exactly one source
        value = environ.get(self.key_env, "")
        if len(value) < MIN_KEY_LENGTH:
            state = "is not set" if not value else f"is shorter than {MIN_KEY_LENGTH} characters"
            raise ValueError(
                f"auth key of tenant {self.tenant!r}: key_env names {self.key_env}, which {state}"
            )
        return hash_key(value)


class JwtSettings(BaseModel):
    """``[auth.jwt]``: bearer tokens of an identity provider, verified against its JWKS."""

    model_config = ConfigDict(extra="forbid")

    # Where the signing keys are: the provider's JWKS URL (fetched, cached, fetched again for
    # an unknown key id at most every ``jwks_min_refetch_seconds``) or a JWKS file.
    jwks_url: str | None = None
    jwks_file: Path | None = None
    # The ``iss`` and ``aud`` a token must carry.
    issuer: str
    # One audience or several (a token's aud must name one of them).
    audience: list[str] | str
    algorithms: list[str] = Field(default_factory=lambda: ["RS256"], min_length=1)
    # The claim that names the tenant (a dotted path reaches into an object: "org.id"); a
    # token without it is refused.
    tenant_claim: str = "tenant"
    # Clock skew allowed on ``exp``, ``nbf`` and ``iat``.
    leeway_seconds: float = Field(default=30.0, ge=0, le=600)
    jwks_cache_seconds: float = Field(default=300.0, gt=0)
    jwks_min_refetch_seconds: float = Field(default=30.0, ge=0)
    jwks_timeout_seconds: float = Field(default=10.0, gt=0)

    @field_validator("audience")
    @classmethod
    def _some_audience(cls, value: list[str] | str) -> list[str] | str:
        if not value:
            raise ValueError("[auth.jwt] audience must name at least one audience")
        return value

    def audiences(self) -> list[str]:
        return [self.audience] if isinstance(self.audience, str) else list(self.audience)

    @field_validator("algorithms")
    @classmethod
    def _public_key_algorithms(cls, value: list[str]) -> list[str]:
        unknown = sorted(set(value) - ASYMMETRIC_ALGORITHMS)
        if unknown:
            raise ValueError(
                f"JWT algorithm {unknown[0]!r} is not a public-key algorithm (one of "
                f"{', '.join(sorted(ASYMMETRIC_ALGORITHMS))})"
            )
        return value

    @model_validator(mode="after")
    def _one_jwks(self) -> Self:
        if (self.jwks_url is None) == (self.jwks_file is None):
            raise ValueError("[auth.jwt]: set exactly one of jwks_url and jwks_file")
        if self.jwks_url is not None and not self.jwks_url.startswith(("https://", "http://")):
            raise ValueError("[auth.jwt] jwks_url must be an http(s) URL")
        return self


class AuthSettings(BaseModel):
    """``[auth]``: who may call the gateway, and as which tenant."""

    model_config = ConfigDict(extra="forbid")

    mode: AuthMode = "auto"
    keys: list[ApiKeyConfig] = Field(default_factory=list)
    jwt: JwtSettings | None = None
    # How often each gateway process reads the api_keys table: a key revoked with
    # ``respgate keys revoke`` is refused by every replica within this many seconds. An
    # unknown key also makes the process read the table (at most once a second), so a new
    # key works at once.
    refresh_seconds: float = Field(default=2.0, gt=0, le=3600)

    def enabled_for(self, host: str) -> tuple[bool, str]:
        """Whether authentication is on for a gateway listening on ``host``, and why."""
        if self.mode == "on":
            return True, "[auth] mode is on"
        if self.mode == "off":
            return False, "[auth] mode is off"
        if is_loopback(host):
            return False, f"bound to {host} (loopback only)"
        return True, f"bound to {host or 'every interface'}"

    def key_hashes(self, environ: Mapping[str, str]) -> list[tuple[str, ApiKeyConfig]]:
        """Each configured key's SHA-256 with its entry; ValueError for an unset ``key_env``
        or a key given twice."""
        hashes = [(key.resolved_hash(environ), key) for key in self.keys]
        seen: set[str] = set()
        for digest, key in hashes:
            if digest in seen:
                raise ValueError(f"auth key of tenant {key.tenant!r} is configured twice")
            seen.add(digest)
        return hashes


def is_loopback(host: str) -> bool:
    """127.0.0.0/8, ::1 or localhost: reachable from this machine only."""
    if host.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False
