"""Web search run by the gateway: ``{"type": "web_search" | "web_search_preview", ...}`` tools.

``WebSearchToolProvider`` offers the upstream one function tool, ``web_search`` (another name
only when the client has a function of that name), taking a ``query`` or several ``queries``
(Qwen3.5 batches related queries in one call; gpt-oss sends one ``query``). Each call is a
``WebSearchExecutor`` run: the queries go to the configured ``SearchProvider``
(``tools.web_search.backend``) concurrently, the model reads the numbered results (title, URL,
date, snippet, page text when pages are fetched), and the client sees a ``web_search_call``
item (``response.web_search_call.in_progress`` / ``searching`` / ``completed``) whose
``action`` is OpenAI's ``{"type": "search", "query", "queries"?, "sources"?}``; ``sources``
only when the request's ``include`` asks for ``web_search_call.action.sources``. A search
that fails or times out is an error result for the model (the item's status ``failed``), never
a failed response.

The tool's ``filters.allowed_domains`` is enforced on every result, ``user_location`` and
``search_context_size`` are passed to the provider. Answers that cite what the searches found
(a result's URL, or a markdown link to it) get ``url_citation`` annotations: ``url_citations``
is the pure function, each request's annotator applies it to what that request found.
"""

from __future__ import annotations

import asyncio
import logging
import re
from collections.abc import Mapping
from dataclasses import dataclass
from urllib.parse import urlsplit

import orjson

from app.core.ids import new_id
from app.core.ports import CallPresentation, GatewayCall, ToolExecutor, ToolResult
from app.errors import InvalidRequestError
from app.protocol.json_types import JsonObject
from app.tools.registry import NameTable, ProviderTools
from app.tools.web_search.backend import (
    SearchError,
    SearchProvider,
    SearchResult,
    normalize_domains,
    truncate,
)

logger = logging.getLogger(__name__)

NAMESPACE = "web_search"
TOOL_TYPES = frozenset(
    {"web_search", "web_search_2025_08_26", "web_search_preview", "web_search_preview_2025_03_11"}
)
ITEM_TYPES = frozenset({"web_search_call"})
INCLUDE_SOURCES = "web_search_call.action.sources"
MAX_QUERIES = 5
UNAVAILABLE = (
    "web search is not configured on this gateway (the operator has to set web_search_provider)"
)
CONTEXT_SIZES = ("low", "medium", "high")
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

PARAMETERS: JsonObject = {
    "type": "object",
    "properties": {
        "query": {"type": "string", "description": "What to search the web for."},
        "queries": {
            "type": "array",
            "items": {"type": "string"},
            "description": "Several related searches to run at once (instead of `query`).",
        },
    },
}

DESCRIPTION = (
    "Search the web. Use it for current information: news and recent events, prices, "
    "releases, facts that may have changed since your training, or anything you are unsure "
    "about. Pass one `query`, or several `queries` to run related searches at once. Returns "
    "numbered results with title, URL and text; cite the ones you use as markdown links."
)


# ----------------------------------------------------------------------------- arguments


@dataclass(frozen=True, slots=True)
class SearchRequest:
    """The queries of one call; ``batched`` when the model passed ``queries``."""

    queries: list[str]
    batched: bool

    def action(self) -> JsonObject:
        action: JsonObject = {"type": "search", "query": self.queries[0] if self.queries else ""}
        if self.batched:
            action["queries"] = list(self.queries)
        return action


def parse_arguments(arguments: str) -> SearchRequest:
    """The call's queries (``query`` first, then ``queries``, duplicates dropped); raises
    ``ValueError`` when there is none."""
    try:
        value = orjson.loads(arguments) if arguments.strip() else {}
    except orjson.JSONDecodeError:
        # A model that sent the bare query instead of JSON.
        value = {"query": arguments.strip()}
    if isinstance(value, str):
        value = {"query": value}
    if not isinstance(value, dict):
        raise ValueError("the arguments must be a JSON object with 'query' or 'queries'")
    found: list[str] = []
    single = value.get("query")
    if isinstance(single, str) and single.strip():
        found.append(single.strip())
    many = value.get("queries")
    batched = isinstance(many, list)
    if isinstance(many, str):
        many = [many]
        batched = True
    for entry in many if isinstance(many, list) else []:
        if isinstance(entry, str) and entry.strip() and entry.strip() not in found:
            found.append(entry.strip())
    if not found:
        raise ValueError("give a non-empty 'query' (or 'queries')")
    return SearchRequest(found, batched)


def _lenient(arguments: str) -> SearchRequest:
    try:
        return parse_arguments(arguments)
    except ValueError:
        return SearchRequest([], False)


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


class _Found:
    """What one request's searches returned, for its answer's citations."""

    def __init__(self) -> None:
        self.results: list[SearchResult] = []

    def add(self, results: list[SearchResult]) -> None:
        known = {r.url for r in self.results}
        self.results.extend(r for r in results if r.url not in known)

    def annotate(self, text: str) -> list[JsonObject]:
        return url_citations(text, self.results) if self.results else []


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
        found: _Found | None = None,
    ) -> None:
        self._search = search
        self.options = options
        self._found = found or _Found()

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
        request = _lenient(call.arguments)
        action = request.action() if request.queries else {"type": "search"}
        return self._item(call, action, "in_progress")

    def approval_item(self, call: GatewayCall) -> JsonObject | None:
        return None  # web search runs without approval

    def error_result(self, call: GatewayCall, message: str, *, status: str) -> ToolResult:
        action = _lenient(call.arguments).action()
        if self.options.include_sources:
            action["sources"] = []
        return ToolResult(
            item=self._item(call, action, status),
            model_output=f"Error: {message}",
            ok=False,
            preview=message,
        )

    async def run(self, call: GatewayCall, *, timeout: float) -> ToolResult:  # noqa: ASYNC109
        search = self._search
        if search is None:
            return self.error_result(
                call, "web search is not available in this request", status="failed"
            )
        try:
            request = parse_arguments(call.arguments)
        except ValueError as exc:
            return self.error_result(call, f"invalid web_search arguments: {exc}", status="failed")
        queries = request.queries[:MAX_QUERIES]
        try:
            async with asyncio.timeout(timeout):
                outcomes = await asyncio.gather(*(self._one(search, q) for q in queries))
        except TimeoutError:
            return self.error_result(
                call, f"the web search timed out after {timeout:g} s", status="failed"
            )
        pairs = list(zip(queries, outcomes, strict=True))
        results = [r for outcome in outcomes if isinstance(outcome, list) for r in outcome]
        if all(isinstance(outcome, SearchError) for outcome in outcomes):
            message = "; ".join(str(o) for o in outcomes)
            logger.warning("web search failed", extra={"tool": call.name, "error": message})
            return self.error_result(call, f"the web search failed: {message}", status="failed")
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


# ----------------------------------------------------------------------------- provider


class WebSearchToolProvider:
    """The ``web_search`` tool types (``tools.registry.ToolProvider``).

    ``search`` is ``None`` when the gateway has no search backend: the provider is then
    ``unavailable`` and the registry drops, refuses or forwards the request's web search tools
    (``tools.hosted``); history items are still lowered.
    """

    tool_types = TOOL_TYPES
    item_types = ITEM_TYPES
    namespace = NAMESPACE

    def __init__(self, search: SearchProvider | None, *, max_results: int = 5) -> None:
        self.search = search
        self.max_results = max_results

    def unavailable(self) -> str | None:
        return UNAVAILABLE if self.search is None else None

    async def prepare(
        self,
        tools: list[tuple[int, JsonObject]],
        history: list[JsonObject],
        new_input: list[JsonObject],
        names: NameTable,
        request: JsonObject,
    ) -> ProviderTools:
        out = ProviderTools()
        if not tools:
            return out
        if self.search is None:  # the registry sends no tools to an unavailable provider
            raise InvalidRequestError(
                f"{UNAVAILABLE.capitalize()}.", param=f"tools[{tools[0][0]}]", code="invalid_value"
            )
        include = request.get("include")
        include_sources = isinstance(include, list) and INCLUDE_SOURCES in include
        options = [
            _options(index, tool, include_sources=include_sources, max_results=self.max_results)
            for index, tool in tools
        ]
        name = names.claim(NAMESPACE)
        found = _Found()
        out.executors[name] = WebSearchExecutor(self.search, options[0], found)
        description = DESCRIPTION
        if options[0].allowed_domains:
            description += " Results come only from: " + ", ".join(options[0].allowed_domains)
        out.upstream_tools.append(
            {
                "type": "function",
                "name": name,
                "description": description,
                "parameters": PARAMETERS,
                "strict": False,
            }
        )
        out.annotators.append(found.annotate)
        return out

    def unknown_executor(self, name: str) -> ToolExecutor:
        return WebSearchExecutor(None, WebSearchOptions())

    def choice_names(
        self, choice: JsonObject, executors: Mapping[str, ToolExecutor]
    ) -> list[str] | None:
        return [n for n, e in executors.items() if isinstance(e, WebSearchExecutor)]

    def lower(self, items: list[JsonObject], names: NameTable) -> list[JsonObject]:
        if not any(item.get("type") in ITEM_TYPES for item in items):
            return items
        return lower_web_search_items(items, names.claim(NAMESPACE))


def _options(
    index: int, tool: JsonObject, *, include_sources: bool, max_results: int
) -> WebSearchOptions:
    """The tool's fields, checked (a wrong one is a 400 naming it)."""
    filters = tool.get("filters")
    domains: list[str] | None = None
    if filters is not None:
        if not isinstance(filters, dict):
            raise _invalid(index, "filters", "'filters' must be an object.")
        allowed = filters.get("allowed_domains")
        if allowed is not None:
            if not isinstance(allowed, list) or not all(isinstance(d, str) for d in allowed):
                raise _invalid(
                    index,
                    "filters.allowed_domains",
                    "'filters.allowed_domains' must be a list of domain names.",
                )
            domains = normalize_domains(allowed) or None
    location = tool.get("user_location")
    if location is not None and not isinstance(location, dict):
        raise _invalid(index, "user_location", "'user_location' must be an object.")
    size = tool.get("search_context_size")
    if size is None:
        size = "medium"
    if size not in CONTEXT_SIZES:
        raise _invalid(
            index,
            "search_context_size",
            "'search_context_size' must be one of 'low', 'medium' or 'high'.",
        )
    return WebSearchOptions(
        allowed_domains=domains,
        user_location=location,
        context_size=str(size),
        include_sources=include_sources,
        max_results=max_results,
    )


def _invalid(index: int, field: str, message: str) -> InvalidRequestError:
    return InvalidRequestError(message, param=f"tools[{index}].{field}", code="invalid_value")


# ----------------------------------------------------------------------------- lowering


def lower_web_search_items(items: list[JsonObject], name: str) -> list[JsonObject]:
    """``web_search_call`` items as the upstream reads them: a ``function_call`` to ``name``
    with the search's queries, and a ``function_call_output`` (the results themselves are not
    kept in the conversation; their sources are listed when the item has them)."""
    out: list[JsonObject] = []
    for item in items:
        if item.get("type") not in ITEM_TYPES:
            out.append(item)
            continue
        call_id = str(item.get("id") or new_id("ws"))
        action = item.get("action")
        action = action if isinstance(action, dict) else {}
        arguments: JsonObject
        if action.get("type", "search") == "search":
            arguments = {"query": action.get("query") or ""}
            if isinstance(action.get("queries"), list):
                arguments["queries"] = action["queries"]
        else:
            arguments = {k: v for k, v in action.items() if k not in ("type", "sources")}
        out.append(
            {
                "type": "function_call",
                "call_id": call_id,
                "name": name,
                "arguments": orjson.dumps(arguments).decode(),
                "status": "completed",
            }
        )
        out.append({"type": "function_call_output", "call_id": call_id, "output": _summary(item)})
    return out


def _summary(item: JsonObject) -> str:
    if item.get("status") in ("failed", "incomplete"):
        return "Error: this web search did not complete."
    action = item.get("action")
    sources = action.get("sources") if isinstance(action, dict) else None
    urls = [str(s.get("url")) for s in sources or [] if isinstance(s, dict) and s.get("url")]
    text = "(The results of this search are not kept in the conversation.)"
    if urls:
        text += " Sources:\n" + "\n".join(f"[{n}] {url}" for n, url in enumerate(urls, 1))
    return text
