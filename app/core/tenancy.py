"""Who is asking: the principal a request runs as, and the tenant that owns what it stores.

The API layer decides the principal (app/api/auth.py: a gateway key, a JWT, or nobody when
authentication is off) and hands it to the core; the core and the stores only see the tenant
string. Every stored object carries the tenant that created it, and every read is scoped to the
caller's tenant: another tenant's id answers exactly as an unknown id does.
"""

from __future__ import annotations

from dataclasses import dataclass

# The tenant of the embedded single-tenant default (authentication off) and of every row stored
# before tenancy existed (migration 0006 fills it in).
DEFAULT_TENANT = "default"


@dataclass(frozen=True, slots=True)
class Principal:
    """The caller: its tenant (project), and which credential said so."""

    tenant: str = DEFAULT_TENANT
    # The gateway key's id ("key_..."), or the JWT's subject; None when authentication is off.
    key_id: str | None = None
    # The client's own upstream credential, kept only for upstreams configured with
    # forward_client_key = true (and sent to no other upstream).
    client_credential: str | None = None


ANONYMOUS = Principal()
