"""``WebSearchExecutor``: one request's ``web_search`` function, run by the tool loop.

A call's queries (``query``, or several ``queries``) go to the ``SearchProvider``
concurrently; the model reads the numbered results (``format_results``), the client sees a
``web_search_call`` item whose ``action`` is OpenAI's ``{"type": "search", "query",
"queries"?, "sources"?}``. A search that fails or times out is an error result for the model
(the item's status ``failed``), never a failed response.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass

from app.core.ids import new_id
from app.core.tools import CallPresentation, GatewayCall, ToolResult, error_kind_of
from app.protocol.json_types import JsonObject
from app.tools.web_search.arguments import lenient, parse_arguments
from app.tools.web_search.citations import FoundSources
from app.tools.web_search.results import SearchError, SearchProvider, SearchResult, truncate

logger = logging.getLogger(__name__)

MAX_QUERIES = 5
# Characters of each result's snippet the model reads, by ``search_context_size``.
SNIPPET_CHARS = {"low": 300, "medium": 600, "high": 1200}

# OpenAI has no ``response.web_search_call.failed``: a failed search ends with ``completed``
# and the item's status says ``failed``.
PRESENTATION = CallPresentation(
    opened_events=("response.web_search_call.in_progress",),
    arguments_events=None,
    running_events=("response.web_search_call.searching",),
    completed_event="response.web_search_call.completed",
    failed_event="response.web_search_call.completed",
)


# ----------------------------------------------------------------------------- results


def format_results(
    outcomes: list[tuple[str, list[SearchResult] | SearchError]],
    *,
    context_size: str,
    dropped: int = 0,
) -> str:
    """What the model reads: each query's results, numbered across queries (a URL already
    listed for an earlier query is not repeated)."""
    snippet_chars = SNIPPET_CHARS.get(context_size, SNIPPET_CHARS["medium"])
    seen: set[str] = set()
    number = 0
    sections: list[str] = []
    for query, outcome in outcomes:
        if isinstance(outcome, SearchError):
            sections.append(f'The search for "{query}" failed: {outcome}')
            continue
        fresh = [r for r in outcome if r.url not in seen]
        seen.update(r.url for r in fresh)
        if not outcome:
            sections.append(f'No results for "{query}".')
            continue
        if not fresh:
            sections.append(f'The results for "{query}" are the ones listed above.')
            continue
        lines = [f'Results for "{query}":']
        for result in fresh:
            number += 1
            lines.append("")
            lines.append(f"[{number}] {result.title or result.url}")
            lines.append(f"URL: {result.url}")
            if result.published:
                lines.append(f"Published: {result.published}")
            if result.snippet:
                lines.append(truncate(result.snippet, snippet_chars))
            if result.page_text:
                lines.append("Page text:")
                lines.append(result.page_text)
        sections.append("\n".join(lines))
    if dropped:
        sections.append(f"(Only the first {MAX_QUERIES} queries were run; {dropped} skipped.)")
    if number:
        sections.append("Cite the results you use as markdown links: [title](URL).")
    return "\n\n".join(sections)


# ----------------------------------------------------------------------------- executor


@dataclass(frozen=True, slots=True)
class WebSearchOptions:
    """One request's ``web_search`` tool, validated."""

    allowed_domains: list[str] | None = None
    user_location: JsonObject | None = None
    context_size: str = "medium"
    include_sources: bool = False
    max_results: int = 5


class WebSearchExecutor:
    """The ``web_search`` function of one request (``core.ports.ToolExecutor``)."""

    presentation = PRESENTATION

    def __init__(
        self,
        search: SearchProvider | None,
        options: WebSearchOptions,
        found: FoundSources | None = None,
    ) -> None:
        self._search = search
        self.options = options
        self._found = found or FoundSources()

    @property
    def found(self) -> list[SearchResult]:
        """Every result this request's searches returned so far (for citations)."""
        return list(self._found.results)

    def _item(self, call: GatewayCall, action: JsonObject, status: str) -> JsonObject:
        return {
            "id": call.item_id or new_id("ws"),
            "type": "web_search_call",
            "status": status,
            "action": action,
        }

    def open_item(self, call: GatewayCall) -> JsonObject:
        request = lenient(call.arguments)
        action = request.action() if request.queries else {"type": "search"}
        return self._item(call, action, "in_progress")

    def approval_item(self, call: GatewayCall) -> JsonObject | None:
        return None  # web search runs without approval

    def error_result(self, call: GatewayCall, message: str, *, status: str) -> ToolResult:
        action = lenient(call.arguments).action()
        if self.options.include_sources:
            action["sources"] = []
        return ToolResult(
            item=self._item(call, action, status),
            model_output=f"Error: {message}",
            ok=False,
            preview=message,
            error_kind=error_kind_of(status),
        )

    async def run(self, call: GatewayCall, *, timeout: float) -> ToolResult:  # noqa: ASYNC109
        search = self._search
        if search is None:
            return self.error_result(
                call, "web search is not available in this request", status="failed"
            ).with_kind("unavailable")
        try:
            request = parse_arguments(call.arguments)
        except ValueError as exc:
            return self.error_result(
                call, f"invalid web_search arguments: {exc}", status="failed"
            ).with_kind("invalid_arguments")
        queries = request.queries[:MAX_QUERIES]
        try:
            async with asyncio.timeout(timeout):
                outcomes = await asyncio.gather(*(self._one(search, q) for q in queries))
        except TimeoutError:
            return self.error_result(
                call, f"the web search timed out after {timeout:g} s", status="failed"
            ).with_kind("timeout")
        pairs = list(zip(queries, outcomes, strict=True))
        results = [r for outcome in outcomes if isinstance(outcome, list) for r in outcome]
        if all(isinstance(outcome, SearchError) for outcome in outcomes):
            message = "; ".join(str(o) for o in outcomes)
            logger.warning("web search failed", extra={"tool": call.name, "error": message})
            return self.error_result(
                call, f"the web search failed: {message}", status="failed"
            ).with_kind("search_failed")
        self._found.add(results)
        action = request.action()
        if self.options.include_sources:
            urls = list(dict.fromkeys(r.url for r in results))
            action["sources"] = [{"type": "url", "url": url} for url in urls]
        text = format_results(
            pairs,
            context_size=self.options.context_size,
            dropped=len(request.queries) - len(queries),
        )
        preview = f"{len({r.url for r in results})} results for {', '.join(queries)}"
        return ToolResult(
            item=self._item(call, action, "completed"),
            model_output=text,
            ok=True,
            preview=preview,
        )

    async def _one(self, search: SearchProvider, query: str) -> list[SearchResult] | SearchError:
        try:
            return await search.search(
                query,
                max_results=self.options.max_results,
                allowed_domains=self.options.allowed_domains,
                user_location=self.options.user_location,
                context_size=self.options.context_size,
            )
        except SearchError as exc:
            return exc
