"""EgressPolicy: which URLs the gateway refuses to connect to, and why.

With the two policies the gateway uses: MCP ``server_url``s (``McpPolicy.egress()``: allowed
hosts, no metadata or link-local addresses) and web search pages (public addresses only).

No test depends on outside DNS: names are either numeric spellings the resolver turns into
addresses by itself, ``localhost``, a reserved ``.invalid`` name, or checked with
``allow_link_local=True`` (which skips resolution) when only the allowed-hosts rules matter.
"""

from __future__ import annotations

import ipaddress

import pytest

from app.net.egress import METADATA_AND_LINK_LOCAL, PUBLIC_ONLY, AddressClass, EgressPolicy
from app.tools.mcp.servers import McpPolicy


async def check(
    url: str, allowed_hosts: list[str] | None = None, allow_link_local: bool = False
) -> str | None:
    policy = McpPolicy(allowed_hosts=allowed_hosts or [], allow_link_local=allow_link_local)
    return await policy.egress().refusal(url)


async def page_allowed(url: str, *, allow_private: bool) -> bool:
    policy = EgressPolicy(refused=frozenset() if allow_private else PUBLIC_ONLY)
    return await policy.refusal(url) is None


# ----------------------------------------------------------------------------- MCP server URLs


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


def test_mcp_policy_refuses_metadata_and_link_local_only() -> None:
    assert McpPolicy().egress().refused == METADATA_AND_LINK_LOCAL
    assert McpPolicy(allow_link_local=True).egress().refused == frozenset()


# ----------------------------------------------------------------------------- web pages


async def test_page_addresses() -> None:
    assert await page_allowed("https://93.184.215.14/x", allow_private=False)
    assert await page_allowed("http://[::ffff:93.184.215.14]/x", allow_private=False)
    for url in (
        "http://127.0.0.1/",
        "http://10.1.2.3/",
        "http://169.254.169.254/latest/meta-data",
        "http://100.64.1.1/",
        "http://224.0.0.1/",
        "http://0.0.0.0/",
        "http://[::1]:8080/",
        "http://[::ffff:192.168.0.1]/",
        "http://[fd00::1]/",
        "http://localhost/",
        "http://2130706433/",  # 127.0.0.1
        "http://does-not-exist.invalid/",  # does not resolve: refused for pages
        "ftp://example.com/",
        "not a url",
    ):
        assert not await page_allowed(url, allow_private=False), url
    assert await page_allowed("http://127.0.0.1/", allow_private=True)
    assert not await page_allowed("ftp://127.0.0.1/", allow_private=True)


@pytest.mark.parametrize(
    ("address", "reason"),
    [
        ("169.254.169.254", "a cloud metadata address"),
        ("169.254.1.1", "a link-local address"),
        ("fe80::1", "a link-local address"),
        ("127.0.0.1", "a loopback address"),
        ("::1", "a loopback address"),
        ("0.0.0.0", "an unspecified address"),
        ("10.1.2.3", "a private address"),
        ("::ffff:192.168.0.1", "a private address"),
        ("240.0.0.1", "a private address"),
        ("224.0.0.1", "a multicast address"),
        ("ff02::1", "a multicast address"),
        ("100.64.1.1", "not a public address"),
        ("93.184.215.14", None),
        ("2606:2800:220:1:248:1893:25c8:1946", None),
    ],
)
def test_address_reasons_of_the_public_only_policy(address: str, reason: str | None) -> None:
    refusal = EgressPolicy().address_refusal(ipaddress.ip_address(address))
    if reason is None:
        assert refusal is None
    else:
        assert refusal == f"{ipaddress.ip_address(address)} is {reason}"


async def test_unresolved_names_are_refused_unless_allowed() -> None:
    url = "http://does-not-exist.invalid/"
    assert await EgressPolicy().refusal(url) == "host does-not-exist.invalid does not resolve"
    assert await EgressPolicy(allow_unresolved=True).refusal(url) is None


async def test_allowed_hosts_name_their_purpose() -> None:
    policy = EgressPolicy(allowed_hosts=("a.example.com",), refused=frozenset(), purpose="page")
    assert await policy.refusal("https://b.example.com/") == (
        "host b.example.com is not in the gateway's allowed page hosts"
    )


def test_every_address_class_is_in_the_public_only_policy() -> None:
    assert frozenset(AddressClass) == PUBLIC_ONLY
