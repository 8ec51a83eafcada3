"""``file_search``: search the request's vector stores between inference rounds.

The upstream sees one function tool, ``file_search`` (its name when free), taking ``queries``
(or a single ``query``, which is what models such as gpt-oss tend to send). A call becomes a
``file_search_call`` item (events ``response.file_search_call.in_progress / searching /
completed``) whose ``results`` the client sees only with
``include: ["file_search_call.results"]``, as with OpenAI. The model reads the results as
numbered passages with their filenames; an answer that names a file it was given gets a
``file_citation`` annotation there.

A request searches only its tenant's vector stores (``ToolContext.tenant``): naming another
tenant's store answers exactly as naming one that does not exist (OpenAI's 404 before any
inference; a ``failed`` call should it vanish meanwhile).
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, Protocol

import orjson

from app.core.ids import new_id
from app.core.observe import preview_of
from app.core.tools import (
    CallPresentation,
    GatewayCall,
    ProviderTools,
    ToolExecutor,
    ToolKindSpec,
    ToolNames,
    ToolRequest,
    ToolResult,
    error_kind_of,
)
from app.errors import GatewayError, InvalidRequestError
from app.files.filters import validate_filter
from app.files.requests import SearchRequest, parse_search
from app.protocol.items import ItemKind
from app.protocol.json_types import JsonObject

NAMESPACE = "file_search"
INCLUDE_RESULTS = "file_search_call.results"
DEFAULT_MAX_RESULTS = 10
_PASSAGE_CHARS = 4000

PRESENTATION = CallPresentation(
    opened_events=("response.file_search_call.in_progress",),
    arguments_events=None,
    running_events=("response.file_search_call.searching",),
    completed_event="response.file_search_call.completed",
    # OpenAI has no failed event for file search: the item's status says it.
    failed_event="response.file_search_call.completed",
)

PARAMETERS: JsonObject = {
    "type": "object",
    "properties": {
        "queries": {
            "type": "array",
            "items": {"type": "string"},
            "description": "One or more search queries.",
        },
        "query": {"type": "string", "description": "A search query."},
    },
}

DESCRIPTION = (
    "Search the user's uploaded files for passages relevant to the queries. Use it for any "
    "question the files may answer. Cite a file by its filename."
)


class VectorStoreSearch(Protocol):
    """What file search needs of the vector stores (``files.search.SearchService``), each call
    as one tenant's."""

    async def search(
        self, vector_store_id: str, request: SearchRequest, *, tenant: str
    ) -> JsonObject:
        """``POST /v1/vector_stores/{id}/search`` (its page object); raises ``GatewayError``."""
        ...

    async def check_vector_store(self, vector_store_id: str, *, tenant: str) -> None:
        """Raise OpenAI's 404 (``GatewayError``) when ``tenant`` has no vector store with this
        id."""
        ...


# One tenant's search of one vector store (``VectorStoreSearch.search`` bound to the tenant).
TenantSearch = Callable[[str, SearchRequest], Awaitable[JsonObject]]


class _Citations:
    """The files this response's searches returned, for ``file_citation`` annotations."""

    def __init__(self) -> None:
        self.files: dict[str, str] = {}  # filename -> file_id

    def add(self, results: list[JsonObject]) -> None:
        for result in results:
            name, file_id = result.get("filename"), result.get("file_id")
            if isinstance(name, str) and name and isinstance(file_id, str):
                self.files.setdefault(name, file_id)

    def annotate(self, text: str) -> list[JsonObject]:
        found: list[JsonObject] = []
        for filename, file_id in self.files.items():
            start = text.find(filename)
            while start >= 0:
                end = start + len(filename)
                found.append(
                    {
                        "type": "file_citation",
                        "file_id": file_id,
                        "filename": filename,
                        "index": end,
                    }
                )
                start = text.find(filename, end)
        return sorted(found, key=lambda a: int(a["index"]))


def _queries(arguments: str) -> list[str]:
    value = orjson.loads(arguments) if arguments.strip() else {}
    if not isinstance(value, dict):
        raise ValueError("the arguments must be a JSON object")
    queries = value.get("queries")
    out = (
        [q for q in queries if isinstance(q, str) and q.strip()]
        if isinstance(queries, list)
        else []
    )
    single = value.get("query")
    if isinstance(single, str) and single.strip():
        out.insert(0, single)
    if not out:
        raise ValueError("give at least one query")
    return out


def format_results(results: list[JsonObject]) -> str:
    """The passages as the model reads them."""
    if not results:
        return "No results found in the files."
    lines = []
    for number, result in enumerate(results, start=1):
        text = str(result.get("text") or "")[:_PASSAGE_CHARS]
        lines.append(
            f"[{number}] {result.get('filename')} (file_id: {result.get('file_id')}, "
            f"score: {float(result.get('score') or 0):.3f})\n{text}"
        )
    return "\n\n".join(lines)


class FileSearchExecutor:
    """One ``file_search`` tool of a request (``core.ports.ToolExecutor``): ``search`` is the
    request's tenant's (``None``: file search is not available)."""

    presentation = PRESENTATION

    def __init__(
        self,
        search: TenantSearch | None,
        tool: JsonObject,
        *,
        include_results: bool,
        citations: _Citations,
    ) -> None:
        self._search = search
        self._tool = tool
        self._include_results = include_results
        self._citations = citations

    def _item(self, call: GatewayCall, **fields: Any) -> JsonObject:
        item: JsonObject = {
            "id": call.item_id or new_id("fs"),
            "type": "file_search_call",
            "status": "in_progress",
            "queries": [],
            "results": None,
        }
        return item | fields

    def open_item(self, call: GatewayCall) -> JsonObject:
        return self._item(call)

    def approval_item(self, call: GatewayCall) -> JsonObject | None:
        return None  # file search runs without approval

    def error_result(self, call: GatewayCall, message: str, *, status: str) -> ToolResult:
        item = self._item(call, status=status, queries=_safe_queries(call.arguments))
        return ToolResult(
            item=item,
            model_output=f"Error: {message}",
            ok=False,
            preview=message,
            error_kind=error_kind_of(status),
        )

    async def run(self, call: GatewayCall, *, timeout: float) -> ToolResult:  # noqa: ASYNC109
        try:
            queries = _queries(call.arguments)
        except (orjson.JSONDecodeError, ValueError) as exc:
            return self.error_result(call, f"invalid arguments: {exc}", status="failed").with_kind(
                "invalid_arguments"
            )
        if self._search is None:
            return self.error_result(
                call, "file search is not available", status="failed"
            ).with_kind("unavailable")
        limit = int(self._tool.get("max_num_results") or DEFAULT_MAX_RESULTS)
        body: JsonObject = {"max_num_results": limit}
        for key in ("filters", "ranking_options"):
            if self._tool.get(key) is not None:
                body[key] = self._tool[key]
        try:
            requests = [parse_search({**body, "query": query}) for query in queries]
        except GatewayError as exc:
            return self.error_result(call, exc.message, status="failed").with_kind(
                "invalid_arguments"
            )
        jobs = [
            self._search(store_id, request)
            for store_id in self._tool.get("vector_store_ids") or []
            for request in requests
        ]
        try:
            async with asyncio.timeout(timeout):
                pages = await asyncio.gather(*jobs)
        except TimeoutError:
            return self.error_result(
                call, f"the search timed out after {timeout:g} s", status="failed"
            ).with_kind("timeout")
        except GatewayError as exc:
            return self.error_result(call, exc.message, status="failed").with_kind("search_failed")
        results = _merge(pages, limit)
        self._citations.add(results)
        item = self._item(
            call,
            status="completed",
            queries=queries,
            results=results if self._include_results else None,
        )
        text = format_results(results)
        return ToolResult(item=item, model_output=text, ok=True, preview=preview_of(text))


def _safe_queries(arguments: str) -> list[str]:
    try:
        return _queries(arguments)
    except (orjson.JSONDecodeError, ValueError):
        return []


def _merge(pages: list[JsonObject], limit: int) -> list[JsonObject]:
    """Every store's and query's hits, best first, each passage once."""
    best: dict[tuple[str, str], JsonObject] = {}
    for page in pages:
        for hit in page.get("data") or []:
            text = "\n".join(
                str(part.get("text") or "")
                for part in hit.get("content") or []
                if isinstance(part, dict)
            )
            result = {
                "file_id": hit.get("file_id"),
                "filename": hit.get("filename"),
                "score": float(hit.get("score") or 0.0),
                "text": text,
                "attributes": hit.get("attributes") or {},
            }
            key = (str(result["file_id"]), text)
            if key not in best or best[key]["score"] < result["score"]:
                best[key] = result
    return sorted(best.values(), key=lambda r: -float(r["score"]))[:limit]


class FileSearchToolProvider:
    """The ``file_search`` tool type (``core.tools.ToolProvider``)."""

    spec = ToolKindSpec(
        namespace=NAMESPACE,
        tool_types=frozenset({"file_search"}),
        items=(ItemKind("file_search_call", "fs"),),
        include=frozenset({INCLUDE_RESULTS}),
    )

    def __init__(self, search: VectorStoreSearch | None) -> None:
        self._search = search

    def unavailable(self) -> str | None:
        return "file search has no vector stores on this gateway" if self._search is None else None

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
        include = request.body.get("include") or []
        citations = _Citations()
        tenant = request.context.tenant
        search: TenantSearch | None = None
        if self._search is not None:
            search = functools.partial(self._search.search, tenant=tenant)
        for index, tool in tools:
            _check_tool(index, tool)
            await self._check_stores(index, tool["vector_store_ids"], tenant)
            name = names.claim(NAMESPACE)
            out.executors[name] = FileSearchExecutor(
                search,
                tool,
                include_results=INCLUDE_RESULTS in include,
                citations=citations,
            )
            out.upstream_tools.append(
                {
                    "type": "function",
                    "name": name,
                    "description": DESCRIPTION,
                    "parameters": PARAMETERS,
                    "strict": False,
                }
            )
        out.annotators.append(citations.annotate)
        return out

    async def _check_stores(self, index: int, store_ids: list[str], tenant: str) -> None:
        """A store ``tenant`` does not have (none, or another tenant's) is the client's
        mistake: a 404 before any inference, as OpenAI answers (one that vanishes later makes
        a failed ``file_search_call``)."""
        if self._search is None:
            return
        for position, store_id in enumerate(store_ids):
            try:
                await self._search.check_vector_store(store_id, tenant=tenant)
            except GatewayError as exc:
                exc.param = f"tools[{index}].vector_store_ids[{position}]"
                raise

    def unknown_executor(self, name: str) -> ToolExecutor:
        return FileSearchExecutor(None, {}, include_results=False, citations=_Citations())

    def choice_names(
        self, choice: JsonObject, executors: Mapping[str, ToolExecutor]
    ) -> list[str] | None:
        return [n for n, e in executors.items() if isinstance(e, FileSearchExecutor)]

    def lower(self, items: list[JsonObject], names: ToolNames) -> list[JsonObject]:
        out: list[JsonObject] = []
        for item in items:
            if item.get("type") != "file_search_call":
                out.append(item)
                continue
            call_id = str(item.get("id"))
            arguments = orjson.dumps({"queries": item.get("queries") or []}).decode()
            results = item.get("results")
            output = (
                format_results(results)
                if isinstance(results, list)
                else "(the results of this search were not kept in the conversation)"
            )
            out.append(
                {
                    "type": "function_call",
                    "call_id": call_id,
                    "name": NAMESPACE,
                    "arguments": arguments,
                    "status": "completed",
                }
            )
            out.append({"type": "function_call_output", "call_id": call_id, "output": output})
        return out


def _check_tool(index: int, tool: JsonObject) -> None:
    ids = tool.get("vector_store_ids")
    if not isinstance(ids, list) or not ids or not all(isinstance(i, str) for i in ids):
        raise InvalidRequestError(
            "file_search needs 'vector_store_ids': a non-empty list of vector store ids.",
            param=f"tools[{index}].vector_store_ids",
            code="invalid_value",
        )
    limit = tool.get("max_num_results")
    if limit is not None and (not isinstance(limit, int) or not 1 <= limit <= 50):
        raise InvalidRequestError(
            "'max_num_results' must be an integer between 1 and 50.",
            param=f"tools[{index}].max_num_results",
            code="invalid_value",
        )
    if tool.get("filters") is not None:
        try:
            validate_filter(tool["filters"])
        except ValueError as exc:
            raise InvalidRequestError(
                f"Invalid 'filters': {exc}", param=f"tools[{index}].filters", code="invalid_value"
            ) from None
