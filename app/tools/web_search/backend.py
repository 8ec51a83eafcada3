"""``HttpSearchProvider``: what every HTTP web search backend shares.

Each backend is a module of its own (``searxng``, ``tavily``, ``brave``, ``you``) that only
sends the query and reads the answer; ``backends`` names them. Shared here: one aiohttp session
per provider (the gateway's one HTTP client library, ``app.net.http``; opened on first use,
closed with ``aclose``), at most ``max_concurrency`` searches against the backend at once, a
timeout per search, the result cap, the domain filter (``filters.allowed_domains`` of OpenAI's
tool: passed to the backend where it has a filter, and always enforced on the results, a
subdomain of an allowed domain being allowed, ``domains``), and the optional fetch of the top
results' pages (``pages``), whose readable text is attached to the result.

Both go through the egress policy (``app.net.egress_aiohttp``): the backend's session trusts
exactly the host:port of the operator's ``web_search_base_url`` (and the environment's proxies,
which it uses: its requests never leave the backend's URL); the pages' session, a session of
its own, judges every page and redirect by the policy and uses no proxy.
"""

from __future__ import annotations

import asyncio
from abc import ABC, abstractmethod
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, ClassVar

import aiohttp
import orjson

from app.net.egress import EgressPolicy
from app.net.egress_aiohttp import egress_session, environment_proxies
from app.net.http import release
from app.protocol.json_types import JsonObject
from app.tools.web_search.domains import domain_allowed, normalize_domains
from app.tools.web_search.pages import PageFetcher
from app.tools.web_search.results import SearchError, SearchLimits, SearchResult, plain_text

USER_AGENT = "respgate-web-search/1.0"


@dataclass(frozen=True, slots=True)
class BackendAnswer:
    """A backend's HTTP answer, read whole."""

    status: int
    body: bytes


def _error_detail(answer: BackendAnswer) -> str:
    """The backend's own words for an error answer (its JSON ``detail``/``error``/``message``)."""
    try:
        body: Any = orjson.loads(answer.body)
    except orjson.JSONDecodeError:
        return plain_text(answer.body.decode("utf-8", errors="replace"))[:200]
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
        session: aiohttp.ClientSession | None = None,
        egress: EgressPolicy | None = None,
    ) -> None:
        base = base_url or self.default_base_url
        if not base:
            raise ValueError(f"web search with {self.label} needs web_search_base_url")
        if self.needs_api_key and not api_key:
            raise ValueError(f"web search with {self.label} needs web_search_api_key")
        self.base_url = base.rstrip("/")
        self.api_key = api_key
        self.limits = limits or SearchLimits()
        self._session = session
        self._owns_session = session is None
        self._page_session: aiohttp.ClientSession | None = None
        self._egress = egress or EgressPolicy()
        self._semaphore = asyncio.Semaphore(self.limits.max_concurrency)
        self._pages = PageFetcher(self.page_session, fetch_pages=self.limits.fetch_pages)

    def _timeout(self) -> aiohttp.ClientTimeout:
        # The search's own deadline bounds every request; these only stop a stuck socket.
        seconds = self.limits.timeout + 1.0
        return aiohttp.ClientTimeout(total=None, connect=seconds, sock_read=seconds)

    def session(self) -> aiohttp.ClientSession:
        """The backend's session (made on first use, inside the event loop)."""
        if self._session is None:
            self._session = egress_session(
                self._egress.trusting(self.base_url, *environment_proxies()),
                headers={"User-Agent": USER_AGENT},
                timeout=self._timeout(),
                # The proxy settings of the environment (HTTPS_PROXY …) apply to the backend.
                trust_env=True,
            )
        return self._session

    def page_session(self) -> aiohttp.ClientSession:
        """The pages' session (made on first use): the egress policy, no proxy."""
        if self._page_session is None:
            self._page_session = egress_session(
                self._egress, headers={"User-Agent": USER_AGENT}, timeout=self._timeout()
            )
        return self._page_session

    async def aclose(self) -> None:
        if self._page_session is not None:
            await self._page_session.close()
            self._page_session = None
        if self._owns_session and self._session is not None:
            await self._session.close()
            self._session = None

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
            except TimeoutError:  # aiohttp's socket timeouts are TimeoutErrors too
                raise SearchError(f"{self.label} did not answer within {timeout:g} s") from None
            except (aiohttp.ClientError, OSError) as exc:
                raise SearchError(
                    f"{self.label} could not be reached: {type(exc).__name__}: {exc}".rstrip(": ")
                ) from None
        results = _unique([r for r in found if r.url and domain_allowed(r.url, domains)])
        results = results[:max_results]
        if self._pages.fetch_pages > 0 and results:
            results = await self._pages.with_pages(results, deadline, context_size)
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
        """Ask the backend; may raise ``aiohttp.ClientError`` or ``SearchError``."""

    async def _get(
        self, path: str, *, params: Mapping[str, str | int], headers: Mapping[str, str]
    ) -> BackendAnswer:
        """``GET {base_url}{path}`` with ``params`` (redirects are not followed, as for every
        request of a backend: an answer is the backend's own)."""
        resp = await self.session().get(
            f"{self.base_url}{path}", params=params, headers=headers, allow_redirects=False
        )
        return await _read(resp)

    async def _post(
        self, path: str, *, body: JsonObject, headers: Mapping[str, str]
    ) -> BackendAnswer:
        """``POST {base_url}{path}`` with ``body`` as JSON."""
        resp = await self.session().post(
            f"{self.base_url}{path}",
            data=orjson.dumps(body),
            headers={"Content-Type": "application/json", **headers},
            allow_redirects=False,
        )
        return await _read(resp)

    def _json(self, answer: BackendAnswer) -> JsonObject:
        """The body of a successful answer; an error status or a non-JSON body is an error."""
        if answer.status >= 400:
            raise SearchError(
                f"{self.label} answered HTTP {answer.status}: {_error_detail(answer)}"
            )
        try:
            body = orjson.loads(answer.body)
        except orjson.JSONDecodeError:
            raise SearchError(f"{self.label} did not answer with JSON") from None
        if not isinstance(body, dict):
            raise SearchError(f"{self.label} answered with unexpected JSON")
        return body


async def _read(resp: aiohttp.ClientResponse) -> BackendAnswer:
    try:
        return BackendAnswer(resp.status, await resp.read())
    finally:
        release(resp)


def _unique(results: list[SearchResult]) -> list[SearchResult]:
    seen: set[str] = set()
    out: list[SearchResult] = []
    for result in results:
        if result.url not in seen:
            seen.add(result.url)
            out.append(result)
    return out


def date_of(value: Any) -> str | None:
    """A backend's date field, when it has one."""
    return value if isinstance(value, str) and value else None


def entries(value: Any) -> list[Mapping[str, Any]]:
    """The objects of a backend's result list (anything else skipped)."""
    return [v for v in value if isinstance(v, dict)] if isinstance(value, list) else []


def result_of(entry: Mapping[str, Any], *, snippet: str, published: str | None) -> SearchResult:
    """One hit: the entry's ``title`` and ``url``, with the snippet and date the provider's
    own fields give."""
    url = entry.get("url")
    return SearchResult(
        title=plain_text(entry.get("title")),
        url=url if isinstance(url, str) else "",
        snippet=snippet,
        published=published,
    )
