"""The web search backends by their ``web_search_provider`` name, and the factory the wiring
uses."""

from __future__ import annotations

from app.net.egress import EgressPolicy
from app.tools.web_search.backend import HttpSearchProvider
from app.tools.web_search.brave import BraveSearchProvider
from app.tools.web_search.results import SearchLimits
from app.tools.web_search.searxng import SearxngSearchProvider
from app.tools.web_search.tavily import TavilySearchProvider
from app.tools.web_search.you import YouSearchProvider

PROVIDERS: dict[str, type[HttpSearchProvider]] = {
    cls.name: cls
    for cls in (
        SearxngSearchProvider,
        TavilySearchProvider,
        BraveSearchProvider,
        YouSearchProvider,
    )
}


def create_search_provider(
    kind: str,
    *,
    base_url: str | None = None,
    api_key: str | None = None,
    limits: SearchLimits | None = None,
    egress: EgressPolicy | None = None,
) -> HttpSearchProvider:
    """The provider named by ``web_search_provider``, connecting where ``egress`` allows;
    raises ``ValueError`` for an unknown name or a missing base URL / API key."""
    cls = PROVIDERS.get(kind)
    if cls is None:
        raise ValueError(f"unknown web search provider {kind!r} (one of {', '.join(PROVIDERS)})")
    return cls(base_url=base_url, api_key=api_key, limits=limits, egress=egress)
