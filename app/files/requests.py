"""Request bodies of the Vector Stores API (``/v1/vector_stores``), validated for shape only.

As with conversations, these requests end at the gateway: an unknown top-level field is a 400.
``metadata`` is checked by ``protocol.metadata.check_metadata``, ``attributes`` by
``check_attributes`` here, ``chunking_strategy`` by ``files.chunking`` and ``filters`` by
``files.filters`` (they stay loosely typed in the models so that those checks answer with
OpenAI's messages). A search body is parsed once into ``SearchRequest``: by the route (with its
precise errors) or, for the file_search tool's calls, by ``parse_search``.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from app.errors import InvalidRequestError
from app.protocol.json_types import JsonObject
from app.protocol.metadata import check_pairs

Attributes = dict[str, str | float | bool]

# OpenAI: "The maximum batch size is 2000 files."
MAX_BATCH_FILES = 2000
MAX_SEARCH_RESULTS = 50
DEFAULT_SEARCH_RESULTS = 10

# OpenAI's rankers, and the gateway's own (what ``VectorIndex.search`` takes).
OPENAI_RANKERS = ("auto", "default-2024-11-15", "none")
INDEX_RANKERS = ("semantic", "keyword", "hybrid")


class _Closed(BaseModel):
    model_config = ConfigDict(extra="forbid")


class VectorStoreExpiresAfter(_Closed):
    anchor: Literal["last_active_at"]
    days: int = Field(ge=1, le=365)


class CreateVectorStoreRequest(_Closed):
    """``POST /v1/vector_stores``."""

    name: str | None = None
    description: str | None = None
    file_ids: list[str] | None = None
    chunking_strategy: Any = None
    metadata: Any = None
    expires_after: VectorStoreExpiresAfter | None = None


class UpdateVectorStoreRequest(_Closed):
    """``POST /v1/vector_stores/{id}``: only the fields sent change (``null`` clears)."""

    name: str | None = None
    metadata: Any = None
    expires_after: VectorStoreExpiresAfter | None = None


class CreateVectorStoreFileRequest(_Closed):
    """``POST /v1/vector_stores/{id}/files``."""

    file_id: str
    attributes: Any = None
    chunking_strategy: Any = None


class UpdateVectorStoreFileRequest(_Closed):
    """``POST /v1/vector_stores/{id}/files/{file_id}``: ``attributes`` replaces the old ones."""

    attributes: Any


class BatchFile(_Closed):
    file_id: str
    attributes: Any = None
    chunking_strategy: Any = None


class CreateFileBatchRequest(_Closed):
    """``POST /v1/vector_stores/{id}/file_batches``: ``file_ids`` or ``files``, not both."""

    file_ids: list[str] | None = Field(default=None, max_length=MAX_BATCH_FILES)
    files: list[BatchFile] | None = Field(default=None, max_length=MAX_BATCH_FILES)
    attributes: Any = None
    chunking_strategy: Any = None


class HybridSearch(_Closed):
    """The file_search tool's fusion weights: accepted, not applied (the index fuses by
    reciprocal rank with equal weights)."""

    embedding_weight: float
    text_weight: float


class RankingOptions(_Closed):
    """``ranker``: OpenAI's (``auto``, ``default-2024-11-15``, ``none``) or the index's own
    (``semantic``, ``keyword``, ``hybrid``); ``None`` is ``auto``."""

    ranker: (
        Literal["auto", "default-2024-11-15", "none", "semantic", "keyword", "hybrid"] | None
    ) = None
    score_threshold: float | None = Field(default=None, ge=0.0, le=1.0)
    hybrid_search: HybridSearch | None = None


class SearchRequest(_Closed):
    """``POST /v1/vector_stores/{id}/search``."""

    query: str | list[str]
    filters: Any = None
    max_num_results: int = Field(default=DEFAULT_SEARCH_RESULTS, ge=1, le=MAX_SEARCH_RESULTS)
    ranking_options: RankingOptions | None = None
    rewrite_query: bool = False


def index_ranker(ranker: str) -> str:
    """OpenAI's ranker names mapped to the index's: its default rankers are hybrid (vectors
    and keywords, fused); ``none`` (no re-ranking) is plain vector search."""
    if ranker in INDEX_RANKERS:
        return ranker
    return "semantic" if ranker == "none" else "hybrid"


def check_attributes(attributes: Any, param: str) -> Attributes:
    """``attributes`` as OpenAI takes them (``None`` is empty), or a 400 naming ``param``: at
    most 16 keys of up to 64 characters; values are strings (up to 512), numbers or booleans."""
    checked: Attributes = check_pairs(
        attributes, param, (str, int, float, bool), "one of a string, a number or a boolean"
    )
    return checked


def parse_search(body: JsonObject) -> SearchRequest:
    """A search body built by the gateway (the file_search tool's calls) as ``SearchRequest``;
    a 400 naming the field when it does not fit."""
    try:
        return SearchRequest.model_validate(body, strict=True)
    except ValidationError as exc:
        error = exc.errors(include_url=False)[0]
        param = ".".join(str(part) for part in error["loc"]) or "body"
        raise InvalidRequestError(
            f"Invalid value for '{param}': {error['msg']}.", param=param, code="invalid_value"
        ) from None
