"""The SDK transport for one ``McpServerSpec``: stdio, SSE or streamable HTTP.

The HTTP transports run on httpx2 clients made here: on one TLS context shared by the process,
with the response hook that records a failed POST's HTTP status (``errors.HttpStatusBox``), and
on the egress policy's transport (``app.net.egress_httpx``): every connection, a redirect's
included, goes to an address the policy checked. Credentials in the URL's user information
(``https://user:pass@host/mcp``) are sent as a Basic ``Authorization`` header (unless the spec
has one) and never given to the SDK in the URL; the loggers of httpx2 and the SDK's HTTP
transports redact URL credentials (``app.net.redact``).
"""

from __future__ import annotations

import base64
import functools
import ssl
from typing import Any
from urllib.parse import unquote, urlsplit, urlunsplit

import certifi
import httpx2
from mcp import StdioServerParameters
from mcp.client._transport import Transport
from mcp.client.sse import sse_client
from mcp.client.stdio import stdio_client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import MCP_DEFAULT_SSE_READ_TIMEOUT, MCP_DEFAULT_TIMEOUT

from app.core.redaction import redact_logs
from app.net.egress import EgressPolicy
from app.net.egress_httpx import egress_transport
from app.tools.mcp.errors import CONNECTION_FAILED, HTTP_STATUS, McpError
from app.tools.mcp.spec import McpServerSpec

_HTTP_WRITE_TIMEOUT = 30.0


async def _record_http_status(response: httpx2.Response) -> None:
    if response.status_code < 400 or response.request.method != "POST":
        return
    box = HTTP_STATUS.get()
    if box is not None and box.status is None:
        box.status = response.status_code
        box.reason = response.reason_phrase


@functools.cache
def _tls_context() -> ssl.SSLContext:
    """One TLS context for every MCP HTTP client of the process.

    The SDK's ``create_mcp_http_client`` lets httpx2 build a context and load the CA bundle
    for each client: ~40 ms of CPU per request that names a ``server_url`` (bench/README.md,
    "Tool loop"); with this shared context a client costs ~0.4 ms.
    """
    return ssl.create_default_context(cafile=certifi.where())


def _new_http_client(
    egress: EgressPolicy,
    headers: dict[str, str] | None = None,
    timeout: httpx2.Timeout | None = None,
    auth: httpx2.Auth | None = None,
) -> httpx2.AsyncClient:
    """``create_mcp_http_client``'s client (same defaults), on the shared TLS context and the
    egress policy's transport, with the hook that records HTTP failure statuses."""
    if timeout is None:
        timeout = httpx2.Timeout(MCP_DEFAULT_TIMEOUT, read=MCP_DEFAULT_SSE_READ_TIMEOUT)
    client = httpx2.AsyncClient(
        headers=headers,
        timeout=timeout,
        auth=auth,
        transport=egress_transport(egress, verify=_tls_context()),
    )
    client.event_hooks = {"request": [], "response": [_record_http_status]}
    return client


def without_userinfo(url: str, headers: dict[str, str]) -> tuple[str, dict[str, str]]:
    """``url`` without its user information, which becomes a Basic ``Authorization`` header
    (unless ``headers`` has one)."""
    parts = urlsplit(url)
    if "@" not in parts.netloc:
        return url, headers
    userinfo, _, hostport = parts.netloc.rpartition("@")
    user, _, password = userinfo.partition(":")
    if not any(name.lower() == "authorization" for name in headers):
        pair = f"{unquote(user)}:{unquote(password)}".encode()
        headers = {**headers, "Authorization": f"Basic {base64.b64encode(pair).decode()}"}
    return urlunsplit(parts._replace(netloc=hostport)), headers


def sdk_transport(
    spec: McpServerSpec, connect_timeout: float, egress: EgressPolicy
) -> tuple[Transport, list[Any]]:
    """The SDK transport for ``spec`` and the resources to enter around it (an httpx2 client);
    HTTP connections go where ``egress`` allows."""
    if spec.transport == "stdio":
        if not spec.command:
            raise McpError.protocol(CONNECTION_FAILED, f"MCP server {spec.label} has no command")
        params = StdioServerParameters(
            command=spec.command[0], args=list(spec.command[1:]), env=dict(spec.env) or None
        )
        return stdio_client(params), []
    if not spec.url:
        raise McpError.protocol(CONNECTION_FAILED, f"MCP server {spec.label} has no URL")
    redact_logs(*_URL_LOGGERS)
    url, headers = without_userinfo(spec.url, dict(spec.headers))
    if spec.transport == "sse":

        def sse_client_factory(
            headers: dict[str, str] | None = None,
            timeout: httpx2.Timeout | None = None,
            auth: httpx2.Auth | None = None,
        ) -> httpx2.AsyncClient:
            return _new_http_client(egress, headers=headers, timeout=timeout, auth=auth)

        transport = sse_client(
            url,
            headers=headers,
            timeout=connect_timeout,
            sse_read_timeout=MCP_DEFAULT_SSE_READ_TIMEOUT,
            httpx_client_factory=sse_client_factory,
        )
        return transport, []
    timeout = httpx2.Timeout(
        _HTTP_WRITE_TIMEOUT, connect=connect_timeout, read=MCP_DEFAULT_SSE_READ_TIMEOUT
    )
    http = _new_http_client(egress, headers=headers, timeout=timeout)
    return streamable_http_client(url, http_client=http), [http]


# The loggers that write the URLs the gateway hands the SDK (httpx2: every request at INFO).
_URL_LOGGERS = ("httpx2", "mcp.client.streamable_http", "mcp.client.sse", "mcp.client._transport")
