"""What every web search backend shares with the tool: ``SearchResult`` (one hit),
``SearchError`` (a search that failed, with a message fit for the model), the
``SearchProvider`` protocol, the ``SearchLimits`` of the ``web_search_*`` settings, and the
text helpers results go through (``plain_text``, ``truncate``).
"""

from __future__ import annotations

import html
import re
from dataclasses import dataclass
from typing import Any, Protocol

from app.protocol.json_types import JsonObject

_TAG = re.compile(r"<[^>]+>")
_SPACES = re.compile(r"[ \t\r\f\v\u00a0]+")


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
    """A web search backend: ``search(query, ...)`` returns ``SearchResult`` items (title,
    URL, snippet, publication date when the backend gives one) or raises ``SearchError``."""

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
