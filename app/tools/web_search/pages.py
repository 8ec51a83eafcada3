"""The page fetch: the readable text of the top results' pages, attached to the results.

Pages are fetched over a session on the egress policy's connector (``app.net.egress_aiohttp``):
every connection goes to an address the policy checked (public ones unless ``[egress]`` allows
more), so search results cannot steer the gateway into its own network, nor can a name that
answers differently a moment later. Redirects are followed here, one hop at a time, and every
hop is a new check. A page that may not be fetched is left out, like one that fails (the
reason is logged, with credentials in its URL redacted). A page is read up to
``MAX_PAGE_BYTES``; HTML becomes its visible text (stdlib ``html.parser``), plain text stays.
"""

from __future__ import annotations

import asyncio
import logging
import re
from collections.abc import Callable
from dataclasses import dataclass, replace
from html.parser import HTMLParser
from urllib.parse import urljoin

import aiohttp

from app.core.redaction import redact_url
from app.net.egress import url_problem
from app.net.http import release
from app.tools.web_search.results import SearchResult, truncate

logger = logging.getLogger(__name__)

MAX_PAGE_BYTES = 2_000_000
MAX_REDIRECTS = 4
# Characters of page text given per result, by OpenAI's ``search_context_size``.
PAGE_CHARS = {"low": 1500, "medium": 3000, "high": 6000}
_REDIRECT_STATUSES = frozenset({301, 302, 303, 307, 308})
_ACCEPT = "text/html,application/xhtml+xml,text/plain;q=0.9"
_CHUNK = 64 * 1024

_SPACES = re.compile(r"[ \t\r\f\v\u00a0]+")
_WHITESPACE = re.compile(r"\s+")


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


@dataclass(frozen=True, slots=True)
class _Page:
    """A fetched page's body (at most ``MAX_PAGE_BYTES``) and how to read it."""

    body: bytes
    charset: str
    is_html: bool

    def text(self) -> str:
        try:
            text = self.body.decode(self.charset, errors="replace")
        except LookupError:
            text = self.body.decode("utf-8", errors="replace")
        return readable_text(text) if self.is_html else text.strip()


@dataclass(frozen=True, slots=True)
class _Redirect:
    location: str


class PageFetcher:
    """Fetches result pages over an aiohttp session on the egress policy's connector
    (``session`` gives it)."""

    def __init__(self, session: Callable[[], aiohttp.ClientSession], *, fetch_pages: int) -> None:
        self._session = session
        self.fetch_pages = fetch_pages

    async def with_pages(
        self, results: list[SearchResult], deadline: float, context_size: str | None
    ) -> list[SearchResult]:
        """The top results with their page text; pages not fetched by ``deadline`` are left
        out (the snippets stay)."""
        limit = PAGE_CHARS.get(context_size or "medium", PAGE_CHARS["medium"])
        top = results[: self.fetch_pages]
        tasks = [asyncio.create_task(self.fetch(r.url, limit)) for r in top]
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

    async def fetch(self, url: str, limit: int) -> str | None:
        """The readable text of the page at ``url`` (at most ``limit`` characters), or None
        when it may not be fetched, fails or is not text."""
        for _ in range(MAX_REDIRECTS + 1):
            problem = url_problem(url)
            if problem is not None:
                logger.info("web search: page %s not fetched (%s)", redact_url(url), problem)
                return None
            try:
                page = await self._get(url)
            except (aiohttp.ClientError, OSError) as exc:
                logger.info("web search: page %s not fetched: %s", redact_url(url), exc)
                return None
            if isinstance(page, _Redirect):
                url = urljoin(url, page.location)
                continue
            if page is None:
                return None
            text = page.text()
            return truncate(text, limit) if text else None
        return None

    async def _get(self, url: str) -> _Page | _Redirect | None:
        """One hop: a redirect to follow, the page when it is text, else None."""
        resp = await self._session().get(url, headers={"Accept": _ACCEPT}, allow_redirects=False)
        try:
            if resp.status in _REDIRECT_STATUSES and "Location" in resp.headers:
                return _Redirect(resp.headers["Location"])
            if resp.status >= 400:
                return None
            kind = resp.headers.get("Content-Type", "").lower()
            is_html = "html" in kind
            if not is_html and not kind.startswith("text/plain"):
                return None
            body = bytearray()
            async for chunk in resp.content.iter_chunked(_CHUNK):
                body += chunk
                if len(body) >= MAX_PAGE_BYTES:
                    break
            return _Page(bytes(body), resp.charset or "utf-8", is_html)
        finally:
            release(resp)
