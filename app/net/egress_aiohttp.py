"""The egress policy under aiohttp: ``EgressConnector`` connects only to checked addresses.

aiohttp resolves a connection's host in ``TCPConnector._resolve_host`` and connects to the
addresses it returns (an address literal too, without asking a resolver). ``EgressConnector``
answers that step with ``EgressPolicy.addresses``: the host is resolved once, every address is
checked, and those addresses are the only ones aiohttp tries, for every new connection (a
redirect's included). A refusal is an ``EgressRefused`` (an ``OSError``), which aiohttp raises
as ``ClientConnectorDNSError``, an ``aiohttp.ClientError`` like any connection that failed.
aiohttp's DNS cache is off: each connection is checked on its own lookup.

The connector's policy can trust more destinations later (``trust``): the ``rest`` engine
trusts each binding's host:port as it first calls it.
"""

from __future__ import annotations

import socket
import urllib.request
from collections.abc import Sequence
from typing import Any

import aiohttp
from aiohttp.abc import ResolveResult
from aiohttp.tracing import Trace

from app.net.egress import EgressPolicy, destination


class EgressConnector(aiohttp.TCPConnector):
    """A ``TCPConnector`` whose every connection goes where ``policy`` allows."""

    def __init__(self, policy: EgressPolicy, **options: Any) -> None:
        super().__init__(use_dns_cache=False, **options)
        self.policy = policy

    def trust(self, url: str) -> None:
        """Also allow the exact host:port of ``url`` (a destination the operator wrote)."""
        try:
            if destination(url) in self.policy.trusted:
                return
        except ValueError:
            return
        self.policy = self.policy.trusting(url)

    async def _resolve_host(
        self, host: str, port: int, traces: Sequence[Trace] | None = None
    ) -> list[ResolveResult]:
        addresses = await self.policy.addresses(host, port)
        return [
            {
                "hostname": host,
                "host": str(address),
                "port": port,
                "family": socket.AF_INET6 if address.version == 6 else socket.AF_INET,
                "proto": 0,
                "flags": socket.AI_NUMERICHOST,
            }
            for address in addresses
        ]


def egress_session(
    policy: EgressPolicy,
    *,
    ssl: Any = True,
    limit: int = 100,
    trust_env: bool = False,
    **options: Any,
) -> aiohttp.ClientSession:
    """An ``aiohttp.ClientSession`` on an ``EgressConnector``. ``trust_env`` (the proxies of
    the environment) only where every destination is the operator's: a proxy connects to an
    address the policy never sees, so the proxy's own host:port must be trusted
    (``environment_proxies``)."""
    connector = EgressConnector(policy, ssl=ssl, limit=limit)
    return aiohttp.ClientSession(connector=connector, trust_env=trust_env, **options)


def environment_proxies() -> list[str]:
    """The proxy URLs of the environment (``HTTPS_PROXY``, ``HTTP_PROXY`` ...)."""
    return [url for scheme, url in urllib.request.getproxies().items() if scheme != "no"]
