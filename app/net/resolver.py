"""Name resolution for the egress policy: the ``Resolver`` port and its two implementations.

``SystemResolver`` asks the operating system (the event loop's ``getaddrinfo``), as every
connection the gateway makes would. ``MemoryResolver`` answers from a table kept in memory (in
the manner of ``httpx.MockTransport``): tests give names the answers they need, including one
that changes between two lookups (DNS rebinding), without any DNS server.

A resolver answers a name with its addresses, in the order to try them; no address (or an
``OSError``) means the name does not resolve. The policy bounds every lookup with its own
timeout, so a resolver need not.
"""

from __future__ import annotations

import asyncio
import ipaddress
import socket
from collections.abc import Iterable, Mapping, Sequence
from typing import Protocol

IpAddress = ipaddress.IPv4Address | ipaddress.IPv6Address


class Resolver(Protocol):
    """Resolves a host name to the addresses to connect to."""

    async def resolve(self, host: str, port: int) -> list[IpAddress]:
        """The addresses of ``host`` (a name, never an address literal); empty, or an
        ``OSError``, when it does not resolve."""
        ...


def ip_literal(host: str) -> IpAddress | None:
    """The address ``host`` spells (``[::1]`` and an IPv6 zone ``fe80::1%eth0`` included), or
    None when ``host`` is a name."""
    text = host.strip()
    if text.startswith("[") and text.endswith("]"):
        text = text[1:-1]
    try:
        return ipaddress.ip_address(text.partition("%")[0])
    except ValueError:
        return None


class SystemResolver:
    """The operating system's resolver (``getaddrinfo``), TCP addresses only."""

    async def resolve(self, host: str, port: int) -> list[IpAddress]:
        loop = asyncio.get_running_loop()
        infos = await loop.getaddrinfo(host, port, type=socket.SOCK_STREAM)
        addresses: list[IpAddress] = []
        for _family, _type, _proto, _name, sockaddr in infos:
            address = ip_literal(str(sockaddr[0]))
            if address is not None and address not in addresses:
                addresses.append(address)
        return addresses


class MemoryResolver:
    """Answers from a table: ``{"name": [answer, answer, ...]}``, each answer the list of
    addresses one lookup returns. Successive lookups of a name take its answers in turn (the
    last one repeats), so ``{"rebind.test": [["93.184.215.14"], ["127.0.0.1"]]}`` answers a
    public address first and a loopback one next. A name not in the table goes to
    ``fallback`` (by default it does not resolve); ``hang`` names never answer. ``lookups``
    records every name asked, in order."""

    def __init__(
        self,
        answers: Mapping[str, Sequence[Iterable[str]]] | None = None,
        *,
        hang: Iterable[str] = (),
        fallback: Resolver | None = None,
    ) -> None:
        self._answers = {
            name.lower(): [[ipaddress.ip_address(a) for a in answer] for answer in sequence]
            for name, sequence in (answers or {}).items()
        }
        self._hang = frozenset(name.lower() for name in hang)
        self._fallback = fallback
        self._served: dict[str, int] = {}
        self.lookups: list[str] = []

    async def resolve(self, host: str, port: int) -> list[IpAddress]:
        name = host.lower()
        self.lookups.append(name)
        if name in self._hang:
            await asyncio.Event().wait()  # never set: the policy's timeout ends the lookup
        sequence = self._answers.get(name)
        if not sequence:
            return [] if self._fallback is None else await self._fallback.resolve(host, port)
        served = self._served.get(name, 0)
        self._served[name] = served + 1
        return list(sequence[min(served, len(sequence) - 1)])
