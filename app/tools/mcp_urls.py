"""Safety checks for the ``server_url`` of an MCP tool supplied in a request.

A request can name any MCP server, and the gateway connects to it from inside its own network,
so a URL is refused when it points at a cloud metadata service or a link-local address (the
classic server-side request forgery targets), and, when the operator configured
``mcp.allowed_hosts``, when its host is not on that list. Loopback and private addresses are
allowed: users run MCP servers beside the gateway.

Names are resolved to catch names (and numeric spellings such as ``2852039166``) that lead to a
refused address; a name that does not resolve is not refused here (connecting will fail and be
reported as a tool error). The check is made before connecting, so a name whose DNS answer
changes in between is not caught: operators who need a hard boundary set ``allowed_hosts``.
"""

from __future__ import annotations

import asyncio
import ipaddress
import logging
import socket
from collections.abc import Sequence
from urllib.parse import unquote, urlsplit

logger = logging.getLogger(__name__)

IpAddress = ipaddress.IPv4Address | ipaddress.IPv6Address

RESOLVE_TIMEOUT = 2.0
"""Seconds to wait for a hostname to resolve before accepting it unresolved."""

_LINK_LOCAL = (ipaddress.ip_network("169.254.0.0/16"), ipaddress.ip_network("fe80::/10"))
_METADATA_ADDRESSES = frozenset(
    ipaddress.ip_address(address)
    for address in ("169.254.169.254", "fd00:ec2::254", "100.100.100.200")
)
_METADATA_NAMES = frozenset({"metadata.google.internal", "metadata"})
_DEFAULT_PORTS = {"http": 80, "https": 443}


async def check_server_url(
    url: str,
    *,
    allowed_hosts: Sequence[str] | None,
    allow_link_local: bool,
    resolve_timeout: float = RESOLVE_TIMEOUT,
) -> str | None:
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

    if allowed_hosts and not any(
        _host_matches(entry, host, effective_port) for entry in allowed_hosts
    ):
        return f"host {host} is not in the gateway's allowed MCP hosts"

    if allow_link_local:
        return None
    if host in _METADATA_NAMES:
        return f"host {host} is a cloud metadata service"
    literal = _ip_literal(host)
    if literal is not None:
        return _refused_address(literal)
    for address in await _resolve(host, effective_port, resolve_timeout):
        reason = _refused_address(address)
        if reason is not None:
            return f"host {host} resolves to a refused address: {reason}"
    return None


def _normalize_host(host: str) -> str:
    return unquote(host).strip().lower().rstrip(".")


def _ip_literal(host: str) -> IpAddress | None:
    try:
        return ipaddress.ip_address(host)
    except ValueError:
        pass
    # An IPv6 literal with a zone (fe80::1%eth0): the address without it.
    address, sep, _zone = host.partition("%")
    if sep:
        try:
            return ipaddress.ip_address(address)
        except ValueError:
            return None
    return None


def _refused_address(address: IpAddress) -> str | None:
    """Why connecting to ``address`` is refused (metadata service, link-local), or None."""
    candidates: list[IpAddress] = [address]
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        candidates.append(address.ipv4_mapped)
    for candidate in candidates:
        if candidate in _METADATA_ADDRESSES:
            return f"{address} is a cloud metadata address"
        if any(candidate in network for network in _LINK_LOCAL):
            return f"{address} is a link-local address"
    return None


def _host_matches(entry: str, host: str, port: int) -> bool:
    """Whether ``host``:``port`` matches one ``allowed_hosts`` entry.

    Entries: ``example.com`` (exact, any port), ``*.example.com`` (any subdomain, not the
    domain itself), optionally with ``:port`` (``[::1]:8080`` for IPv6), compared without case.
    """
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
        logger.debug("MCP server host %s did not resolve: %s", host, exc)
        return []
    addresses: list[IpAddress] = []
    for _family, _type, _proto, _name, sockaddr in infos:
        literal = _ip_literal(str(sockaddr[0]))
        if literal is not None:
            addresses.append(literal)
    return addresses
