"""The egress policy under httpx2 (the MCP SDK's HTTP client): ``egress_transport``.

httpx2 connects through httpcore2, whose connection pool opens every TCP connection with its
network backend's ``connect_tcp(host, port)``. ``EgressNetworkBackend`` answers that with
``EgressPolicy.addresses`` (resolve once, check every address) and connects to those addresses
only, one after the other; TLS then starts on that socket with the URL's host name (SNI and
certificate checks as usual). Every connection is checked, a redirect's included, and a
refusal is an ``httpcore2.ConnectError``, which httpx2 raises as ``httpx2.ConnectError``, as
for a port that is closed.

``egress_transport(policy, verify=...)`` is an ``httpx2.AsyncHTTPTransport`` whose pool has that
backend (httpx2's transport takes no backend, so the pool is replaced once built). Proxies of
the environment are not used.
"""

from __future__ import annotations

import ssl
from collections.abc import Iterable

import anyio
import httpcore2
import httpx2

from app.net.egress import EgressPolicy, EgressRefused

_LIMITS = httpx2.Limits(max_connections=100, max_keepalive_connections=20)


class EgressNetworkBackend(httpcore2.AsyncNetworkBackend):
    """httpcore2's network backend, connecting only where ``policy`` allows."""

    def __init__(self, policy: EgressPolicy) -> None:
        self.policy = policy
        self._backend = httpcore2.AnyIOBackend()

    async def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,  # noqa: ASYNC109 - httpcore2's signature
        local_address: str | None = None,
        socket_options: Iterable[httpcore2.SOCKET_OPTION] | None = None,
    ) -> httpcore2.AsyncNetworkStream:
        try:
            addresses = await self.policy.addresses(host, port)
        except EgressRefused as exc:
            raise httpcore2.ConnectError(f"refused by the egress policy: {exc}") from exc
        failure: Exception | None = None
        for address in addresses:
            try:
                return await self._backend.connect_tcp(
                    str(address),
                    port,
                    timeout=timeout,
                    local_address=local_address,
                    socket_options=socket_options,
                )
            except (httpcore2.ConnectError, httpcore2.ConnectTimeout) as exc:
                failure = exc
        assert failure is not None  # addresses is never empty
        raise failure

    async def connect_unix_socket(
        self,
        path: str,
        timeout: float | None = None,  # noqa: ASYNC109 - httpcore2's signature
        socket_options: Iterable[httpcore2.SOCKET_OPTION] | None = None,
    ) -> httpcore2.AsyncNetworkStream:
        raise httpcore2.ConnectError("the egress policy allows TCP connections only")

    async def sleep(self, seconds: float) -> None:
        await anyio.sleep(seconds)


def egress_transport(policy: EgressPolicy, *, verify: ssl.SSLContext) -> httpx2.AsyncHTTPTransport:
    """An httpx2 transport whose every connection goes where ``policy`` allows."""
    transport = httpx2.AsyncHTTPTransport(verify=verify, trust_env=False, limits=_LIMITS)
    transport._pool = httpcore2.AsyncConnectionPool(
        ssl_context=verify,
        max_connections=_LIMITS.max_connections,
        max_keepalive_connections=_LIMITS.max_keepalive_connections,
        keepalive_expiry=_LIMITS.keepalive_expiry,
        network_backend=EgressNetworkBackend(policy),
    )
    return transport
