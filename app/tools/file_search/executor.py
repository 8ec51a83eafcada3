"""``FileSearchExecutor``: one request's ``file_search`` function, run by the tool loop.

A call's queries run against each of the tool's vector stores (``VectorStoreSearch``, what
file search needs of the vector stores); the best passages, each once, become a
``file_search_call`` item and the numbered passages the model reads (``format_results``).
``FileCitations`` collects the files a response's searches returned, for its
``file_citation`` annotations.
"""

from __future__ import annotations

import asyncio
from typing import Any, Protocol

import orjson

from app.core.ids import new_id
from app.core.observe import preview_of
from app.core.ports import CallPresentation, GatewayCall, ToolResult
from app.errors import GatewayError
from app.protocol.json_types import JsonObject

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


class VectorStoreSearch(Protocol):
    """What file search needs of the vector stores (``core.vector_stores``)."""

    async def search(self, vector_store_id: str, body: JsonObject) -> JsonObject:
        """``POST /v1/vector_stores/{id}/search`` (its page object); raises ``GatewayError``."""
        ...

    async def check_vector_store(self, vector_store_id: str) -> None:
        """Raise OpenAI's 404 (``GatewayError``) when no vector store has this id."""
        ...


class FileCitations:
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
    """One ``file_search`` tool of a request (``core.ports.ToolExecutor``)."""

    presentation = PRESENTATION

    def __init__(
        self,
        search: VectorStoreSearch | None,
        tool: JsonObject,
        *,
        include_results: bool,
        citations: FileCitations,
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
        return ToolResult(item=item, model_output=f"Error: {message}", ok=False, preview=message)

    async def run(self, call: GatewayCall, *, timeout: float) -> ToolResult:  # noqa: ASYNC109
        try:
            queries = _queries(call.arguments)
        except (orjson.JSONDecodeError, ValueError) as exc:
            return self.error_result(call, f"invalid arguments: {exc}", status="failed")
        if self._search is None:
            return self.error_result(call, "file search is not available", status="failed")
        limit = int(self._tool.get("max_num_results") or DEFAULT_MAX_RESULTS)
        body: JsonObject = {"max_num_results": limit}
        for key in ("filters", "ranking_options"):
            if self._tool.get(key) is not None:
                body[key] = self._tool[key]
        jobs = [
            self._search.search(store_id, {**body, "query": query})
            for store_id in self._tool.get("vector_store_ids") or []
            for query in queries
        ]
        try:
            async with asyncio.timeout(timeout):
                pages = await asyncio.gather(*jobs)
        except TimeoutError:
            return self.error_result(
                call, f"the search timed out after {timeout:g} s", status="failed"
            )
        except GatewayError as exc:
            return self.error_result(call, exc.message, status="failed")
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
