"""The web search backends' clients against local servers speaking each backend's wire format."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Iterator
from typing import Any

import httpx
import pytest

from app.net.egress import EgressPolicy
from app.tools.web_search.backend import HttpSearchProvider
from app.tools.web_search.backends import create_search_provider
from app.tools.web_search.domains import domain_allowed, normalize_domains
from app.tools.web_search.pages import readable_text
from app.tools.web_search.results import (
    SearchError,
    SearchLimits,
    SearchResult,
    plain_text,
    truncate,
)
from tests.helpers import free_port, local_policy
from tests.search_servers import SearchServer, doc, serve_search

PROVIDERS = ["searxng", "tavily", "brave", "you"]


@pytest.fixture(scope="module", params=PROVIDERS)
def running(request: pytest.FixtureRequest) -> Iterator[SearchServer]:
    with serve_search(request.param) as server:
        yield server


@pytest.fixture
def server(running: SearchServer) -> Iterator[SearchServer]:
    """The module's server for one provider, reset for each test."""
    yield running
    running.reset()


def provider_for(
    server: SearchServer, egress: EgressPolicy | None = None, **limits: Any
) -> HttpSearchProvider:
    """The backend at the test server's URL: trusted (the operator's web_search_base_url)
    under the default egress policy; its pages are judged by ``egress``."""
    return create_search_provider(
        server.provider,
        base_url=server.base_url,
        api_key=server.api_key or None,
        limits=SearchLimits(**limits),
        egress=egress,
    )


@pytest.fixture
async def provider(server: SearchServer) -> AsyncIterator[HttpSearchProvider]:
    client = provider_for(server)
    yield client
    await client.aclose()


async def search(provider: HttpSearchProvider, query: str, **options: Any) -> list[SearchResult]:
    kwargs: dict[str, Any] = {
        "max_results": 5,
        "allowed_domains": None,
        "user_location": None,
        "context_size": None,
    }
    kwargs.update(options)
    return await provider.search(query, **kwargs)


# ----------------------------------------------------------------------------- the wire


async def test_query_and_count_reach_the_backend_as_it_expects(
    server: SearchServer, provider: HttpSearchProvider
) -> None:
    results = await search(provider, "potato facts", max_results=2)
    assert [r.url for r in results] == [
        "https://www.idahopotatomuseum.com/potato-facts/",  # two words match
        "https://en.wikipedia.org/wiki/Potato",
    ]
    assert results[1].title == "Potato - Wikipedia"
    assert results[1].snippet.startswith("The potato is a starchy")
    [sent] = server.requests
    if server.provider == "searxng":
        assert (sent.method, sent.path) == ("GET", "/search")
        assert sent.params["q"] == "potato facts" and sent.params["format"] == "json"
        assert "authorization" not in sent.headers
    elif server.provider == "tavily":
        assert (sent.method, sent.path) == ("POST", "/search")
        assert sent.headers["authorization"] == "Bearer test-key"
        assert sent.body["query"] == "potato facts"
        assert sent.body["max_results"] == 2
        assert sent.body["api_key"] == "test-key"
        assert sent.body["search_depth"] == "basic"
        assert "include_domains" not in sent.body
    elif server.provider == "brave":
        assert (sent.method, sent.path) == ("GET", "/res/v1/web/search")
        assert sent.headers["x-subscription-token"] == "test-key"
        assert sent.params == {"q": "potato facts", "count": "2"}
    else:
        assert (sent.method, sent.path) == ("GET", "/v1/search")
        assert sent.headers["x-api-key"] == "test-key"
        assert sent.params == {"query": "potato facts", "count": "2"}


async def test_results_are_capped_and_the_count_kept_within_the_backend_limit(
    server: SearchServer, provider: HttpSearchProvider
) -> None:
    assert len(await search(provider, "potato", max_results=1)) == 1
    assert len(await search(provider, "potato", max_results=50)) == 3
    sent = server.requests[-1]
    if server.provider == "tavily":
        assert sent.body["max_results"] == 20
    elif server.provider == "brave":
        assert sent.params["count"] == "20"
    elif server.provider == "you":
        assert sent.params["count"] == "50"
    else:
        assert "count" not in sent.params


async def test_snippets_are_plain_text_and_dates_are_kept(provider: HttpSearchProvider) -> None:
    [result] = await search(provider, "vllm releases", max_results=1)
    assert result.url == "https://github.com/vllm-project/vllm/releases"
    assert result.snippet == "vLLM v0.26.0 brings new models & faster kernels."
    assert "<" not in result.snippet
    assert result.published == "2026-10-01T12:00:00"


async def test_allowed_domains_go_to_the_backend(
    server: SearchServer, provider: HttpSearchProvider
) -> None:
    results = await search(provider, "vllm", allowed_domains=["https://vllm.ai/"])
    assert [r.url for r in results] == [
        "https://docs.vllm.ai/projects/ascend/en/latest/user_guide/release_notes.html"
    ]
    sent = server.requests[-1]
    if server.provider in ("searxng", "brave"):
        assert sent.params["q"] == "vllm site:vllm.ai"
    elif server.provider == "tavily":
        assert sent.body["include_domains"] == ["vllm.ai"]
    else:
        assert sent.params["include_domains"] == "vllm.ai"
    await search(provider, "potato", allowed_domains=["wikipedia.org", "potatogoodness.com"])
    sent = server.requests[-1]
    if server.provider in ("searxng", "brave"):
        assert sent.params["q"] == "potato (site:wikipedia.org OR site:potatogoodness.com)"


async def test_allowed_domains_are_enforced_on_what_the_backend_returns(
    server: SearchServer, provider: HttpSearchProvider
) -> None:
    server.honour_domains = False  # an engine that ignores site: and domain lists
    results = await search(provider, "potato", allowed_domains=["wikipedia.org", "museum.com"])
    assert [r.url for r in results] == ["https://en.wikipedia.org/wiki/Potato"]
    assert not await search(provider, "tomato", allowed_domains=["wikipedia.org"])


async def test_user_location_and_context_size(server: SearchServer) -> None:
    provider = provider_for(server)
    try:
        results = await search(
            provider, "potato", user_location={"type": "approximate", "country": "fr"}
        )
        assert results
        high = await search(provider, "potato", max_results=1, context_size="high")
    finally:
        await provider.aclose()
    sent = server.requests
    if server.provider in ("brave", "you"):
        assert sent[0].params["country"] == "FR"
    if server.provider == "tavily":
        assert sent[1].body["search_depth"] == "advanced"
    if server.provider in ("brave", "you"):
        assert "More about" in high[0].snippet or "Another passage" in high[0].snippet


# ----------------------------------------------------------------------------- failures


async def test_a_wrong_key_is_a_search_error_with_the_backends_words(server: SearchServer) -> None:
    if server.provider == "searxng":
        server.api_key = "proxy-key"  # an instance behind an authenticating proxy
    provider = create_search_provider(
        server.provider, base_url=server.base_url, api_key="wrong-key"
    )
    try:
        with pytest.raises(SearchError) as raised:
            await search(provider, "potato")
    finally:
        await provider.aclose()
        if server.provider == "searxng":
            server.api_key = None
    message = str(raised.value)
    expected = {
        "searxng": "SearXNG answered HTTP 401: Unauthorized",
        "tavily": "Tavily answered HTTP 401: Unauthorized: missing or invalid API key.",
        "brave": "Brave Search answered HTTP 422: The provided subscription token is invalid.",
        "you": "You.com answered HTTP 401: Invalid or expired API key",
    }
    assert message == expected[server.provider]


async def test_a_failing_backend_is_a_search_error(
    server: SearchServer, provider: HttpSearchProvider
) -> None:
    server.mode = "error"
    with pytest.raises(SearchError, match="answered HTTP 500"):
        await search(provider, "potato")


async def test_a_slow_backend_times_out(server: SearchServer) -> None:
    server.mode = "slow"
    provider = provider_for(server, timeout=0.2)
    try:
        with pytest.raises(SearchError) as raised:
            await search(provider, "potato")
    finally:
        await provider.aclose()
    assert str(raised.value).endswith("did not answer within 0.2 s")


async def test_searches_against_one_backend_are_bounded(server: SearchServer) -> None:
    server.mode, server.slow_seconds = "slow", 0.1
    provider = provider_for(server, max_concurrency=2)
    try:
        results = await asyncio.gather(*(search(provider, "potato") for _ in range(5)))
    finally:
        await provider.aclose()
    assert all(len(r) == 3 for r in results)
    assert server.max_active == 2


async def test_an_unreachable_backend_is_a_search_error() -> None:
    provider = create_search_provider(
        "brave", base_url=f"http://127.0.0.1:{free_port()}", api_key="k"
    )
    try:
        unreachable = "Brave Search could not be reached: ClientConnectorError"
        with pytest.raises(SearchError, match=unreachable):
            await search(provider, "potato")
    finally:
        await provider.aclose()


def test_configuration_errors_are_reported_up_front() -> None:
    with pytest.raises(ValueError, match="SearXNG needs web_search_base_url"):
        create_search_provider("searxng")
    with pytest.raises(ValueError, match="Tavily needs web_search_api_key"):
        create_search_provider("tavily")
    with pytest.raises(ValueError, match="unknown web search provider 'bing'"):
        create_search_provider("bing", api_key="k")


async def test_public_defaults_are_the_documented_endpoints() -> None:
    expected = {
        "tavily": "https://api.tavily.com",
        "brave": "https://api.search.brave.com",
        "you": "https://ydc-index.io",
    }
    for kind, base in expected.items():
        provider = create_search_provider(kind, api_key="k")
        assert provider.base_url == base
        await provider.aclose()


# ----------------------------------------------------------------------------- pages

ARTICLE = """<!doctype html><html><head><title>Spuds</title>
<style>body { color: red }</style><script>var secret = "do not show";</script></head>
<body><nav><a href="/">Home</a> | <a href="/about">About</a></nav>
<main><h1>All about potatoes</h1><p>Potatoes are&nbsp;tubers.
  They grow underground.</p><ul><li>Russet</li><li>Yukon &amp; Gold</li></ul>
<script>alert("no")</script><p>Eat them baked.</p></main>
<footer>Copyright 2026</footer></body></html>"""


def page_documents(server: SearchServer) -> tuple[Any, ...]:
    base = server.base_url
    return (
        doc("Spuds", f"{base}/pages/spuds", "Potato article.", "potato"),
        doc("Moved", f"{base}/redirect/plain", "A plain potato note.", "potato"),
        doc("Binary", f"{base}/pages/binary", "A potato picture.", "potato"),
        doc("Missing", f"{base}/pages/missing", "A lost potato.", "potato"),
    )


async def test_top_pages_are_fetched_as_readable_text(server: SearchServer) -> None:
    server.documents = page_documents(server)
    server.pages.update(
        {
            "spuds": ("text/html; charset=utf-8", ARTICLE),
            "plain": ("text/plain", "  Plain potato notes.  "),
            "binary": ("application/octet-stream", "\x00\x01"),
        }
    )
    provider = provider_for(server, local_policy(), fetch_pages=4)
    try:
        results = await search(provider, "potato")
        small = await search(provider, "potato", max_results=1, context_size="low")
    finally:
        await provider.aclose()
    texts = [r.page_text for r in results]
    assert texts[0] == (
        "All about potatoes\nPotatoes are tubers. They grow underground.\nRusset\n"
        "Yukon & Gold\nEat them baked."
    )
    assert texts[1] == "Plain potato notes."  # after a redirect
    assert texts[2] is None and texts[3] is None  # not text; 404
    assert results[0].snippet == "Potato article."
    assert small[0].page_text == texts[0]


async def test_only_the_top_pages_are_fetched_and_long_ones_are_cut(server: SearchServer) -> None:
    server.documents = page_documents(server)
    server.pages.update({"spuds": ("text/html", "<p>" + "spud " * 2000 + "</p>")})
    provider = provider_for(server, local_policy(), fetch_pages=1)
    try:
        [first, second, *_] = await search(provider, "potato", context_size="low")
    finally:
        await provider.aclose()
    assert first.page_text is not None
    assert len(first.page_text) <= 1500 and first.page_text.endswith("spud…")
    assert second.page_text is None
    fetched = [r.path for r in server.requests if r.path.startswith(("/pages", "/redirect"))]
    assert fetched == ["/pages/spuds"]


async def test_pages_on_private_addresses_are_not_fetched_by_default(server: SearchServer) -> None:
    server.documents = page_documents(server)
    server.pages["spuds"] = ("text/html", ARTICLE)
    provider = provider_for(server, fetch_pages=2)
    try:
        results = await search(provider, "potato")
    finally:
        await provider.aclose()
    assert results and all(r.page_text is None for r in results)
    assert not [r for r in server.requests if r.path.startswith("/pages")]


# ----------------------------------------------------------------------------- helpers


def test_domains_are_normalized_and_subdomains_allowed() -> None:
    assert normalize_domains(
        ["https://Example.com/path", "*.docs.org", "news.site.net:443", "example.com", " "]
    ) == ["example.com", "docs.org", "news.site.net"]
    allowed = ["example.com"]
    assert domain_allowed("https://example.com/a", allowed)
    assert domain_allowed("https://deep.sub.EXAMPLE.com./a", allowed)
    assert not domain_allowed("https://notexample.com/", allowed)
    assert not domain_allowed("https://example.com.evil.net/", allowed)
    assert not domain_allowed("mailto:x@example.com", allowed)
    assert domain_allowed("https://anything.net/", [])


def test_text_helpers() -> None:
    assert plain_text("A <strong>potato</strong> &amp; a\u00a0tomato ") == "A potato & a tomato"
    assert plain_text(None) == ""
    assert truncate("short", 10) == "short"
    assert truncate("one two three four five", 12) == "one two…"
    assert readable_text("<p>unclosed <b>bold") == "unclosed bold"
    assert readable_text("<div>a</div><div>b<br>c</div><template>x</template>") == "a\nb\nc"


def test_the_search_servers_log_what_they_receive() -> None:
    with serve_search("tavily") as server:
        reply = httpx.post(
            f"{server.base_url}/search",
            json={"query": "tomato", "api_key": "test-key"},
        )
        assert reply.status_code == 200
        assert [r["url"] for r in reply.json()["results"]] == [
            "https://www.healthline.com/nutrition/tomatoes"
        ]
        bad = httpx.post(
            f"{server.base_url}/search",
            headers={"Authorization": "Bearer nope"},
            content=json.dumps({"query": "tomato", "api_key": "test-key"}),
        )
        assert bad.status_code == 401
        assert [r.body["query"] for r in server.requests] == ["tomato", "tomato"]
