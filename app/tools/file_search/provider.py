"""``file_search``: search the request's vector stores between inference rounds.

The upstream sees one function tool, ``file_search`` (its name when free), taking ``queries``
(or a single ``query``, which is what models such as gpt-oss tend to send). A call becomes a
``file_search_call`` item (events ``response.file_search_call.in_progress / searching /
completed``) whose ``results`` the client sees only with
``include: ["file_search_call.results"]``, as with OpenAI. The model reads the results as
numbered passages with their filenames; an answer that names a file it was given gets a
``file_citation`` annotation there.

The executor, the passages the model reads and the citations are in ``executor``.
"""

from __future__ import annotations

from collections.abc import Mapping

import orjson

from app.core.ports import ToolExecutor
from app.errors import GatewayError, InvalidRequestError
from app.protocol.json_types import JsonObject
from app.retrieval.filters import validate_filter
from app.tools.file_search.executor import (
    FileCitations,
    FileSearchExecutor,
    VectorStoreSearch,
    format_results,
)
from app.tools.registry import NameTable, ProviderTools

NAMESPACE = "file_search"
INCLUDE_RESULTS = "file_search_call.results"

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


class FileSearchToolProvider:
    """The ``file_search`` tool type (``tools.registry.ToolProvider``)."""

    tool_types = frozenset({"file_search"})
    item_types = frozenset({"file_search_call"})
    namespace = NAMESPACE

    def __init__(self, search: VectorStoreSearch | None) -> None:
        self._search = search

    def unavailable(self) -> str | None:
        return "file search has no vector stores on this gateway" if self._search is None else None

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
        include = request.get("include") or []
        citations = FileCitations()
        for index, tool in tools:
            _check_tool(index, tool)
            await self._check_stores(index, tool["vector_store_ids"])
            name = names.claim(NAMESPACE)
            out.executors[name] = FileSearchExecutor(
                self._search,
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

    async def _check_stores(self, index: int, store_ids: list[str]) -> None:
        """A store that does not exist is the client's mistake: a 404 before any inference,
        as OpenAI answers (one that vanishes later makes a failed ``file_search_call``)."""
        if self._search is None:
            return
        for position, store_id in enumerate(store_ids):
            try:
                await self._search.check_vector_store(store_id)
            except GatewayError as exc:
                exc.param = f"tools[{index}].vector_store_ids[{position}]"
                raise

    def unknown_executor(self, name: str) -> ToolExecutor:
        return FileSearchExecutor(None, {}, include_results=False, citations=FileCitations())

    def choice_names(
        self, choice: JsonObject, executors: Mapping[str, ToolExecutor]
    ) -> list[str] | None:
        return [n for n, e in executors.items() if isinstance(e, FileSearchExecutor)]

    def lower(self, items: list[JsonObject], names: NameTable) -> list[JsonObject]:
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
