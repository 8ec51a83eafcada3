"""What both vector indexes share: scores in [0, 1], reciprocal rank fusion, query terms, and
the base of an index of every tenant's chunks with its one-tenant view (``RankedIndex``,
``TenantIndex``).

Scores (higher is better, always in [0, 1]):

- **semantic**: the cosine similarity of the (L2-normalized) query and chunk embeddings,
  clamped at 0: ``max(0, cos)``. Not ``(1 + cos) / 2``: that maps an unrelated chunk
  (``cos ≈ 0``) to 0.5, so a ``score_threshold`` of 0.5 would let everything through; with the
  clamp a threshold reads as a cosine threshold, and only chunks that point away from the
  query (never useful) share the score 0. The order is the cosine order either way.
- **keyword**: the backend's relevance ``r >= 0`` (SQLite FTS5: ``-bm25()``; PostgreSQL:
  ``ts_rank_cd``) squashed as ``r / (1 + r)`` (PostgreSQL's own normalization flag 32). It
  does not depend on the other hits, so the same chunk keeps its score whatever else matched;
  the two backends' scales differ (BM25 vs cover density), the order within one does not.
- **hybrid**: reciprocal rank fusion (``k = 60``) of the semantic and keyword rankings, divided
  by its largest possible value (ranked first by every ranking that returned anything): 1.0 is
  "first everywhere", a chunk first in one of two rankings and absent from the other gets
  ~0.5.

Query terms: the user's query is split on whitespace into terms (each a phrase for the
backend: ``XK-4410`` stays one code), with quotes and a leading ``-`` stripped, and the terms
are OR-ed: a chunk needs one of them to be a keyword hit and ranks higher with more and rarer
ones, as in BM25 search engines. ``websearch_to_tsquery`` alone would AND them, and a
natural-language question would then rarely match anything.
"""

from __future__ import annotations

import asyncio
import re
from abc import ABC, abstractmethod
from collections.abc import Hashable, Mapping, Sequence
from typing import Any, Protocol, TypeVar

from app.files.ports import IndexedChunk, SearchHit

RRF_K = 60
RANKERS = ("semantic", "keyword", "hybrid")
MAX_QUERY_TERMS = 32
# Each ranking of a hybrid search contributes this many candidates (at least) to the fusion.
MIN_CANDIDATES = 50

KeyT = TypeVar("KeyT", bound=Hashable)

# A letter or a digit (the full-text tokenizers split on everything else, "_" included).
_WORD = re.compile(r"[^\W_]")
_EDGE_JUNK = "\"'`\u201c\u201d\u2018\u2019\u00ab\u00bb()[]{}<>,;:!?"


def semantic_score(cosine: float) -> float:
    """Cosine similarity as a score: ``max(0, cos)``, at most 1."""
    return min(1.0, max(0.0, float(cosine)))


def semantic_hits(
    ids: Sequence[int], scores: Sequence[float], rows: Mapping[int, Sequence[Any]]
) -> list[SearchHit]:
    """The hits of an exact search, best first: ``ids`` and their cosine ``scores``, with each
    chunk's row ``(id, file_id, position, text)`` from ``rows``; a chunk deleted since its
    matrix was read has no row and is left out."""
    hits: list[SearchHit] = []
    for chunk_id, score in zip(ids, scores, strict=True):
        row = rows.get(chunk_id)
        if row is not None:
            hits.append(SearchHit(str(row[1]), int(row[2]), str(row[3]), semantic_score(score)))
    return hits


def keyword_score(relevance: float) -> float:
    """A full-text relevance ``r >= 0`` as a score: ``r / (1 + r)``."""
    value = max(0.0, float(relevance))
    return value / (1.0 + value)


def candidate_count(limit: int) -> int:
    """How many hits each ranking of a hybrid search brings to the fusion."""
    return max(4 * limit, MIN_CANDIDATES)


def check_ranker(ranker: str, embedding: list[float] | None) -> None:
    if ranker not in RANKERS:
        raise ValueError(f"unknown ranker {ranker!r} (expected one of {', '.join(RANKERS)})")
    if ranker == "semantic" and embedding is None:
        raise ValueError("a semantic search needs the query's embedding")


def reciprocal_rank_fusion(
    rankings: Sequence[Sequence[KeyT]],
    *,
    k: int = RRF_K,
    weights: Sequence[float] | None = None,
) -> list[tuple[KeyT, float]]:
    """Fuse rankings (best first) into one: ``sum(w / (k + rank))`` over the rankings a key is
    in (ranks from 1), normalized by the best possible sum over the non-empty rankings, so
    scores are in [0, 1]. Ties keep the order of first appearance (the first ranking's first).
    """
    if weights is None:
        weights = [1.0] * len(rankings)
    if len(weights) != len(rankings):
        raise ValueError("one weight per ranking")
    fused: dict[KeyT, float] = {}
    best = 0.0
    for ranking, weight in zip(rankings, weights, strict=True):
        if not ranking:
            continue
        best += weight / (k + 1)
        for rank, key in enumerate(ranking, start=1):
            fused[key] = fused.get(key, 0.0) + weight / (k + rank)
    if best <= 0:
        return []
    ordered = sorted(fused.items(), key=lambda pair: -pair[1])  # stable: first seen first
    return [(key, min(1.0, score / best)) for key, score in ordered]


def fuse_hits(rankings: Sequence[Sequence[SearchHit]], *, limit: int) -> list[SearchHit]:
    """The best ``limit`` chunks of several rankings of hits, by reciprocal rank fusion; a
    chunk is its (file_id, position), and its score becomes the fused one."""
    by_key: dict[tuple[str, int], SearchHit] = {}
    keyed: list[list[tuple[str, int]]] = []
    for ranking in rankings:
        keys: list[tuple[str, int]] = []
        for hit in ranking:
            key = (hit.file_id, hit.position)
            by_key.setdefault(key, hit)
            keys.append(key)
        keyed.append(keys)
    fused = reciprocal_rank_fusion(keyed)[:limit]
    return [
        SearchHit(
            file_id=by_key[key].file_id,
            position=by_key[key].position,
            text=by_key[key].text,
            score=score,
        )
        for key, score in fused
    ]


class RankedSearch(Protocol):
    """The two rankings an index offers (both indexes here)."""

    async def semantic(
        self,
        vector_store_id: str,
        embedding: list[float],
        limit: int,
        file_ids: list[str] | None = None,
    ) -> list[SearchHit]: ...

    async def keyword(
        self, vector_store_id: str, query: str, limit: int, file_ids: list[str] | None = None
    ) -> list[SearchHit]: ...


async def hybrid_search(
    index: RankedSearch,
    vector_store_id: str,
    embedding: list[float] | None,
    query: str,
    limit: int,
    file_ids: list[str] | None,
) -> list[SearchHit]:
    """Both rankings at once (``candidate_count`` hits each), fused by reciprocal rank; the
    keyword ranking alone when there is no embedding."""
    pool = candidate_count(limit)
    if embedding is None:
        return fuse_hits([await index.keyword(vector_store_id, query, pool, file_ids)], limit=limit)
    rankings = await asyncio.gather(
        index.semantic(vector_store_id, embedding, pool, file_ids),
        index.keyword(vector_store_id, query, pool, file_ids),
    )
    return fuse_hits(rankings, limit=limit)


class RankedIndex(ABC):
    """Base of an index of every tenant's chunks offering both rankings (``semantic`` and
    ``keyword``): the ``VectorIndexes`` port. Each method names the tenant whose chunks it
    reads or writes; the feature uses one tenant's view (``for_tenant``: a ``TenantIndex``,
    the ``VectorIndex`` port), whose ``search`` is the ranking ``ranker`` names, or both fused
    (``hybrid``)."""

    async def aclose(self) -> None:  # noqa: B027 (a no-op by default, not abstract)
        """Release the index's own connections; nothing by default (the engine is the
        caller's)."""

    def for_tenant(self, tenant: str) -> TenantIndex:
        return TenantIndex(self, tenant)

    @abstractmethod
    async def replace_file_chunks(
        self, vector_store_id: str, file_id: str, chunks: list[IndexedChunk], *, tenant: str
    ) -> None: ...

    @abstractmethod
    async def delete_file(self, vector_store_id: str, file_id: str, *, tenant: str) -> None: ...

    @abstractmethod
    async def delete_store(self, vector_store_id: str, *, tenant: str) -> None: ...

    @abstractmethod
    async def file_chunks(self, vector_store_id: str, file_id: str, *, tenant: str) -> list[str]:
        """The file's chunk texts in order."""

    @abstractmethod
    async def semantic(
        self,
        vector_store_id: str,
        embedding: list[float],
        limit: int,
        file_ids: list[str] | None = None,
        *,
        tenant: str,
    ) -> list[SearchHit]: ...

    @abstractmethod
    async def keyword(
        self,
        vector_store_id: str,
        query: str,
        limit: int,
        file_ids: list[str] | None = None,
        *,
        tenant: str,
    ) -> list[SearchHit]: ...


class TenantIndex:
    """One tenant's chunks of a ``RankedIndex`` (the ``VectorIndex`` port): every call names
    the tenant, so another tenant's chunks are never read, replaced or deleted."""

    def __init__(self, index: RankedIndex, tenant: str) -> None:
        self._index = index
        self.tenant = tenant

    async def replace_file_chunks(
        self, vector_store_id: str, file_id: str, chunks: list[IndexedChunk]
    ) -> None:
        await self._index.replace_file_chunks(vector_store_id, file_id, chunks, tenant=self.tenant)

    async def delete_file(self, vector_store_id: str, file_id: str) -> None:
        await self._index.delete_file(vector_store_id, file_id, tenant=self.tenant)

    async def delete_store(self, vector_store_id: str) -> None:
        await self._index.delete_store(vector_store_id, tenant=self.tenant)

    async def file_chunks(self, vector_store_id: str, file_id: str) -> list[str]:
        return await self._index.file_chunks(vector_store_id, file_id, tenant=self.tenant)

    async def semantic(
        self,
        vector_store_id: str,
        embedding: list[float],
        limit: int,
        file_ids: list[str] | None = None,
    ) -> list[SearchHit]:
        return await self._index.semantic(
            vector_store_id, embedding, limit, file_ids, tenant=self.tenant
        )

    async def keyword(
        self, vector_store_id: str, query: str, limit: int, file_ids: list[str] | None = None
    ) -> list[SearchHit]:
        return await self._index.keyword(
            vector_store_id, query, limit, file_ids, tenant=self.tenant
        )

    async def search(
        self,
        vector_store_id: str,
        *,
        embedding: list[float] | None,
        query: str,
        limit: int,
        ranker: str,
        file_ids: list[str] | None = None,
    ) -> list[SearchHit]:
        """The ranking ``ranker`` names, or both fused (``hybrid``)."""
        check_ranker(ranker, embedding)
        if limit <= 0:
            return []
        if ranker == "semantic":
            assert embedding is not None
            return await self.semantic(vector_store_id, embedding, limit, file_ids)
        if ranker == "keyword":
            return await self.keyword(vector_store_id, query, limit, file_ids)
        return await hybrid_search(self, vector_store_id, embedding, query, limit, file_ids)


def query_terms(query: str, *, max_terms: int = MAX_QUERY_TERMS) -> list[str]:
    """The user's query as distinct search terms (see the module's docstring); each has at
    least one letter or digit and no double quote."""
    terms: list[str] = []
    seen: set[str] = set()
    for raw in query.split():
        term = raw.replace('"', "").strip(_EDGE_JUNK).lstrip("-").strip(_EDGE_JUNK)
        if not term or not _WORD.search(term):
            continue
        folded = term.casefold()
        if folded in seen:
            continue
        seen.add(folded)
        terms.append(term)
        if len(terms) == max_terms:
            break
    # Function words match nearly every chunk: the full-text ranking then scores the whole
    # store (bench/README.md, "End-to-end file_search round") and ranks nothing better for it.
    content = [t for t in terms if t.casefold() not in STOPWORDS]
    return content or terms


# English function words left out of keyword queries (when the query has other words).
STOPWORDS = frozenset(
    """a about above after again against all am an and any are as at be because been before being
    below between both but by can could did do does doing down during each few for from
    further had has have having he her here hers herself him himself his how i if in into is
    it its itself just me more most my myself no nor not now of off on once only or other our
    ours ourselves out over own same she should so some such than that the their theirs them
    themselves then there these they this those through to too under until up very was we were
    what when where which while who whom why will with would you your yours yourself
    yourselves""".split()  # noqa: SIM905
)
