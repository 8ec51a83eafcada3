"""Search results and a hand-written ``SearchProvider`` for the web search tests."""

from __future__ import annotations

import asyncio

from app.protocol.json_types import JsonObject
from app.tools.web_search.results import SearchResult

WIKI = SearchResult(
    "Potato - Wikipedia",
    "https://en.wikipedia.org/wiki/Potato",
    "The potato is a starchy tuberous vegetable native to the Americas.",
)
GOODNESS = SearchResult(
    "Potato Nutrition Facts",
    "https://potatogoodness.com/nutrition/",
    "A medium potato has 110 calories.",
    published="2025-03-01",
)
TOMATO = SearchResult(
    "Tomatoes: Nutrition Facts",
    "https://www.healthline.com/nutrition/tomatoes",
    "Tomatoes are rich in lycopene.",
)


class FakeSearch:
    """A ``SearchProvider`` answering from a table (an exception raises), recording calls."""

    name = "fake"

    def __init__(
        self, answers: dict[str, list[SearchResult] | Exception] | None = None, delay: float = 0
    ) -> None:
        self.answers = answers if answers is not None else {"potato": [WIKI, GOODNESS]}
        self.delay = delay
        self.calls: list[JsonObject] = []

    async def search(
        self,
        query: str,
        *,
        max_results: int,
        allowed_domains: list[str] | None,
        user_location: JsonObject | None,
        context_size: str | None,
    ) -> list[SearchResult]:
        self.calls.append(
            {
                "query": query,
                "max_results": max_results,
                "allowed_domains": allowed_domains,
                "user_location": user_location,
                "context_size": context_size,
            }
        )
        if self.delay:
            await asyncio.sleep(self.delay)
        answer = self.answers.get(query, [])
        if isinstance(answer, Exception):
            raise answer
        return answer[:max_results]

    async def aclose(self) -> None:
        return None
