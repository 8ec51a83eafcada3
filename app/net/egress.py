"""The egress policy: which URLs the gateway may connect to on a client's behalf.

A request can make the gateway connect to a URL from inside its own network (an MCP
``server_url``, a web search result's page), so every such connection is checked first against
one ``EgressPolicy``: the scheme must be http or https, the host must be on the policy's
``allowed_hosts`` when it has any, and no address of the host may be in a refused class
(cloud metadata services, link-local, loopback, private, ... addresses, the classic server-side
request forgery targets). ``await policy.refusal(url)`` says why a URL is refused, or None.

Names are resolved (with the event loop's ``getaddrinfo``) to catch names, and numeric spellings
such as ``2852039166``, that lead to a refused address; whether a name that does not resolve is
refused is the policy's choice. The check is made before connecting, so a name whose DNS answer
changes in between is not caught: operators who need a hard boundary set ``allowed_hosts``.
"""

from __future__ import annotations

import asyncio
import enum
import ipaddress
import logging
import socket
from collections.abc import Callable
from dataclasses import dataclass
from urllib.parse import unquote, urlsplit

logger = logging.getLogger(__name__)

IpAddress = ipaddress.IPv4Address | ipaddress.IPv6Address

RESOLVE_TIMEOUT = 2.0
"""Seconds to wait for a hostname to resolve."""

_METADATA_ADDRESSES = frozenset(
    ipaddress.ip_address(address)
    for address in ("169.254.169.254", "fd00:ec2::254", "100.100.100.200")
)
_METADATA_NAMES = frozenset({"metadata.google.internal", "metadata"})
_DEFAULT_PORTS = {"http": 80, "https": 443}


class AddressClass(enum.Enum):
    """A kind of address a policy may refuse; the value completes "<address> is ..."."""

    METADATA = "a cloud metadata address"
    LINK_LOCAL = "a link-local address"
    LOOPBACK = "a loopback address"
    UNSPECIFIED = "an unspecified address"
    PRIVATE = "a private address"
    RESERVED = "a reserved address"
    MULTICAST = "a multicast address"
    NOT_GLOBAL = "not a public address"


_CLASS_TESTS: tuple[tuple[AddressClass, Callable[[IpAddress], bool]], ...] = (
    (AddressClass.METADATA, lambda a: a in _METADATA_ADDRESSES),
    (AddressClass.LINK_LOCAL, lambda a: a.is_link_local),
    (AddressClass.LOOPBACK, lambda a: a.is_loopback),
    (AddressClass.UNSPECIFIED, lambda a: a.is_unspecified),
    (AddressClass.PRIVATE, lambda a: a.is_private),
    (AddressClass.RESERVED, lambda a: a.is_reserved),
    (AddressClass.MULTICAST, lambda a: a.is_multicast),
    (AddressClass.NOT_GLOBAL, lambda a: not a.is_global),
)

PUBLIC_ONLY = frozenset(AddressClass)
"""Refuse every address that is not a public unicast one."""

METADATA_AND_LINK_LOCAL = frozenset({AddressClass.METADATA, AddressClass.LINK_LOCAL})
"""Refuse cloud metadata services and link-local addresses; loopback and private are allowed."""


@dataclass(frozen=True, slots=True)
class EgressPolicy:
    """Where the gateway may connect for one purpose (MCP servers, web pages, ...).

    ``allowed_hosts``: when not empty, the only hosts allowed (``example.com`` exact, any port;
    ``*.example.com`` any subdomain, not the domain itself; optionally ``:port``, ``[::1]:8080``
    for IPv6; without case). ``refused``: the address classes refused, also when the host is on
    ``allowed_hosts``; empty skips resolution. ``allow_unresolved``: whether a name that does
    not resolve (in ``resolve_timeout`` seconds) is let through (connecting will then fail).
    ``purpose`` names the allowed-hosts list in refusals ("the gateway's allowed MCP hosts").
    """

    allowed_hosts: tuple[str, ...] = ()
    refused: frozenset[AddressClass] = PUBLIC_ONLY
    allow_unresolved: bool = False
    resolve_timeout: float = RESOLVE_TIMEOUT
    purpose: str = "outbound"

    async def refusal(self, url: str) -> str | None:
        """None when the gateway may connect to ``url``, else the reason it may not."""
        try:
            parts = urlsplit(url.strip())
            port = parts.port
        except ValueError as exc:
            return f"not a valid URL ({exc})"
        if parts.scheme not in _DEFAULT_PORTS:
            return "the scheme must be http or https"
        host = _normalize_host(parts.hostname or "")
        if not host:
            return "the URL has no host"
        effective_port = port if port is not None else _DEFAULT_PORTS[parts.scheme]
        if self.allowed_hosts and not any(
            _host_matches(entry, host, effective_port) for entry in self.allowed_hosts
        ):
            return f"host {host} is not in the gateway's allowed {self.purpose} hosts"
        if not self.refused:
            return None
        return await self._host_refusal(host, effective_port)

    async def _host_refusal(self, host: str, port: int) -> str | None:
        if AddressClass.METADATA in self.refused and host in _METADATA_NAMES:
            return f"host {host} is a cloud metadata service"
        literal = _ip_literal(host)
        if literal is not None:
            return self.address_refusal(literal)
        addresses = await _resolve(host, port, self.resolve_timeout)
        if not addresses and not self.allow_unresolved:
            return f"host {host} does not resolve"
        for address in addresses:
            reason = self.address_refusal(address)
            if reason is not None:
                return f"host {host} resolves to a refused address: {reason}"
        return None

    def address_refusal(self, address: IpAddress) -> str | None:
        """Why connecting to ``address`` is refused, or None (an IPv4-mapped IPv6 address is
        judged as the IPv4 address it maps)."""
        judged: IpAddress = address
        if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
            judged = address.ipv4_mapped
        for address_class, test in _CLASS_TESTS:
            if address_class in self.refused and test(judged):
                return f"{address} is {address_class.value}"
        return None


def _normalize_host(host: str) -> str:
    return unquote(host).strip().lower().rstrip(".")


def _ip_literal(host: str) -> IpAddress | None:
    """The address ``host`` spells, without an IPv6 zone (``fe80::1%eth0``), or None."""
    try:
        return ipaddress.ip_address(host.partition("%")[0])
    except ValueError:
        return None


def _host_matches(entry: str, host: str, port: int) -> bool:
    """Whether ``host``:``port`` matches one ``allowed_hosts`` entry."""
    pattern, entry_port = _split_entry(entry)
    if entry_port is not None and entry_port != port:
        return False
    if pattern.startswith("*."):
        suffix = pattern[1:]  # ".example.com"
        return host.endswith(suffix) and len(host) > len(suffix)
    return host == pattern


def _split_entry(entry: str) -> tuple[str, int | None]:
    entry = entry.strip().lower()
    if entry.startswith("["):  # [v6]:port or [v6]
        address, _, rest = entry[1:].partition("]")
        port_text = rest[1:] if rest.startswith(":") else ""
        return address, int(port_text) if port_text.isdigit() else None
    if entry.count(":") == 1:
        name, _, port_text = entry.partition(":")
        if port_text.isdigit():
            return name.rstrip("."), int(port_text)
    return entry.rstrip("."), None


async def _resolve(host: str, port: int, seconds: float) -> list[IpAddress]:
    """The addresses ``host`` resolves to; empty when it does not resolve in time."""
    loop = asyncio.get_running_loop()
    try:
        async with asyncio.timeout(seconds):
            infos = await loop.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except (OSError, TimeoutError, UnicodeError) as exc:
        logger.debug("host %s did not resolve: %s", host, exc)
        return []
    addresses: list[IpAddress] = []
    for _family, _type, _proto, _name, sockaddr in infos:
        literal = _ip_literal(str(sockaddr[0]))
        if literal is not None:
            addresses.append(literal)
    return addresses
