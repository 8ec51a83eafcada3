"""The principal of a request or WebSocket, as the authentication middleware left it."""

from __future__ import annotations

from starlette.requests import HTTPConnection
from starlette.types import Scope

from app.core.tenancy import ANONYMOUS, Principal

# Where the authentication middleware puts the principal: scope["state"][PRINCIPAL_KEY].
PRINCIPAL_KEY = "respgate.principal"


def set_principal(scope: Scope, principal: Principal) -> None:
    scope.setdefault("state", {})[PRINCIPAL_KEY] = principal


def principal_of(connection: HTTPConnection) -> Principal:
    """The caller; ``ANONYMOUS`` (the default tenant) when authentication is off."""
    state = connection.scope.get("state") or {}
    principal = state.get(PRINCIPAL_KEY, ANONYMOUS)
    assert isinstance(principal, Principal)
    return principal
