"""check_server_url: which request-supplied MCP server URLs the gateway refuses, and why.

No test depends on outside DNS: names are either numeric spellings the resolver turns into
addresses by itself, ``localhost``, a reserved ``.invalid`` name, or checked with
``allow_link_local=True`` (which skips resolution) when only the allowed-hosts rules matter.
"""

from __future__ import annotations

import pytest

from app.tools.mcp_urls import check_server_url


async def check(
    url: str, allowed_hosts: list[str] | None = None, allow_link_local: bool = False
) -> str | None:
    return await check_server_url(
        url, allowed_hosts=allowed_hosts, allow_link_local=allow_link_local, resolve_timeout=2.0
    )


@pytest.mark.parametrize(
    "url",
    [
        "http://127.0.0.1:8000/mcp",
        "http://localhost:3001/mcp",
        "https://10.1.2.3/mcp",
        "http://192.168.1.20:9000/sse",
        "http://[::1]:8080/mcp",
        "HTTPS://127.0.0.1/mcp",
        "http://does-not-exist.invalid/mcp",  # does not resolve: not refused here
    ],
)
async def test_accepted(url: str) -> None:
    assert await check(url) is None


@pytest.mark.parametrize(
    ("url", "reason"),
    [
        ("ftp://example.com/mcp", "scheme must be http or https"),
        ("file:///etc/passwd", "scheme must be http or https"),
        ("example.com/mcp", "scheme must be http or https"),
        ("http:///mcp", "no host"),
        ("http://example.com:99999/mcp", "not a valid URL"),
        ("http://169.254.169.254/latest/meta-data/", "cloud metadata address"),
        ("http://[fd00:ec2::254]/latest", "cloud metadata address"),
        ("http://100.100.100.200/latest/meta-data", "cloud metadata address"),
        ("http://[::ffff:169.254.169.254]/", "cloud metadata address"),
        ("http://169.254.10.20:8080/mcp", "link-local address"),
        ("http://[fe80::1]/mcp", "link-local address"),
        ("http://[fe80::1%25eth0]/mcp", "link-local address"),
        ("http://metadata.google.internal/computeMetadata/v1/", "cloud metadata service"),
        ("http://METADATA.google.internal./", "cloud metadata service"),
        ("http://metadata/computeMetadata/v1/", "cloud metadata service"),
        # numeric spellings of 169.254.169.254 that the resolver turns into the address
        ("http://2852039166/latest", "resolves to a refused address"),
        ("http://0xa9fea9fe/latest", "resolves to a refused address"),
    ],
)
async def test_refused(url: str, reason: str) -> None:
    refusal = await check(url)
    assert refusal is not None
    assert reason in refusal


@pytest.mark.parametrize(
    "url",
    [
        "http://169.254.169.254/latest/meta-data/",
        "http://[fe80::1]/mcp",
        "http://metadata.google.internal/",
        "http://2852039166/",
    ],
)
async def test_allow_link_local(url: str) -> None:
    assert await check(url, allow_link_local=True) is None


@pytest.mark.parametrize(
    ("allowed_hosts", "url", "accepted"),
    [
        (["mcp.example.com"], "https://mcp.example.com/mcp", True),
        (["mcp.example.com"], "https://MCP.Example.COM:8443/mcp", True),
        (["MCP.example.com"], "https://mcp.example.com/mcp", True),
        (["mcp.example.com"], "https://mcp.example.com./mcp", True),
        (["mcp.example.com"], "https://example.com/mcp", False),
        (["mcp.example.com"], "https://mcp.example.com.evil.net/mcp", False),
        (["mcp.example.com"], "https://evil.net/?mcp.example.com", False),
        (["mcp.example.com"], "https://mcp.example.com@evil.net/mcp", False),
        (["*.example.com"], "https://a.example.com/mcp", True),
        (["*.example.com"], "https://a.b.example.com/mcp", True),
        (["*.example.com"], "https://example.com/mcp", False),
        (["*.example.com"], "https://badexample.com/mcp", False),
        (["example.com:8443"], "https://example.com:8443/mcp", True),
        (["example.com:8443"], "https://example.com/mcp", False),
        (["example.com:443"], "https://example.com/mcp", True),
        (["example.com:80"], "https://example.com/mcp", False),
        (["*.example.com:8443"], "https://a.example.com:8443/mcp", True),
        (["*.example.com:8443"], "https://a.example.com:9443/mcp", False),
        (["127.0.0.1"], "http://127.0.0.1:3001/mcp", True),
        (["127.0.0.1"], "http://10.0.0.1/mcp", False),
        (["[::1]:8080"], "http://[::1]:8080/mcp", True),
        (["[::1]:8080"], "http://[::1]:8081/mcp", False),
        (["::1"], "http://[::1]:8081/mcp", True),
        (["a.example.com", "b.example.com"], "https://b.example.com/mcp", True),
        ([], "https://anything.example.org/mcp", True),
    ],
)
async def test_allowed_hosts(allowed_hosts: list[str], url: str, accepted: bool) -> None:
    # allow_link_local skips resolution: only the allowed-hosts rules decide here
    refusal = await check(url, allowed_hosts=allowed_hosts, allow_link_local=True)
    if accepted:
        assert refusal is None
    else:
        assert refusal is not None
        assert "allowed MCP hosts" in refusal


async def test_allowed_hosts_do_not_open_metadata_addresses() -> None:
    refusal = await check("http://169.254.169.254/", allowed_hosts=["169.254.169.254"])
    assert refusal is not None
    assert "metadata" in refusal
    assert await check("http://localhost:3001/mcp", allowed_hosts=["localhost"]) is None
