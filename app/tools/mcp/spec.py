"""Where and how to reach one MCP server: ``McpServerSpec``.

The settings build one for each server the operator configures, the provider one for a
request's ``server_url``. This module does not import the MCP SDK (heavy), so the settings can.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Literal
from urllib.parse import urlsplit

McpTransport = Literal["streamable_http", "sse", "stdio"]


@dataclass(frozen=True, slots=True)
class McpServerSpec:
    """Where and how to reach one MCP server."""

    label: str
    url: str | None = None
    """Streamable HTTP or SSE endpoint."""
    transport: McpTransport = "streamable_http"
    command: tuple[str, ...] = ()
    """stdio: the server's argv."""
    env: Mapping[str, str] = field(default_factory=dict)
    """stdio: environment variables added to the SDK's safe default environment."""
    headers: Mapping[str, str] = field(default_factory=dict)
    """HTTP headers sent on every request to the server (Authorization included)."""


def transport_for_url(url: str) -> Literal["streamable_http", "sse"]:
    """The transport an endpoint URL implies: a path ending in ``/sse`` is SSE."""
    path = urlsplit(url).path.rstrip("/")
    return "sse" if path.endswith("/sse") else "streamable_http"
