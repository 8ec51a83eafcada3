"""``[egress]``: where the gateway may connect on a client's behalf (``app.net.egress``).

One policy for a request's MCP ``server_url``, the configured MCP servers, web search page
fetches and backend, the ``rest`` tool engine, and every redirect of those. By default only
public addresses; the allow-lists open more. Cloud metadata addresses are refused always.
"""

from __future__ import annotations

import ipaddress

from pydantic import BaseModel, ConfigDict, Field, field_validator

from app.net.egress import RESOLVE_TIMEOUT, EgressPolicy, parse_host_entry


class EgressSettings(BaseModel):
    """The egress policy's settings (``[egress]``)."""

    model_config = ConfigDict(extra="forbid")

    # Connect to any public (globally routable) address. False: only what allow_hosts and
    # allow_networks name.
    allow_public: bool = True
    # Host names allowed whatever they resolve to: "mcp.internal", "*.svc.cluster.local"
    # (any subdomain), "localhost:8000", "[::1]:8080" (an optional :port limits the entry).
    allow_hosts: list[str] = Field(default_factory=list)
    # Address ranges allowed (CIDR): "10.0.0.0/8", "127.0.0.1/32", "fd00::/8".
    allow_networks: list[str] = Field(default_factory=list)
    # When not empty, the only ports connected to (an allow_hosts entry with a port, and the
    # destinations the operator configured, keep their own).
    allow_ports: list[int] = Field(default_factory=list)
    # Seconds a host name may take to resolve; one that does not is refused.
    resolve_timeout: float = Field(default=RESOLVE_TIMEOUT, gt=0, le=60)

    @field_validator("allow_hosts")
    @classmethod
    def _hosts(cls, value: list[str]) -> list[str]:
        for entry in value:
            parse_host_entry(entry)
        return value

    @field_validator("allow_networks")
    @classmethod
    def _networks(cls, value: list[str]) -> list[str]:
        for entry in value:
            try:
                ipaddress.ip_network(entry.strip(), strict=False)
            except ValueError:
                raise ValueError(f"{entry!r} is not a network (CIDR, e.g. 10.0.0.0/8)") from None
        return [entry.strip() for entry in value]

    @field_validator("allow_ports")
    @classmethod
    def _ports(cls, value: list[int]) -> list[int]:
        for port in value:
            if not 0 < port < 65536:
                raise ValueError(f"{port} is not a TCP port (1-65535)")
        return value

    def policy(self) -> EgressPolicy:
        """The policy these settings describe (a value: no connection is made)."""
        return EgressPolicy.of(
            allow_public=self.allow_public,
            allow_hosts=self.allow_hosts,
            allow_networks=self.allow_networks,
            allow_ports=self.allow_ports,
            resolve_timeout=self.resolve_timeout,
        )
