"""``SearchService``: ``POST /v1/vector_stores/{id}/search`` on a parsed ``SearchRequest`` (the
route parses the body; the file_search tool parses its own with ``requests.parse_search``).

Every query is embedded (unless the ranker is ``keyword``) and searched in the index; each chunk
is kept once with its best score. An attribute filter is applied to the store's completed files
first, and the index searches only those. Every search is the caller's ``tenant``'s: another
tenant's store answers the 404 of an unknown one (the file_search tool's too).
"""

from __future__ import annotations

from app.errors import GatewayError, InvalidRequestError
from app.files import filters
from app.files.catalog import Catalogs, StoreCatalog
from app.files.checks import check_filter
from app.files.paging import all_records
from app.files.ports import Embedder, SearchHit
from app.files.requests import SearchRequest, index_ranker
from app.files.wire import search_page, search_result
from app.protocol.json_types import JsonObject


class SearchService:
    def __init__(self, catalogs: Catalogs, embedder: Embedder) -> None:
        self._catalogs = catalogs
        self.embedder = embedder

    async def check_vector_store(self, vector_store_id: str, *, tenant: str) -> None:
        """OpenAI's 404 when ``tenant`` has no vector store with this id (one light read)."""
        await self._catalogs.of(tenant).require_store(vector_store_id)

    async def search(
        self, vector_store_id: str, request: SearchRequest, *, tenant: str
    ) -> JsonObject:
        """The search results page; 400 for an empty query or a bad filter, 404 for a store
        ``tenant`` does not have."""
        queries = [request.query] if isinstance(request.query, str) else list(request.query)
        if not any(q.strip() for q in queries):
            raise InvalidRequestError(
                "Invalid 'query': expected a non-empty string or array of strings.",
                param="query",
                code="invalid_value",
            )
        condition = check_filter(request.filters)
        catalog = self._catalogs.of(tenant)
        store = await catalog.require_active_store(vector_store_id)
        options = request.ranking_options
        ranker = index_ranker(options.ranker if options and options.ranker else "auto")
        threshold = options.score_threshold if options and options.score_threshold else 0.0
        allowed = await _searchable(catalog, store.id, condition)
        hits: list[SearchHit] = []
        if allowed is None or allowed:
            limit = request.max_num_results
            hits = await self._hits(catalog, store.id, queries, ranker, limit, allowed)
        await catalog.touch(store)
        kept = [hit for hit in hits if hit.score >= threshold]
        # The hits' records and file names: one read per search.
        named = await catalog.files.named_vector_store_files(store.id, [h.file_id for h in kept])
        data: list[JsonObject] = []
        for hit in kept:
            if len(data) >= request.max_num_results:
                break
            found = named.get(hit.file_id)
            if found is None:
                continue  # detached meanwhile
            record, name = found
            data.append(search_result(record, name, hit.text, hit.score))
        return search_page(queries, data)

    async def _hits(
        self,
        catalog: StoreCatalog,
        vector_store_id: str,
        queries: list[str],
        ranker: str,
        limit: int,
        allowed: list[str] | None,
    ) -> list[SearchHit]:
        """Every query's best chunks, each chunk once (its best score), best first."""
        vectors: list[list[float] | None] = [None] * len(queries)
        if ranker != "keyword":
            vectors = list(await self._embed(queries))
        best: dict[tuple[str, int], SearchHit] = {}
        for query, vector in zip(queries, vectors, strict=True):
            found = await catalog.index.search(
                vector_store_id,
                embedding=vector,
                query=query,
                limit=limit,
                ranker=ranker,
                file_ids=allowed,
            )
            for hit in found:
                key = (hit.file_id, hit.position)
                if key not in best or best[key].score < hit.score:
                    best[key] = hit
        return sorted(best.values(), key=lambda h: -h.score)

    async def _embed(self, texts: list[str]) -> list[list[float]]:
        try:
            return await self.embedder.embed(texts)
        except GatewayError:
            raise
        except Exception as exc:
            raise GatewayError(
                f"The embedder is unavailable: {exc}",
                code="embeddings_unavailable",
                status_code=503,
            ) from exc


async def _searchable(
    catalog: StoreCatalog, vector_store_id: str, condition: JsonObject | None
) -> list[str] | None:
    """The files an attribute filter lets through (``None``: no filter, every file)."""
    if condition is None:
        return None
    return [
        record.file_id
        async for record in all_records(catalog.files, vector_store_id, status="completed")
        if filters.matches(condition, record.attributes)
    ]
