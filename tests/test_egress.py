"""The egress policy (``app.net.egress``): which destinations the gateway connects to, and the
addresses it connects to there. The connectors that use it (aiohttp, httpx2) are tested against
real servers in tests/net/test_egress_connectors.py.

No test depends on outside DNS: names resolve through ``MemoryResolver`` (the policy's
resolver port, in memory), or are numeric spellings and ``localhost``, which the system resolver
answers by itself (the memory resolver's fallback).
"""

from __future__ import annotations

import ipaddress

import pytest
from pydantic import ValidationError

from app.net.egress import (
    EgressPolicy,
    EgressRefused,
    destination,
    parse_host_entry,
    url_problem,
)
from app.net.resolver import MemoryResolver, SystemResolver
from app.options.egress import EgressSettings
from app.settings import Settings

NAMES = {
    "public.test": [["93.184.215.14"]],
    "public6.test": [["2606:2800:220:1:248:1893:25c8:1946"]],
    "loopback.test": [["127.0.0.1"]],
    "private.test": [["10.1.2.3"]],
    "mixed.test": [["93.184.215.14", "10.1.2.3"]],
    "metadata.test": [["93.184.215.14", "169.254.169.254"]],
    "mcp.example.com": [["10.0.0.5"]],
    "a.example.com": [["10.0.0.6"]],
    "a.b.example.com": [["10.0.0.7"]],
    "example.com": [["10.0.0.8"]],
    "badexample.com": [["10.0.0.9"]],
    "mcp.example.com.evil.net": [["10.0.0.10"]],
}


def policy(**settings: object) -> EgressPolicy:
    resolver = MemoryResolver(NAMES, fallback=SystemResolver())  # localhost, 2130706433
    return EgressSettings(**settings).policy().with_resolver(resolver)  # type: ignore[arg-type]


async def refusal(url: str, **settings: object) -> str | None:
    try:
        await policy(**settings).check_url(url)
    except EgressRefused as exc:
        return str(exc)
    return None


# ----------------------------------------------------------------------------- the default


@pytest.mark.parametrize(
    "url",
    [
        "https://public.test/x",
        "http://public6.test:8080/x",
        "https://93.184.215.14/x",
        "http://[::ffff:93.184.215.14]/x",
        "HTTPS://PUBLIC.TEST./x",
    ],
)
async def test_public_addresses_are_allowed_by_default(url: str) -> None:
    assert await refusal(url) is None


@pytest.mark.parametrize(
    ("url", "reason"),
    [
        ("http://127.0.0.1:8000/mcp", "127.0.0.1 is a loopback address"),
        ("http://[::1]:8080/mcp", "::1 is a loopback address"),
        ("http://localhost:3001/mcp", "a loopback address"),
        ("http://loopback.test/", "loopback.test: 127.0.0.1 is a loopback address"),
        ("https://10.1.2.3/mcp", "10.1.2.3 is a private address"),
        ("http://192.168.1.20:9000/sse", "a private address"),
        ("http://[::ffff:192.168.0.1]/", "a private address"),
        ("http://[fd00::1]/", "a private address"),
        ("http://private.test/", "10.1.2.3 is a private address"),
        ("http://169.254.10.20:8080/mcp", "a link-local address"),
        ("http://[fe80::1%25eth0]/mcp", "a link-local address"),
        ("http://0.0.0.0/", "an unspecified address"),
        ("http://224.0.0.1/", "a multicast address"),
        ("http://100.64.1.1/", "not a public address"),
        ("http://2130706433/", "127.0.0.1 is a loopback address"),  # the OS resolves it
        ("http://does-not-exist.test/", "does-not-exist.test does not resolve"),
        ("ftp://public.test/", "the scheme must be http or https"),
        ("http:///mcp", "the URL has no host"),
        ("http://public.test:99999/", "not a valid URL"),
    ],
)
async def test_everything_else_is_refused_by_default(url: str, reason: str) -> None:
    found = await refusal(url)
    assert found is not None and reason in found


async def test_every_address_of_a_name_is_checked() -> None:
    """A name with a public and a private address is refused: the connection may take either."""
    assert await refusal("http://mixed.test/") == "mixed.test: 10.1.2.3 is a private address"


@pytest.mark.parametrize(
    "url",
    [
        "http://169.254.169.254/latest/meta-data/",
        "http://[fd00:ec2::254]/latest",
        "http://100.100.100.200/latest/meta-data",
        "http://[::ffff:169.254.169.254]/",
        "http://metadata.google.internal/computeMetadata/v1/",
        "http://METADATA.google.internal./",
        "http://metadata/computeMetadata/v1/",
        "http://2852039166/latest",  # 169.254.169.254, resolved by the OS
        "http://0xa9fea9fe/latest",
        "http://metadata.test/",
    ],
)
async def test_metadata_is_refused_whatever_the_allow_lists_say(url: str) -> None:
    wide = {
        "allow_hosts": ["*.internal", "metadata", "metadata.test", "169.254.169.254"],
        "allow_networks": ["0.0.0.0/0", "::/0"],
    }
    found = await refusal(url, **wide)
    assert found is not None and "metadata" in found
    trusted = policy(**wide).trusting(url)
    with pytest.raises(EgressRefused, match="metadata"):
        await trusted.check_url(url)


# ----------------------------------------------------------------------------- allow-lists


@pytest.mark.parametrize(
    ("allow_hosts", "url", "allowed"),
    [
        (["mcp.example.com"], "https://mcp.example.com/mcp", True),
        (["mcp.example.com"], "https://MCP.Example.COM:8443/mcp", True),
        (["MCP.example.com"], "https://mcp.example.com/mcp", True),
        (["mcp.example.com"], "https://mcp.example.com./mcp", True),
        (["mcp.example.com"], "https://example.com/mcp", False),
        (["mcp.example.com"], "https://mcp.example.com.evil.net/mcp", False),
        (["mcp.example.com"], "https://mcp.example.com@example.com/mcp", False),
        (["*.example.com"], "https://a.example.com/mcp", True),
        (["*.example.com"], "https://a.b.example.com/mcp", True),
        (["*.example.com"], "https://example.com/mcp", False),
        (["*.example.com"], "https://badexample.com/mcp", False),
        (["example.com:8443"], "https://example.com:8443/mcp", True),
        (["example.com:8443"], "https://example.com/mcp", False),
        (["example.com:443"], "https://example.com/mcp", True),
        (["*.example.com:8443"], "https://a.example.com:9443/mcp", False),
        (["localhost"], "http://localhost:3001/mcp", True),
        (["127.0.0.1"], "http://127.0.0.1:3001/mcp", True),
        (["127.0.0.1"], "http://10.0.0.1/mcp", False),
        (["[::1]:8080"], "http://[::1]:8080/mcp", True),
        (["[::1]:8080"], "http://[::1]:8081/mcp", False),
        (["::1"], "http://[::1]:8081/mcp", True),
        (["a.example.com", "example.com"], "https://example.com/mcp", True),
    ],
)
async def test_allow_hosts(allow_hosts: list[str], url: str, allowed: bool) -> None:
    found = await refusal(url, allow_hosts=allow_hosts)
    assert (found is None) is allowed, found


async def test_allow_networks() -> None:
    networks = ["10.0.0.0/8", "::1/128"]
    assert await refusal("http://10.1.2.3/", allow_networks=networks) is None
    assert await refusal("http://private.test/", allow_networks=networks) is None
    assert await refusal("http://[::1]:9/", allow_networks=networks) is None
    assert await refusal("http://[::ffff:10.9.9.9]/", allow_networks=networks) is None
    assert await refusal("http://127.0.0.1/", allow_networks=networks) is not None
    assert await refusal("http://192.168.0.1/", allow_networks=networks) is not None
    assert await refusal("http://mixed.test/", allow_networks=networks) is None


async def test_allow_ports_limits_every_destination_but_named_ones() -> None:
    ports = {"allow_ports": [443]}
    assert await refusal("https://public.test/", **ports) is None
    found = await refusal("http://public.test:5432/", **ports)
    assert found == "port 5432 is not in [egress] allow_ports"
    named = {**ports, "allow_hosts": ["mcp.example.com:8000", "a.example.com"]}
    assert await refusal("http://mcp.example.com:8000/", **named) is None
    assert await refusal("http://a.example.com:8000/", **named) is not None  # no port named
    assert await refusal("https://a.example.com/", **named) is None


async def test_allow_public_off_leaves_only_the_allow_lists() -> None:
    closed = {"allow_public": False, "allow_hosts": ["a.example.com"]}
    found = await refusal("https://public.test/", **closed)
    assert found is not None and "allow_public is off" in found
    assert await refusal("https://a.example.com/", **closed) is None


async def test_a_trusted_destination_is_exactly_the_host_and_port_written() -> None:
    trusted = policy().trusting("http://loopback.test:8080/mcp", None, "not a url")
    assert await trusted.check_url("http://loopback.test:8080/other/path") == [
        ipaddress.ip_address("127.0.0.1")
    ]
    for url in ("http://loopback.test:8081/", "http://loopback.test/", "http://127.0.0.1:8080/"):
        with pytest.raises(EgressRefused):
            await trusted.check_url(url)
    assert trusted.trusting("http://loopback.test:8080/") is trusted


# ----------------------------------------------------------------------------- resolution


async def test_the_addresses_returned_are_the_ones_checked_on_each_lookup() -> None:
    """DNS rebinding: a name that answers a public address first and a private one next.
    Each check is one lookup and returns what it checked; the second is refused."""
    resolver = MemoryResolver({"rebind.test": [["93.184.215.14"], ["127.0.0.1"]]})
    rebinding = EgressPolicy().with_resolver(resolver)
    assert await rebinding.addresses("rebind.test", 80) == [ipaddress.ip_address("93.184.215.14")]
    with pytest.raises(EgressRefused, match=r"127\.0\.0\.1 is a loopback address"):
        await rebinding.addresses("rebind.test", 80)
    assert resolver.lookups == ["rebind.test", "rebind.test"]


async def test_a_name_that_does_not_resolve_in_time_is_refused() -> None:
    slow = EgressPolicy(resolve_timeout=0.05).with_resolver(MemoryResolver(hang=["slow.test"]))
    with pytest.raises(EgressRefused, match=r"slow\.test did not resolve within 0\.05 s"):
        await slow.addresses("slow.test", 443)


async def test_the_system_resolver_answers_localhost() -> None:
    found = await SystemResolver().resolve("localhost", 80)
    assert found and all(address.is_loopback for address in found)


# ----------------------------------------------------------------------------- settings


def test_url_forms() -> None:
    assert destination("HTTPS://Example.COM./x") == ("example.com", 443)
    assert destination("http://[::1]:8080/") == ("::1", 8080)
    assert url_problem("https://example.com/") is None
    assert url_problem("file:///etc/passwd") == "the scheme must be http or https"


@pytest.mark.parametrize(
    ("entry", "parsed"),
    [
        ("Example.COM", ("example.com", None)),
        ("*.svc.cluster.local:8443", ("*.svc.cluster.local", 8443)),
        ("[::1]:8080", ("::1", 8080)),
        ("::1", ("::1", None)),
        ("[0:0::1]", ("::1", None)),
        ("127.0.0.1:9000", ("127.0.0.1", 9000)),
    ],
)
def test_host_entries(entry: str, parsed: tuple[str, int | None]) -> None:
    assert parse_host_entry(entry) == parsed


@pytest.mark.parametrize(
    "values",
    [
        {"allow_hosts": ["http://example.com"]},
        {"allow_hosts": ["example.com:http"]},
        {"allow_hosts": ["a.*.example.com"]},
        {"allow_hosts": ["example.com:0"]},
        {"allow_networks": ["10.0.0.0/33"]},
        {"allow_networks": ["intranet"]},
        {"allow_ports": [0]},
        {"resolve_timeout": 0},
        {"allow_private": True},
    ],
)
def test_bad_egress_settings_stop_start_up(values: dict[str, object]) -> None:
    with pytest.raises(ValidationError):
        Settings(egress=values)  # type: ignore[arg-type]


def test_egress_settings_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RESPGATE_EGRESS__ALLOW_NETWORKS", '["10.0.0.0/8"]')
    monkeypatch.setenv("RESPGATE_EGRESS__ALLOW_PUBLIC", "false")
    egress = Settings().egress
    assert (egress.allow_public, egress.allow_networks) == (False, ["10.0.0.0/8"])
    assert Settings(egress={"allow_networks": [" 10.0.0.1/8 "]}).egress.policy().allow_networks == (  # type: ignore[arg-type]
        ipaddress.ip_network("10.0.0.0/8"),
    )


@pytest.mark.parametrize("key", ["allowed_hosts", "allow_link_local"])
def test_the_former_mcp_address_keys_stop_start_up_with_what_to_write(key: str) -> None:
    with pytest.raises(ValidationError, match=rf"\[mcp\] {key} was removed.*\[egress\]"):
        Settings(mcp={key: ["mcp.example.com"] if key == "allowed_hosts" else True})  # type: ignore[arg-type]
