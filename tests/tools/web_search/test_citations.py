"""``url_citation`` annotations of an answer that cites the search results."""

from __future__ import annotations

from app.protocol.json_types import JsonObject
from app.tools.web_search.citations import url_citations
from app.tools.web_search.results import SearchResult
from tests.tools.web_search.fakes import WIKI

SOURCES = [
    WIKI,
    SearchResult(
        "Spud (disambiguation)", "https://en.wikipedia.org/wiki/Spud_(disambiguation)", ""
    ),
    SearchResult("", "https://potatoesusa.com/", ""),
]


def spans(text: str, citations: list[JsonObject]) -> list[tuple[str, str]]:
    return [(text[c["start_index"] : c["end_index"]], c["url"]) for c in citations]


def test_url_citations_of_bare_urls() -> None:
    text = (
        f"Read {WIKI.url}. Also https://potatoesusa.com, and again {WIKI.url}/ "
        "and https://en.wikipedia.org/wiki/Potatoes (not a source)."
    )
    citations = url_citations(text, SOURCES)
    assert spans(text, citations) == [
        (WIKI.url, WIKI.url),
        ("https://potatoesusa.com", "https://potatoesusa.com/"),
        (f"{WIKI.url}/", WIKI.url),
    ]
    assert citations[0] == {
        "type": "url_citation",
        "start_index": 5,
        "end_index": 5 + len(WIKI.url),
        "url": WIKI.url,
        "title": "Potato - Wikipedia",
    }
    assert citations[1]["title"] == "https://potatoesusa.com/"  # a source without a title


def test_url_citations_of_markdown_links() -> None:
    spud = "https://en.wikipedia.org/wiki/Spud_(disambiguation)"
    text = (
        f"**Potatoes** ([Wikipedia]({WIKI.url})) and [spuds]({spud}); "
        f"also [USA](<https://potatoesusa.com/>), [elsewhere](https://example.com/{WIKI.url})."
    )
    citations = url_citations(text, SOURCES)
    assert spans(text, citations) == [
        (f"[Wikipedia]({WIKI.url})", WIKI.url),
        (f"[spuds]({spud})", spud),
        ("[USA](<https://potatoesusa.com/>)", "https://potatoesusa.com/"),
    ]
    assert [c["title"] for c in citations] == [
        "Potato - Wikipedia",
        "Spud (disambiguation)",
        "USA",  # the link's text when the source has no title
    ]
    bare = f"See {spud}."
    assert spans(bare, url_citations(bare, SOURCES)) == [(spud, spud)]


def test_url_citations_need_a_matching_source() -> None:
    assert url_citations("no links here", SOURCES) == []
    assert url_citations(f"{WIKI.url}", []) == []
    text = "https://en.wikipedia.org/wiki/Potato_salad and http://EN.wikipedia.org/wiki/Potato#x"
    assert spans(text, url_citations(text, SOURCES)) == [
        ("http://EN.wikipedia.org/wiki/Potato#x", WIKI.url)
    ]
    unicode = f"Ünïcode first — {WIKI.url}"
    [citation] = url_citations(unicode, SOURCES)
    assert unicode[citation["start_index"] : citation["end_index"]] == WIKI.url
