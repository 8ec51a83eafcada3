"""The egress policy: where the gateway may connect on a client's behalf.

Every outbound connection a request can steer goes through one ``EgressPolicy``: a request's
MCP ``server_url``, the MCP servers the operator configured, web search page fetches, the web
search backend, the ``rest`` tool engine, and every redirect of those. The policy is the
``[egress]`` settings group (``app.options.egress``):

- by default only **public** addresses (``allow_public``; false: nothing but the allow-lists);
- ``allow_hosts``: names (``mcp.internal``, ``*.svc.cluster.local`` for any subdomain, with an
  optional ``:port``; ``[::1]:8080`` for IPv6) allowed whatever they resolve to;
- ``allow_networks``: address ranges (CIDR) allowed (``10.0.0.0/8``, ``127.0.0.1/32``);
- ``allow_ports``: when not empty, the only ports (a host entry that names its port is
  allowed on that port);
- cloud **metadata** services (169.254.169.254, fd00:ec2::254, 100.100.100.200, and their
  names) are refused always, in every spelling;
- ``trusted`` destinations: the exact ``host:port`` an operator wrote (a configured MCP
  server, a REST binding, the web search backend) are allowed whatever their address; a
  redirect elsewhere is judged like any other destination.

The address checked is the address connected to: ``addresses(host, port)`` resolves a name
once (through the policy's ``Resolver``, within ``resolve_timeout``), checks **every** address
and returns them; the connectors (``egress_aiohttp``, ``egress_httpx``) connect to those
addresses and nothing else, for every connection, redirects included. A name that answers a
public address and then a private one (DNS rebinding) therefore never reaches the private one,
and a name that does not resolve in time is refused. ``EgressRefused`` carries the reason for
the gateway's log; what a client is told does not depend on it (the callers give one message
for a refusal, a closed port, a timeout and a name that does not resolve).
"""

from __future__ import annotations

import asyncio
import enum
import ipaddress
import logging
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from urllib.parse import unquote, urlsplit

from app.net.resolver import IpAddress, Resolver, SystemResolver, ip_literal

logger = logging.getLogger(__name__)

IpNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network

RESOLVE_TIMEOUT = 2.0
"""Seconds a host name may take to resolve."""

METADATA_ADDRESSES = frozenset(
    ipaddress.ip_address(address)
    for address in ("169.254.169.254", "fd00:ec2::254", "100.100.100.200")
)
METADATA_NAMES = frozenset({"metadata.google.internal", "metadata"})
DEFAULT_PORTS = {"http": 80, "https": 443}


class EgressRefused(OSError):
    """A connection the policy refuses. An ``OSError``, so the HTTP clients treat it as a
    connection that failed; ``str()`` (and ``strerror``, which aiohttp shows) is the reason,
    for the gateway's log only."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.strerror = reason


class AddressClass(enum.Enum):
    """A kind of address that is not public; the value completes "<address> is ..."."""

    LINK_LOCAL = "a link-local address"
    LOOPBACK = "a loopback address"
    UNSPECIFIED = "an unspecified address"
    PRIVATE = "a private address"
    RESERVED = "a reserved address"
    MULTICAST = "a multicast address"
    NOT_GLOBAL = "not a public address"


_CLASS_TESTS: tuple[tuple[AddressClass, Callable[[IpAddress], bool]], ...] = (
    (AddressClass.LINK_LOCAL, lambda a: a.is_link_local),
    (AddressClass.LOOPBACK, lambda a: a.is_loopback),
    (AddressClass.UNSPECIFIED, lambda a: a.is_unspecified),
    (AddressClass.PRIVATE, lambda a: a.is_private),
    (AddressClass.RESERVED, lambda a: a.is_reserved),
    (AddressClass.MULTICAST, lambda a: a.is_multicast),
    (AddressClass.NOT_GLOBAL, lambda a: not a.is_global),
)


def url_problem(url: str) -> str | None:
    """What makes ``url`` something the gateway cannot connect to whatever the policy (not
    http(s), no host, a bad port), or None. Needs no network."""
    try:
        destination(url)
    except ValueError as exc:
        return str(exc)
    return None


def destination(url: str) -> tuple[str, int]:
    """The normalised host and the port ``url`` connects to; ValueError when it has none."""
    try:
        parts = urlsplit(url.strip())
        port = parts.port
    except ValueError as exc:
        raise ValueError(f"not a valid URL ({exc})") from None
    if parts.scheme.lower() not in DEFAULT_PORTS:
        raise ValueError("the scheme must be http or https")
    host = normalize_host(parts.hostname or "")
    if not host:
        raise ValueError("the URL has no host")
    return host, port if port is not None else DEFAULT_PORTS[parts.scheme.lower()]


def normalize_host(host: str) -> str:
    """``host`` as the policy compares it: decoded, lower case, no trailing dot, no brackets."""
    text = unquote(host).strip().lower().rstrip(".")
    if text.startswith("[") and text.endswith("]"):
        text = text[1:-1]
    return text


def parse_host_entry(entry: str) -> tuple[str, int | None]:
    """An ``allow_hosts`` entry as (pattern, port or None); ValueError when malformed."""
    text = entry.strip().lower()
    port_text = ""
    if text.startswith("["):  # [v6] or [v6]:port
        pattern, _, rest = text[1:].partition("]")
        if rest and not rest.startswith(":"):
            raise ValueError(f"{entry!r} is not a host, *.domain or [IPv6], with an optional :port")
        port_text = rest[1:]
    elif text.count(":") == 1:
        pattern, _, port_text = text.partition(":")
    else:
        pattern = text  # a name, or a bare IPv6 address
    pattern = pattern.rstrip(".")
    name = pattern[2:] if pattern.startswith("*.") else pattern
    if not name or any(c in name for c in "/@?#*[] ") or (port_text and not port_text.isdigit()):
        raise ValueError(f"{entry!r} is not a host, *.domain or [IPv6], with an optional :port")
    port = int(port_text) if port_text else None
    if port is not None and not 0 < port < 65536:
        raise ValueError(f"{entry!r}: the port must be 1-65535")
    literal = ip_literal(name)
    return (str(literal) if literal is not None else pattern), port


def _matches(pattern: str, host: str) -> bool:
    if pattern.startswith("*."):
        suffix = pattern[1:]  # ".example.com": any subdomain, not the domain itself
        return host.endswith(suffix) and len(host) > len(suffix)
    literal = ip_literal(host)
    return (str(literal) if literal is not None else host) == pattern


def _judged(address: IpAddress) -> IpAddress:
    """An IPv4-mapped IPv6 address is judged as the IPv4 address it maps."""
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        return address.ipv4_mapped
    return address


@dataclass(frozen=True, slots=True)
class EgressPolicy:
    """Where the gateway may connect (see the module docstring)."""

    allow_public: bool = True
    allow_hosts: tuple[tuple[str, int | None], ...] = ()
    allow_networks: tuple[IpNetwork, ...] = ()
    allow_ports: frozenset[int] = frozenset()
    trusted: frozenset[tuple[str, int]] = frozenset()
    resolve_timeout: float = RESOLVE_TIMEOUT
    resolver: Resolver = field(default_factory=SystemResolver, compare=False)

    @classmethod
    def of(
        cls,
        *,
        allow_public: bool = True,
        allow_hosts: tuple[str, ...] | list[str] = (),
        allow_networks: tuple[str, ...] | list[str] = (),
        allow_ports: tuple[int, ...] | list[int] = (),
        resolve_timeout: float = RESOLVE_TIMEOUT,
        resolver: Resolver | None = None,
    ) -> EgressPolicy:
        """A policy from its settings' plain values (ValueError for a malformed entry)."""
        return cls(
            allow_public=allow_public,
            allow_hosts=tuple(parse_host_entry(entry) for entry in allow_hosts),
            allow_networks=tuple(ipaddress.ip_network(n, strict=False) for n in allow_networks),
            allow_ports=frozenset(allow_ports),
            resolve_timeout=resolve_timeout,
            resolver=resolver or SystemResolver(),
        )

    def trusting(self, *urls: str | None) -> EgressPolicy:
        """This policy, also allowing the exact host:port of each of ``urls`` (destinations
        the operator wrote; None and URLs without a host are skipped)."""
        added = set(self.trusted)
        for url in urls:
            if url:
                try:
                    added.add(destination(url))
                except ValueError:
                    continue
        return self if added == self.trusted else replace(self, trusted=frozenset(added))

    def with_resolver(self, resolver: Resolver) -> EgressPolicy:
        return replace(self, resolver=resolver)

    async def check_url(self, url: str) -> list[IpAddress]:
        """The addresses to connect to for ``url``; raises ``EgressRefused``."""
        try:
            host, port = destination(url)
        except ValueError as exc:
            raise EgressRefused(str(exc)) from None
        return await self.addresses(host, port)

    async def addresses(self, host: str, port: int) -> list[IpAddress]:
        """Resolve ``host`` once and check every address; the addresses to connect to (in the
        resolver's order). Raises ``EgressRefused`` (logged here, with the reason)."""
        host = normalize_host(host)
        try:
            return await self._addresses(host, port)
        except EgressRefused as exc:
            logger.info("egress refused %s port %d: %s", host, port, exc)
            raise

    async def _addresses(self, host: str, port: int) -> list[IpAddress]:
        if host in METADATA_NAMES:
            raise EgressRefused(f"{host} is a cloud metadata service")
        trusted = (host, port) in self.trusted
        entries = [
            p for pattern, p in self.allow_hosts if _matches(pattern, host) and p in (None, port)
        ]
        allowed = trusted or bool(entries)  # whatever the addresses (metadata aside)
        if not (trusted or port in entries) and self.allow_ports and port not in self.allow_ports:
            raise EgressRefused(f"port {port} is not in [egress] allow_ports")
        literal = ip_literal(host)
        found = [literal] if literal is not None else await self._resolve(host, port)
        for address in found:
            reason = self.address_refusal(address)
            if reason is not None and (not allowed or _judged(address) in METADATA_ADDRESSES):
                raise EgressRefused(reason if literal is not None else f"{host}: {reason}")
        return found

    async def _resolve(self, host: str, port: int) -> list[IpAddress]:
        try:
            async with asyncio.timeout(self.resolve_timeout):
                found = await self.resolver.resolve(host, port)
        except TimeoutError:
            raise EgressRefused(
                f"{host} did not resolve within {self.resolve_timeout:g} s"
            ) from None
        except (OSError, UnicodeError) as exc:
            raise EgressRefused(f"{host} does not resolve ({exc})") from None
        if not found:
            raise EgressRefused(f"{host} does not resolve")
        return found

    def address_refusal(self, address: IpAddress) -> str | None:
        """Why connecting to ``address`` is refused (metadata aside), or None: it is in
        ``allow_networks``, or public and ``allow_public``."""
        judged = _judged(address)
        if judged in METADATA_ADDRESSES:
            return f"{address} is a cloud metadata address"
        if any(judged in network or address in network for network in self.allow_networks):
            return None
        for address_class, test in _CLASS_TESTS:
            if test(judged):
                return f"{address} is {address_class.value}"
        if not self.allow_public:
            return f"{address} is not in [egress] allow_networks (allow_public is off)"
        return None
