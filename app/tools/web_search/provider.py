"""Web search run by the gateway: ``{"type": "web_search" | "web_search_preview", ...}`` tools.

``WebSearchToolProvider`` offers the upstream one function tool, ``web_search`` (another name
only when the client has a function of that name), taking a ``query`` or several ``queries``
(Qwen3.5 batches related queries in one call; gpt-oss sends one ``query``). Each call is a
``WebSearchExecutor`` run (``executor``) against the configured ``SearchProvider``
(``backend``); the client sees a ``web_search_call`` item (``response.web_search_call.
in_progress`` / ``searching`` / ``completed``) whose ``action`` lists ``sources`` only when
the request's ``include`` asks for ``web_search_call.action.sources``.

The tool's ``filters.allowed_domains`` is enforced on every result, ``user_location`` and
``search_context_size`` are passed to the provider. Answers that cite what the searches found
get ``url_citation`` annotations (``citations``). History items are lowered here.
"""

from __future__ import annotations

from collections.abc import Mapping

import orjson

from app.core.ids import new_id
from app.core.tools import ProviderTools, ToolExecutor, ToolKindSpec, ToolNames, ToolRequest
from app.errors import InvalidRequestError
from app.protocol.items import ItemKind
from app.protocol.json_types import JsonObject
from app.tools.web_search.citations import FoundSources
from app.tools.web_search.domains import normalize_domains
from app.tools.web_search.executor import WebSearchExecutor, WebSearchOptions
from app.tools.web_search.results import SearchProvider

NAMESPACE = "web_search"
TOOL_TYPES = frozenset(
    {"web_search", "web_search_2025_08_26", "web_search_preview", "web_search_preview_2025_03_11"}
)
ITEM_TYPES = frozenset({"web_search_call"})
INCLUDE_SOURCES = "web_search_call.action.sources"
UNAVAILABLE = (
    "web search is not configured on this gateway (the operator has to set web_search_provider)"
)
CONTEXT_SIZES = ("low", "medium", "high")

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


# ----------------------------------------------------------------------------- provider


def fill_web_search_call(item: JsonObject) -> None:
    """A search's ``sources`` are ``{"type": "url", "url"}`` in OpenAI's schema; some servers
    that run web search themselves leave ``type`` out."""
    action = item.get("action")
    sources = action.get("sources") if isinstance(action, dict) else None
    for source in sources if isinstance(sources, list) else ():
        if isinstance(source, dict) and "url" in source:
            source.setdefault("type", "url")


class WebSearchToolProvider:
    """The ``web_search`` tool types (``core.tools.ToolProvider``).

    ``search`` is ``None`` when the gateway has no search backend: the provider is then
    ``unavailable`` and the toolkit drops, refuses or forwards the request's web search tools
    (``tools.hosted``); history items are still lowered.
    """

    spec = ToolKindSpec(
        namespace=NAMESPACE,
        tool_types=TOOL_TYPES,
        items=(ItemKind("web_search_call", "ws", fill_web_search_call),),
        include=frozenset({INCLUDE_SOURCES, "web_search_call.results"}),
    )

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
        request: ToolRequest,
    ) -> ProviderTools:
        names = request.names
        out = ProviderTools()
        if not tools:
            return out
        if self.search is None:  # the toolkit sends no tools to an unavailable provider
            raise InvalidRequestError(
                f"{UNAVAILABLE.capitalize()}.", param=f"tools[{tools[0][0]}]", code="invalid_value"
            )
        include = request.body.get("include")
        include_sources = isinstance(include, list) and INCLUDE_SOURCES in include
        options = [
            _options(index, tool, include_sources=include_sources, max_results=self.max_results)
            for index, tool in tools
        ]
        name = names.claim(NAMESPACE)
        found = FoundSources()
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

    def lower(self, items: list[JsonObject], names: ToolNames) -> list[JsonObject]:
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
