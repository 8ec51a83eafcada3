"""The Tavily web search backend (``web_search_provider = "tavily"``)."""

from __future__ import annotations

from app.protocol.json_types import JsonObject
from app.tools.web_search.backend import HttpSearchProvider, date_of, entries, result_of
from app.tools.web_search.results import SearchResult, plain_text


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
        response = await self._post(
            "/search",
            body=body,
            headers={"Authorization": f"Bearer {self.api_key}", "Accept": "application/json"},
        )
        answer = self._json(response)
        return [
            result_of(
                entry,
                snippet=plain_text(entry.get("content")),
                published=date_of(entry.get("published_date")),
            )
            for entry in entries(answer.get("results"))
        ]
