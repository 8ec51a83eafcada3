"""Web search backends behind the ``web_search`` tool: SearXNG, Tavily, Brave and You.com.

Every backend is a ``SearchProvider``: ``search(query, ...)`` returns ``SearchResult`` items
(title, URL, snippet, publication date when the backend gives one) or raises ``SearchError``
with a message fit for the model. ``HttpSearchProvider`` does what they share: one
``httpx.AsyncClient`` per provider (closed with ``aclose``), at most ``max_concurrency``
searches against the backend at once, a timeout per search, the result cap, the domain filter
(``filters.allowed_domains`` of OpenAI's tool: passed to the backend where it has a filter, and
always enforced on the results, a subdomain of an allowed domain being allowed), and the
optional fetch of the top results' pages, whose readable text is attached to the result.

Pages are fetched only from public addresses (``allow_private_pages`` lifts that for tests and
intranet deployments): a result URL, or a redirect, that leads to a loopback, private,
link-local or metadata address is skipped, so search results cannot steer the gateway into its
own network.
"""

from __future__ import annotations

import asyncio
import html
import logging
import re
from abc import ABC, abstractmethod
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from html.parser import HTMLParser
from typing import Any, ClassVar, Protocol
from urllib.parse import urljoin, urlsplit

import httpx

from app.net.egress import PUBLIC_ONLY, EgressPolicy
from app.protocol.json_types import JsonObject

logger = logging.getLogger(__name__)

USER_AGENT = "respgate-web-search/1.0"
MAX_PAGE_BYTES = 2_000_000
MAX_REDIRECTS = 4
# Characters of page text given per result, by OpenAI's ``search_context_size``.
PAGE_CHARS = {"low": 1500, "medium": 3000, "high": 6000}


class SearchError(Exception):
    """A search that failed (the backend refused, failed, timed out or was unreachable)."""


@dataclass(frozen=True, slots=True)
class SearchResult:
    """One web result; ``page_text`` is the page's readable text when it was fetched."""

    title: str
    url: str
    snippet: str
    published: str | None = None
    page_text: str | None = None


class SearchProvider(Protocol):
    """A web search backend (see the module docstring)."""

    @property
    def name(self) -> str:
        """The ``web_search_provider`` value (``searxng`` …)."""
        ...

    async def search(
        self,
        query: str,
        *,
        max_results: int,
        allowed_domains: list[str] | None,
        user_location: JsonObject | None,
        context_size: str | None,
    ) -> list[SearchResult]:
        """At most ``max_results`` results, best first; raises ``SearchError``."""
        ...

    async def aclose(self) -> None: ...


@dataclass(frozen=True, slots=True)
class SearchLimits:
    """How hard the gateway may use a backend (``web_search_*`` settings)."""

    max_concurrency: int = 4
    timeout: float = 15.0
    fetch_pages: int = 0
    allow_private_pages: bool = False


# ----------------------------------------------------------------------------- domains


def normalize_domains(domains: Iterable[str] | None) -> list[str]:
    """``allowed_domains`` as bare lower-case host names (a scheme, path or port is dropped)."""
    out: list[str] = []
    for raw in domains or []:
        text = str(raw).strip().lower()
        if "://" in text:
            text = urlsplit(text).hostname or ""
        text = text.split("/", 1)[0].split(":", 1)[0].strip(".")
        text = text.removeprefix("*.")
        if text and text not in out:
            out.append(text)
    return out


def host_of(url: str) -> str:
    try:
        return (urlsplit(url).hostname or "").lower().rstrip(".")
    except ValueError:
        return ""


def domain_allowed(url: str, domains: Sequence[str]) -> bool:
    """Whether ``url`` is on one of ``domains`` or a subdomain of one (no domains: any)."""
    if not domains:
        return True
    host = host_of(url)
    return any(host == d or host.endswith("." + d) for d in domains)


def site_terms(domains: Sequence[str]) -> str:
    """``site:`` operators for a query (several joined with ``OR``)."""
    if not domains:
        return ""
    if len(domains) == 1:
        return f"site:{domains[0]}"
    return "(" + " OR ".join(f"site:{d}" for d in domains) + ")"


def _with_sites(query: str, domains: Sequence[str]) -> str:
    terms = site_terms(domains)
    return f"{query} {terms}" if terms else query


def _country(user_location: JsonObject | None) -> str | None:
    """The two-letter country code of OpenAI's ``user_location``, if it has one."""
    if not isinstance(user_location, dict):
        return None
    country = user_location.get("country")
    if isinstance(country, str) and len(country) == 2 and country.isalpha():
        return country.upper()
    return None


# ----------------------------------------------------------------------------- text


_TAG = re.compile(r"<[^>]+>")
_SPACES = re.compile(r"[ \t\r\f\v\u00a0]+")
_WHITESPACE = re.compile(r"\s+")


def plain_text(value: Any) -> str:
    """A snippet without markup (Brave marks matches with ``<strong>``) or entities."""
    if not isinstance(value, str):
        return ""
    return _SPACES.sub(" ", html.unescape(_TAG.sub("", value))).strip()


def truncate(text: str, limit: int) -> str:
    """``text`` cut at a word boundary to at most ``limit`` characters (with an ellipsis)."""
    if len(text) <= limit:
        return text
    cut = text[: max(limit - 1, 0)]
    space = cut.rfind(" ")
    if space > limit // 2:
        cut = cut[:space]
    return cut.rstrip() + "…"


class _ReadableText(HTMLParser):
    """The visible text of an HTML page: scripts, styles and page furniture dropped."""

    # fmt: off
    SKIPPED = frozenset({
        "script", "style", "noscript", "template", "svg", "iframe", "object", "head", "nav",
        "footer", "aside", "form", "button", "select",
    })
    BLOCKS = frozenset({
        "p", "div", "br", "li", "ul", "ol", "h1", "h2", "h3", "h4", "h5", "h6", "tr", "table",
        "section", "article", "main", "header", "pre", "blockquote", "dd", "dt", "hr",
        "figcaption",
    })
    # fmt: on

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self._skipping: list[str] = []
        self._parts: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag in self.SKIPPED:
            self._skipping.append(tag)
        elif tag in self.BLOCKS:
            self._parts.append("\n")

    def handle_startendtag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag in self.BLOCKS:
            self._parts.append("\n")

    def handle_endtag(self, tag: str) -> None:
        if tag in self._skipping:
            while self._skipping and self._skipping.pop() != tag:
                pass
        elif tag in self.BLOCKS:
            self._parts.append("\n")

    def handle_data(self, data: str) -> None:
        if not self._skipping:
            self._parts.append(_WHITESPACE.sub(" ", data))  # lines come from block tags

    def text(self) -> str:
        lines = (_SPACES.sub(" ", line).strip() for line in "".join(self._parts).splitlines())
        return "\n".join(line for line in lines if line)


def readable_text(page: str) -> str:
    """The readable text of an HTML document (stdlib ``html.parser``)."""
    parser = _ReadableText()
    try:
        parser.feed(page)
        parser.close()
    except Exception:  # a parser error keeps what was read so far
        logger.debug("HTML parser gave up", exc_info=True)
    return parser.text()


# ----------------------------------------------------------------------------- providers


def _error_detail(response: httpx.Response) -> str:
    """The backend's own words for an error answer (its JSON ``detail``/``error``/``message``)."""
    try:
        body: Any = response.json()
    except ValueError:
        return plain_text(response.text)[:200]
    for _ in range(3):
        if not isinstance(body, dict):
            break
        for key in ("detail", "error", "message"):
            if key in body:
                body = body[key]
                break
        else:
            break
    if isinstance(body, str):
        return body[:200]
    return str(body)[:200]


class HttpSearchProvider(ABC):
    """What every HTTP backend shares (see the module docstring); subclasses send the query."""

    name: ClassVar[str]
    label: ClassVar[str]
    default_base_url: ClassVar[str | None] = None
    # The most results the backend returns for one request.
    max_count: ClassVar[int] = 20
    needs_api_key: ClassVar[bool] = True

    def __init__(
        self,
        *,
        base_url: str | None = None,
        api_key: str | None = None,
        limits: SearchLimits | None = None,
        client: httpx.AsyncClient | None = None,
    ) -> None:
        base = base_url or self.default_base_url
        if not base:
            raise ValueError(f"web search with {self.label} needs web_search_base_url")
        if self.needs_api_key and not api_key:
            raise ValueError(f"web search with {self.label} needs web_search_api_key")
        self.base_url = base.rstrip("/")
        self.api_key = api_key
        self.limits = limits or SearchLimits()
        # The search's own deadline bounds every request; httpx's 5 s default would cut in.
        self._client = client or httpx.AsyncClient(
            headers={"User-Agent": USER_AGENT},
            follow_redirects=False,
            timeout=httpx.Timeout(self.limits.timeout + 1.0),
        )
        self._owns_client = client is None
        self._semaphore = asyncio.Semaphore(self.limits.max_concurrency)
        # Pages come from search results: public addresses only, unless allow_private_pages.
        self._pages = EgressPolicy(
            refused=frozenset() if self.limits.allow_private_pages else PUBLIC_ONLY
        )

    async def aclose(self) -> None:
        if self._owns_client:
            await self._client.aclose()

    async def search(
        self,
        query: str,
        *,
        max_results: int,
        allowed_domains: list[str] | None,
        user_location: JsonObject | None,
        context_size: str | None,
    ) -> list[SearchResult]:
        query = query.strip()
        if not query:
            raise SearchError("the search query is empty")
        domains = normalize_domains(allowed_domains)
        count = max(1, min(max_results, self.max_count))
        timeout = self.limits.timeout
        async with self._semaphore:
            loop = asyncio.get_running_loop()
            deadline = loop.time() + timeout
            try:
                async with asyncio.timeout_at(deadline):
                    found = await self._query(
                        query,
                        count=count,
                        domains=domains,
                        user_location=user_location,
                        context_size=context_size,
                    )
            except (TimeoutError, httpx.TimeoutException):
                raise SearchError(f"{self.label} did not answer within {timeout:g} s") from None
            except httpx.HTTPError as exc:
                raise SearchError(
                    f"{self.label} could not be reached: {type(exc).__name__}: {exc}".rstrip(": ")
                ) from None
        results = _unique([r for r in found if r.url and domain_allowed(r.url, domains)])
        results = results[:max_results]
        if self.limits.fetch_pages > 0 and results:
            results = await self._with_pages(results, deadline, context_size)
        return results

    @abstractmethod
    async def _query(
        self,
        query: str,
        *,
        count: int,
        domains: list[str],
        user_location: JsonObject | None,
        context_size: str | None,
    ) -> list[SearchResult]:
        """Ask the backend; may raise ``httpx.HTTPError`` or ``SearchError``."""

    def _json(self, response: httpx.Response) -> JsonObject:
        """The body of a successful answer; an error status or a non-JSON body is an error."""
        if response.status_code >= 400:
            raise SearchError(
                f"{self.label} answered HTTP {response.status_code}: {_error_detail(response)}"
            )
        try:
            body = response.json()
        except ValueError:
            raise SearchError(f"{self.label} did not answer with JSON") from None
        if not isinstance(body, dict):
            raise SearchError(f"{self.label} answered with unexpected JSON")
        return body

    # ------------------------------------------------------------------ pages

    async def _with_pages(
        self, results: list[SearchResult], deadline: float, context_size: str | None
    ) -> list[SearchResult]:
        """The top results with their page text; pages not fetched by ``deadline`` are left
        out (the snippets stay)."""
        limit = PAGE_CHARS.get(context_size or "medium", PAGE_CHARS["medium"])
        top = results[: self.limits.fetch_pages]
        tasks = [asyncio.create_task(self.fetch_page(r.url, limit)) for r in top]
        try:
            remaining = deadline - asyncio.get_running_loop().time()
            if remaining > 0:
                await asyncio.wait(tasks, timeout=remaining)
        finally:
            for task in tasks:
                task.cancel()  # no-op for finished ones
        out = list(results)
        for index, task in enumerate(tasks):
            if not task.done() or task.cancelled() or task.exception() is not None:
                continue
            text = task.result()
            if text:
                out[index] = replace(out[index], page_text=text)
        return out

    async def fetch_page(self, url: str, limit: int) -> str | None:
        """The readable text of the page at ``url`` (at most ``limit`` characters), or None
        when it may not be fetched, fails or is not text."""
        for _ in range(MAX_REDIRECTS + 1):
            refusal = await self._pages.refusal(url)
            if refusal is not None:
                logger.info("web search: page %s not fetched (%s)", url, refusal)
                return None
            try:
                async with self._client.stream(
                    "GET",
                    url,
                    headers={"Accept": "text/html,application/xhtml+xml,text/plain;q=0.9"},
                ) as response:
                    if response.is_redirect and "location" in response.headers:
                        url = urljoin(url, response.headers["location"])
                        continue
                    if response.status_code >= 400:
                        return None
                    kind = response.headers.get("content-type", "").lower()
                    is_html = "html" in kind
                    if not is_html and not kind.startswith("text/plain"):
                        return None
                    body = bytearray()
                    async for chunk in response.aiter_bytes():
                        body += chunk
                        if len(body) >= MAX_PAGE_BYTES:
                            break
                    charset = response.charset_encoding or "utf-8"
            except httpx.HTTPError as exc:
                logger.info("web search: page %s not fetched: %s", url, exc)
                return None
            try:
                text = bytes(body).decode(charset, errors="replace")
            except LookupError:
                text = bytes(body).decode("utf-8", errors="replace")
            text = readable_text(text) if is_html else text.strip()
            return truncate(text, limit) if text else None
        return None


def _unique(results: list[SearchResult]) -> list[SearchResult]:
    seen: set[str] = set()
    out: list[SearchResult] = []
    for result in results:
        if result.url not in seen:
            seen.add(result.url)
            out.append(result)
    return out


def _text(value: Any) -> str:
    return value if isinstance(value, str) else ""


def _date(value: Any) -> str | None:
    return value if isinstance(value, str) and value else None


def _entries(value: Any) -> list[Mapping[str, Any]]:
    return [v for v in value if isinstance(v, dict)] if isinstance(value, list) else []


class SearxngSearchProvider(HttpSearchProvider):
    """A SearXNG instance's JSON API.

    Followed: SearXNG's "Search API" (https://docs.searxng.org/dev/search_api.html):
    ``GET /search`` with ``q`` and ``format=json`` (the instance must enable the ``json``
    format in ``settings.yml``, else it answers 403); the answer's ``results[]`` carry
    ``title``, ``url``, ``content`` and, for some engines, ``publishedDate``. SearXNG has no
    result count parameter (a page holds about 20 results) and no domain filter: allowed
    domains become ``site:`` terms of the query, which engines such as Google and Brave
    honour. No API key (an instance that needs one sits behind a proxy; the key is then sent
    as a bearer token).
    """

    name = "searxng"
    label = "SearXNG"
    needs_api_key = False
    max_count = 50

    async def _query(
        self,
        query: str,
        *,
        count: int,
        domains: list[str],
        user_location: JsonObject | None,
        context_size: str | None,
    ) -> list[SearchResult]:
        headers = {"Accept": "application/json"}
        if self.api_key:
            headers["Authorization"] = f"Bearer {self.api_key}"
        response = await self._client.get(
            f"{self.base_url}/search",
            params={"q": _with_sites(query, domains), "format": "json", "pageno": 1},
            headers=headers,
        )
        if response.status_code == 403:
            raise SearchError(
                "SearXNG refused the JSON format (HTTP 403): enable 'json' in the instance's "
                "search.formats"
            )
        body = self._json(response)
        return [
            _result(
                entry,
                snippet=plain_text(entry.get("content")),
                published=_date(entry.get("publishedDate")),
            )
            for entry in _entries(body.get("results"))
        ]


class TavilySearchProvider(HttpSearchProvider):
    """Tavily's Search API.

    Followed: Tavily's API reference, "Tavily Search"
    (https://docs.tavily.com/documentation/api-reference/endpoint/search): ``POST /search`` on
    ``https://api.tavily.com`` with a JSON body (``query``, ``max_results`` from 0 to 20,
    ``search_depth`` ``basic`` or ``advanced``, ``include_domains``) and the key as
    ``Authorization: Bearer <key>``. Older clients (LangChain's ``TavilySearchAPIWrapper``) put
    the key in the body as ``api_key``; both are sent. The answer's ``results[]`` carry
    ``title``, ``url``, ``content``, ``score`` and, for news, ``published_date``. A ``high``
    search context size asks for the ``advanced`` depth (two API credits).
    """

    name = "tavily"
    label = "Tavily"
    default_base_url = "https://api.tavily.com"
    max_count = 20

    async def _query(
        self,
        query: str,
        *,
        count: int,
        domains: list[str],
        user_location: JsonObject | None,
        context_size: str | None,
    ) -> list[SearchResult]:
        body: JsonObject = {
            "query": query,
            "max_results": count,
            "search_depth": "advanced" if context_size == "high" else "basic",
            "api_key": self.api_key,
        }
        if domains:
            body["include_domains"] = domains
        response = await self._client.post(
            f"{self.base_url}/search",
            json=body,
            headers={"Authorization": f"Bearer {self.api_key}", "Accept": "application/json"},
        )
        answer = self._json(response)
        return [
            _result(
                entry,
                snippet=plain_text(entry.get("content")),
                published=_date(entry.get("published_date")),
            )
            for entry in _entries(answer.get("results"))
        ]


class BraveSearchProvider(HttpSearchProvider):
    """The Brave Search API's web search.

    Followed: Brave's API reference "Web search"
    (https://api-dashboard.search.brave.com/api-reference/web/search/get and the older
    https://api.search.brave.com/app/documentation/web-search/query): ``GET
    /res/v1/web/search`` on ``https://api.search.brave.com`` with ``q`` (at most 400
    characters), ``count`` (1 to 20) and ``country`` (two letters), the key in the
    ``X-Subscription-Token`` header. The answer's ``web.results[]`` carry ``title``, ``url``,
    ``description`` (matches marked with ``<strong>``), ``extra_snippets`` and ``page_age``.
    Brave has no domain parameter: allowed domains become ``site:`` operators.
    """

    name = "brave"
    label = "Brave Search"
    default_base_url = "https://api.search.brave.com"
    max_count = 20

    async def _query(
        self,
        query: str,
        *,
        count: int,
        domains: list[str],
        user_location: JsonObject | None,
        context_size: str | None,
    ) -> list[SearchResult]:
        params: dict[str, str | int] = {"q": _with_sites(query, domains), "count": count}
        country = _country(user_location)
        if country:
            params["country"] = country
        response = await self._client.get(
            f"{self.base_url}/res/v1/web/search",
            params=params,
            headers={"X-Subscription-Token": str(self.api_key), "Accept": "application/json"},
        )
        body = self._json(response)
        web = body.get("web")
        results: list[SearchResult] = []
        for entry in _entries(web.get("results") if isinstance(web, dict) else None):
            snippet = plain_text(entry.get("description"))
            if context_size == "high":
                extra = [plain_text(s) for s in entry.get("extra_snippets") or []]
                snippet = " … ".join(s for s in [snippet, *extra] if s)
            results.append(
                _result(
                    entry,
                    snippet=snippet,
                    published=_date(entry.get("page_age")) or _date(entry.get("age")),
                )
            )
        return results


class YouSearchProvider(HttpSearchProvider):
    """The You.com Search API.

    Followed: You.com's API reference "Search" (https://you.com/docs/api-reference/search/
    v1-search, formerly documentation.you.com/api-reference/search): ``GET /v1/search`` on
    ``https://ydc-index.io`` with ``query``, ``count`` (1 to 100, per section), ``country`` and
    ``include_domains`` (a comma-separated list in a GET), the key in the ``X-API-Key``
    header. The answer's ``results.web[]`` carry ``title``, ``url``, ``description``,
    ``snippets[]`` and ``page_age``; ``results.news[]`` is not used.
    """

    name = "you"
    label = "You.com"
    default_base_url = "https://ydc-index.io"
    max_count = 100

    async def _query(
        self,
        query: str,
        *,
        count: int,
        domains: list[str],
        user_location: JsonObject | None,
        context_size: str | None,
    ) -> list[SearchResult]:
        params: dict[str, str | int] = {"query": query, "count": count}
        if domains:
            params["include_domains"] = ",".join(domains)
        country = _country(user_location)
        if country:
            params["country"] = country
        response = await self._client.get(
            f"{self.base_url}/v1/search",
            params=params,
            headers={"X-API-Key": str(self.api_key), "Accept": "application/json"},
        )
        body = self._json(response)
        sections = body.get("results")
        web = sections.get("web") if isinstance(sections, dict) else None
        results: list[SearchResult] = []
        for entry in _entries(web):
            snippets = [plain_text(s) for s in entry.get("snippets") or [] if isinstance(s, str)]
            if context_size != "high":
                snippets = snippets[:1]
            snippet = " … ".join(s for s in snippets if s) or plain_text(entry.get("description"))
            results.append(_result(entry, snippet=snippet, published=_date(entry.get("page_age"))))
        return results


def _result(entry: Mapping[str, Any], *, snippet: str, published: str | None) -> SearchResult:
    """One hit: the entry's ``title`` and ``url``, with the snippet and date the provider's
    own fields give."""
    return SearchResult(
        title=plain_text(entry.get("title")),
        url=_text(entry.get("url")),
        snippet=snippet,
        published=published,
    )


PROVIDERS: dict[str, type[HttpSearchProvider]] = {
    cls.name: cls
    for cls in (
        SearxngSearchProvider,
        TavilySearchProvider,
        BraveSearchProvider,
        YouSearchProvider,
    )
}


def create_search_provider(
    kind: str,
    *,
    base_url: str | None = None,
    api_key: str | None = None,
    limits: SearchLimits | None = None,
) -> HttpSearchProvider:
    """The provider named by ``web_search_provider``; raises ``ValueError`` for an unknown
    name or a missing base URL / API key."""
    cls = PROVIDERS.get(kind)
    if cls is None:
        raise ValueError(f"unknown web search provider {kind!r} (one of {', '.join(PROVIDERS)})")
    return cls(base_url=base_url, api_key=api_key, limits=limits)
