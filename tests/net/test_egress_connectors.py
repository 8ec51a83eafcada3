"""The egress policy where connections are made: aiohttp's ``EgressConnector`` (web search,
rest engine), httpx2's ``egress_transport`` (the MCP SDK) and the web search page fetch, against
real servers on this machine.

Two servers run on 127.0.0.1: ``allowed`` (the only host:port the policies here allow, besides
what a test adds) and ``refused`` (another port: not allowed). Names resolve through
``MemoryResolver``, so a test decides what a name answers, lookup by lookup.
"""

from __future__ import annotations

import contextlib
import ssl
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field

import aiohttp
import httpx2
import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import PlainTextResponse, RedirectResponse, Response
from starlette.routing import Route

from app.net.egress import EgressPolicy, EgressRefused
from app.net.egress_aiohttp import egress_session
from app.net.egress_httpx import egress_transport
from app.net.resolver import MemoryResolver
from app.tools.web_search.pages import PageFetcher
from tests.helpers import local_policy, serve_in_thread

PUBLIC = "93.184.215.14"


@dataclass
class Site:
    """A server that counts what reaches it: ``/page`` (text), ``/to?url=...`` (a 302)."""

    url: str = ""
    hits: list[str] = field(default_factory=list)
    hosts: list[str] = field(default_factory=list)

    def app(self) -> Starlette:
        async def page(request: Request) -> Response:
            self.hits.append(request.url.path)
            self.hosts.append(request.headers.get("host", ""))
            return PlainTextResponse("a page of text")

        async def to(request: Request) -> Response:
            self.hits.append(request.url.path)
            return RedirectResponse(request.query_params["url"], status_code=302)

        return Starlette(routes=[Route("/page", page), Route("/to", to)])

    @property
    def port(self) -> int:
        return int(self.url.rsplit(":", 1)[1])


@contextlib.contextmanager
def running() -> Iterator[Site]:
    site = Site()
    with serve_in_thread(site.app()) as url:
        site.url = url
        yield site


@pytest.fixture(scope="module")
def sites() -> Iterator[tuple[Site, Site]]:
    with running() as allowed, running() as refused:
        yield allowed, refused


@pytest.fixture
def allowed(sites: tuple[Site, Site]) -> Site:
    sites[0].hits.clear()
    sites[0].hosts.clear()
    return sites[0]


@pytest.fixture
def refused(sites: tuple[Site, Site]) -> Site:
    sites[1].hits.clear()
    return sites[1]


def only(site: Site, resolver: MemoryResolver | None = None) -> EgressPolicy:
    """The default policy, allowing ``site``'s host:port too (and names ``resolver`` knows)."""
    policy = EgressPolicy.of(allow_hosts=[f"127.0.0.1:{site.port}"])
    return policy.with_resolver(resolver) if resolver is not None else policy


@contextlib.asynccontextmanager
async def aiohttp_client(policy: EgressPolicy) -> AsyncIterator[aiohttp.ClientSession]:
    session = egress_session(policy)
    try:
        yield session
    finally:
        await session.close()


@contextlib.asynccontextmanager
async def httpx_client(policy: EgressPolicy) -> AsyncIterator[httpx2.AsyncClient]:
    transport = egress_transport(policy, verify=ssl.create_default_context())
    async with httpx2.AsyncClient(transport=transport, follow_redirects=True) as client:
        yield client


async def aiohttp_get(policy: EgressPolicy, url: str) -> str:
    async with aiohttp_client(policy) as session, session.get(url) as reply:
        return await reply.text()


async def httpx_get(policy: EgressPolicy, url: str) -> str:
    async with httpx_client(policy) as client:
        reply = await client.get(url)
        return reply.text


def refused_by_policy(exc: BaseException) -> bool:
    """Whether the policy is what stopped the connection (its reason is the cause)."""
    seen: BaseException | None = exc
    while seen is not None:
        if isinstance(seen, EgressRefused):
            return True
        seen = seen.__cause__ or seen.__context__
    return False


# ----------------------------------------------------------------------------- the default


async def test_loopback_is_refused_by_default_and_reached_when_allow_listed(allowed: Site) -> None:
    url = f"{allowed.url}/page"
    with pytest.raises(aiohttp.ClientConnectorError) as caught:
        await aiohttp_get(EgressPolicy(), url)
    assert refused_by_policy(caught.value)
    with pytest.raises(httpx2.ConnectError) as refused_httpx:
        await httpx_get(EgressPolicy(), url)
    assert refused_by_policy(refused_httpx.value)
    assert allowed.hits == []

    assert await aiohttp_get(local_policy(), url) == "a page of text"
    assert await httpx_get(local_policy(), url) == "a page of text"
    assert allowed.hits == ["/page", "/page"]


async def test_a_trusted_destination_is_reached_under_the_default_policy(allowed: Site) -> None:
    trusted = EgressPolicy().trusting(f"{allowed.url}/anything")
    assert await aiohttp_get(trusted, f"{allowed.url}/page") == "a page of text"
    assert await httpx_get(trusted, f"{allowed.url}/page") == "a page of text"


# ----------------------------------------------------------------------------- redirects


async def test_a_redirect_to_a_refused_address_is_not_followed(
    allowed: Site, refused: Site
) -> None:
    """Every hop is a connection of its own, checked: the allowed server's redirect to the
    refused one ends there, for aiohttp and httpx2 following redirects by themselves."""
    hop = f"{allowed.url}/to?url={refused.url}/page"
    with pytest.raises(aiohttp.ClientConnectorError) as caught:
        await aiohttp_get(only(allowed), hop)
    assert refused_by_policy(caught.value)
    with pytest.raises(httpx2.ConnectError) as refused_httpx:
        await httpx_get(only(allowed), hop)
    assert refused_by_policy(refused_httpx.value)
    assert allowed.hits == ["/to", "/to"]
    assert refused.hits == []
    # a redirect that stays where the policy allows is followed
    assert await aiohttp_get(only(allowed), f"{allowed.url}/to?url=/page") == "a page of text"


async def test_the_page_fetch_checks_each_hop(allowed: Site, refused: Site) -> None:
    async with aiohttp_client(only(allowed)) as session:
        pages = PageFetcher(lambda: session, fetch_pages=1)
        assert await pages.fetch(f"{allowed.url}/to?url={refused.url}/page", 1000) is None
        assert await pages.fetch(f"{allowed.url}/to?url=/page", 1000) == "a page of text"
    assert refused.hits == []


async def test_a_loopback_page_is_not_fetched_by_default_and_fetched_when_allow_listed(
    allowed: Site,
) -> None:
    async with aiohttp_client(EgressPolicy()) as session:
        assert await PageFetcher(lambda: session, fetch_pages=1).fetch(allowed.url, 100) is None
    assert allowed.hits == []
    async with aiohttp_client(local_policy()) as session:
        pages = PageFetcher(lambda: session, fetch_pages=1)
        assert await pages.fetch(f"{allowed.url}/page", 100) == "a page of text"


# ----------------------------------------------------------------------------- the address


async def test_the_connection_goes_to_the_address_checked(allowed: Site) -> None:
    """A name is resolved by the policy and the connection made to that address, with the
    name kept for the request (Host, and SNI over TLS)."""
    resolver = MemoryResolver({"site.test": [["127.0.0.1"]]})
    policy = EgressPolicy.of(allow_networks=["127.0.0.0/8"], resolver=resolver)
    url = f"http://site.test:{allowed.port}/page"
    assert await aiohttp_get(policy, url) == "a page of text"
    assert await httpx_get(policy, url) == "a page of text"
    assert allowed.hosts == [f"site.test:{allowed.port}"] * 2
    assert resolver.lookups == ["site.test", "site.test"]


@pytest.mark.parametrize("client", ["aiohttp", "httpx2"])
async def test_dns_rebinding_does_not_get_through(allowed: Site, client: str) -> None:
    """The name answers a public address first and the server's loopback address next: an
    earlier check passes, yet the connection makes its own lookup, checks it and is refused.
    A name that answers both at once is refused the first time."""
    resolver = MemoryResolver(
        {"rebind.test": [[PUBLIC], ["127.0.0.1"]], "both.test": [[PUBLIC, "127.0.0.1"]]}
    )
    policy = EgressPolicy().with_resolver(resolver)
    get = aiohttp_get if client == "aiohttp" else httpx_get
    failure = aiohttp.ClientConnectorError if client == "aiohttp" else httpx2.ConnectError

    url = f"http://rebind.test:{allowed.port}/page"
    assert [str(a) for a in await policy.check_url(url)] == [PUBLIC]  # the earlier check
    with pytest.raises(failure) as caught:
        await get(policy, url)
    assert refused_by_policy(caught.value)
    with pytest.raises(failure):
        await get(policy, f"http://both.test:{allowed.port}/page")
    assert resolver.lookups == ["rebind.test", "rebind.test", "both.test"]
    assert allowed.hits == []


async def test_a_name_that_does_not_resolve_in_time_is_refused(allowed: Site) -> None:
    resolver = MemoryResolver(hang=["slow.test"])
    policy = EgressPolicy.of(allow_hosts=["slow.test"], resolve_timeout=0.2, resolver=resolver)
    with pytest.raises(aiohttp.ClientConnectorError) as caught:
        await aiohttp_get(policy, f"http://slow.test:{allowed.port}/page")
    assert refused_by_policy(caught.value)
    assert "did not resolve within 0.2 s" in str(caught.value)
