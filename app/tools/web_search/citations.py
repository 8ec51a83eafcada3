"""``url_citation`` annotations: an answer that cites what the searches found (a result's
URL, or a markdown link to it). ``url_citations`` is the pure function; each request's
``FoundSources`` collects what its searches found and annotates its answer with them.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from urllib.parse import urlsplit

from app.protocol.json_types import JsonObject
from app.tools.web_search.results import SearchResult

_URL_CHARS = r"(?:[^\s()<>\[\]\"'`]|\([^\s()<>]*\))+"
_MARKDOWN_LINK = re.compile(
    r"\[(?P<text>[^\[\]\n]{0,500})\]\(\s*<?(?P<url>https?://" + _URL_CHARS + r")>?\s*\)"
)
_BARE_URL = re.compile(r"https?://" + _URL_CHARS)
_TRAILING = ".,;:!?*_'\""


def _url_key(url: str) -> tuple[str, str, str] | None:
    """What two spellings of one URL share (scheme, fragment and a trailing slash aside)."""
    try:
        parts = urlsplit(url.strip())
    except ValueError:
        return None
    host = (parts.hostname or "").lower().rstrip(".")
    if not host:
        return None
    return host, parts.path.rstrip("/"), parts.query


def url_citations(text: str, sources: list[SearchResult]) -> list[JsonObject]:
    """``url_citation`` annotations for ``text``: every markdown link ``[title](url)`` to one
    of ``sources`` (the whole link), and every other occurrence of a source's URL. Indices are
    character offsets into ``text``, ``end_index`` exclusive; ordered by position."""
    by_key: dict[tuple[str, str, str], SearchResult] = {}
    for result in sources:
        key = _url_key(result.url)
        if key is not None:
            by_key.setdefault(key, result)
    if not by_key or "http" not in text:
        return []
    found: list[JsonObject] = []
    covered: list[tuple[int, int]] = []
    for match in _MARKDOWN_LINK.finditer(text):
        source = _source_for(by_key, match.group("url"))
        if source is None:
            continue
        start, end = match.span()
        covered.append((start, end))
        found.append(_citation(start, end, source, match.group("text")))
    for match in _BARE_URL.finditer(text):
        start, end = match.span()
        if any(a <= start < b for a, b in covered):
            continue
        url = match.group().rstrip(_TRAILING)
        if url.endswith(")") and url.count("(") < url.count(")"):
            url = url[:-1]
        source = _source_for(by_key, url)
        if source is None:
            continue
        found.append(_citation(start, start + len(url), source, ""))
    found.sort(key=lambda c: (c["start_index"], c["end_index"]))
    return found


def _source_for(
    by_key: Mapping[tuple[str, str, str], SearchResult], url: str
) -> SearchResult | None:
    key = _url_key(url)
    return by_key.get(key) if key is not None else None


def _citation(start: int, end: int, source: SearchResult, fallback: str) -> JsonObject:
    return {
        "type": "url_citation",
        "start_index": start,
        "end_index": end,
        "url": source.url,
        "title": source.title or fallback.strip() or source.url,
    }


class FoundSources:
    """What one request's searches returned, for its answer's citations."""

    def __init__(self) -> None:
        self.results: list[SearchResult] = []

    def add(self, results: list[SearchResult]) -> None:
        known = {r.url for r in self.results}
        self.results.extend(r for r in results if r.url not in known)

    def annotate(self, text: str) -> list[JsonObject]:
        return url_citations(text, self.results) if self.results else []
