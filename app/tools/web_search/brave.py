"""The Brave Search web search backend (``web_search_provider = "brave"``)."""

from __future__ import annotations

from app.protocol.json_types import JsonObject
from app.tools.web_search.backend import HttpSearchProvider, date_of, entries, result_of
from app.tools.web_search.domains import country_of, with_sites
from app.tools.web_search.results import SearchResult, plain_text


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
        params: dict[str, str | int] = {"q": with_sites(query, domains), "count": count}
        country = country_of(user_location)
        if country:
            params["country"] = country
        response = await self._get(
            "/res/v1/web/search",
            params=params,
            headers={"X-Subscription-Token": str(self.api_key), "Accept": "application/json"},
        )
        body = self._json(response)
        web = body.get("web")
        results: list[SearchResult] = []
        for entry in entries(web.get("results") if isinstance(web, dict) else None):
            snippet = plain_text(entry.get("description"))
            if context_size == "high":
                extra = [plain_text(s) for s in entry.get("extra_snippets") or []]
                snippet = " … ".join(s for s in [snippet, *extra] if s)
            results.append(
                result_of(
                    entry,
                    snippet=snippet,
                    published=date_of(entry.get("page_age")) or date_of(entry.get("age")),
                )
            )
        return results
