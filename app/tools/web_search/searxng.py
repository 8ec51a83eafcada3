"""The SearXNG web search backend (``web_search_provider = "searxng"``)."""

from __future__ import annotations

from app.protocol.json_types import JsonObject
from app.tools.web_search.backend import HttpSearchProvider, date_of, entries, result_of
from app.tools.web_search.domains import with_sites
from app.tools.web_search.results import SearchError, SearchResult, plain_text


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
        response = await self._get(
            "/search",
            params={"q": with_sites(query, domains), "format": "json", "pageno": 1},
            headers=headers,
        )
        if response.status == 403:
            raise SearchError(
                "SearXNG refused the JSON format (HTTP 403): enable 'json' in the instance's "
                "search.formats"
            )
        body = self._json(response)
        return [
            result_of(
                entry,
                snippet=plain_text(entry.get("content")),
                published=date_of(entry.get("publishedDate")),
            )
            for entry in entries(body.get("results"))
        ]
