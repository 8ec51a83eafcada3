"""The You.com web search backend (``web_search_provider = "you"``)."""

from __future__ import annotations

from app.protocol.json_types import JsonObject
from app.tools.web_search.backend import HttpSearchProvider, date_of, entries, result_of
from app.tools.web_search.domains import country_of
from app.tools.web_search.results import SearchResult, plain_text


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
        country = country_of(user_location)
        if country:
            params["country"] = country
        response = await self._get(
            "/v1/search",
            params=params,
            headers={"X-API-Key": str(self.api_key), "Accept": "application/json"},
        )
        body = self._json(response)
        sections = body.get("results")
        web = sections.get("web") if isinstance(sections, dict) else None
        results: list[SearchResult] = []
        for entry in entries(web):
            snippets = [plain_text(s) for s in entry.get("snippets") or [] if isinstance(s, str)]
            if context_size != "high":
                snippets = snippets[:1]
            snippet = " … ".join(s for s in snippets if s) or plain_text(entry.get("description"))
            results.append(
                result_of(entry, snippet=snippet, published=date_of(entry.get("page_age")))
            )
        return results
