"""The contract of the ``VectorIndexes`` / ``VectorIndex`` ports: the same tests on every
implementation (the in-memory fake ``tests.fakes.MemoryVectorIndex``, ``SqliteVectorIndex``,
``PgArrayIndex``, ``PgVectorIndex``), then each index's own checks. The single-tenant tests use
the default tenant's view; the two-tenant ones check that a view never reads, replaces or
deletes another tenant's chunks, even of a vector store id it names.

Every contract test runs on each index: the fake (two fakes sharing their chunks stand for two
processes on one database), SQLite (a file, schema built by the Alembic migrations), and on
PostgreSQL (scratch schemas built by ``create_schema``; skipped without a server unless ``CI``
is set) ``PgArrayIndex`` over ``real[]`` embeddings (what a server without pgvector gets, run
on any server) and ``PgVectorIndex`` (skipped where the server has no pgvector). Vectors come from a
deterministic fake embedder (hashed words); the quality checks on the labelled corpus in
``corpus/`` also run with the real local model when it is installed (``local`` variant,
skipped otherwise, so the report shows which ran).
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import re
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from sqlalchemy import make_url, text
from sqlalchemy.ext.asyncio import AsyncEngine

from app.core.tenancy import DEFAULT_TENANT
from app.files.fusion import query_terms, reciprocal_rank_fusion
from app.files.ports import IndexedChunk, SearchHit, VectorIndex, VectorIndexes
from app.store.engine import create_engine_for, create_schema
from app.store.migrate import upgrade_to_head
from app.store.pgvector import PgVectorState, read_pgvector_state
from app.store.vector_index.choice import open_vector_index
from app.store.vector_index.pg_array import PgArrayIndex
from app.store.vector_index.pg_vector import PgVectorIndex
from app.store.vector_index.sqlite import SqliteVectorIndex
from tests.fakes import MemoryVectorIndex
from tests.postgres import POSTGRES_URL, throwaway_database
from tests.store.conftest import Postgres, _in_schema, scratch_schema

CORPUS = Path(__file__).parent / "corpus"
DIMS = 64
VS = "vs_test"


class HashEmbedder:
    """Deterministic bag-of-words vectors: each lower-cased word adds ±1 to a hashed
    dimension, plus a little noise seeded by the whole text (no two texts tie); L2-normalized.
    Texts sharing words are similar, nothing else is."""

    name = "fake/hash"

    def __init__(self, dims: int = DIMS) -> None:
        self.dims = dims

    def vector(self, value: str) -> list[float]:
        vector = np.zeros(self.dims, dtype=np.float64)
        for word in re.findall(r"\w+", value.lower()):
            digest = hashlib.blake2b(word.encode(), digest_size=8).digest()
            number = int.from_bytes(digest, "little")
            vector[number % self.dims] += 1.0 if (number >> 32) & 1 else -1.0
        seed = int.from_bytes(hashlib.blake2b(value.encode(), digest_size=8).digest(), "little")
        vector += 0.01 * np.random.default_rng(seed).standard_normal(self.dims)
        return [float(x) for x in vector / float(np.linalg.norm(vector))]

    async def embed(self, texts: list[str]) -> list[list[float]]:
        return [self.vector(value) for value in texts]

    async def aclose(self) -> None:
        return None


EMBEDDER = HashEmbedder()


def chunk(position: int, value: str, embedding: list[float] | None = None) -> IndexedChunk:
    return IndexedChunk(
        position=position,
        text=value,
        tokens=len(value.split()),
        embedding=embedding if embedding is not None else EMBEDDER.vector(value),
    )


@dataclass
class IndexBackend:
    name: str
    indexes: VectorIndexes  # every tenant's chunks
    make_indexes: Any  # () -> a second index on the same database (another process)

    @property
    def index(self) -> VectorIndex:
        """The default tenant's view."""
        return self.indexes.for_tenant(DEFAULT_TENANT)

    def make_index(self) -> VectorIndex:
        """The default tenant's view of a second index on the same database."""
        indexes: VectorIndexes = self.make_indexes()
        return indexes.for_tenant(DEFAULT_TENANT)


@pytest.fixture(scope="session")
def pg_array_schema() -> Iterator[Postgres]:
    with scratch_schema("respgate_idx_array") as pg:
        yield pg


@pytest.fixture(scope="session")
def pg_vector_schema() -> Iterator[Postgres]:
    with scratch_schema("respgate_idx_vector") as pg:
        yield pg


async def _prepare_postgres(pg: Postgres, *, pgvector: bool) -> PgVectorState:
    """The chunk tables of ``pg``'s schema, empty; ``chunks.embedding`` as ``pgvector`` asks
    (pgvector's type only where the server has it)."""
    setup = _in_schema(create_engine_for(pg.url), pg.schema)
    try:
        await create_schema(setup, pgvector=pgvector)
        async with setup.begin() as conn:
            await conn.execute(text("TRUNCATE chunks, chunk_versions"))
            return await conn.run_sync(read_pgvector_state)
    finally:
        await setup.dispose()


@pytest.fixture(params=["memory", "sqlite", "sqlite_no_inline", "postgres", "pgvector"])
async def backend(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[IndexBackend]:
    """``memory``: the fake; ``sqlite``: small reads inline (the default);
    ``sqlite_no_inline``: all through aiosqlite, as when the database is busy; ``postgres``:
    ``PgArrayIndex`` (real[], no pgvector); ``pgvector``: ``PgVectorIndex``."""
    engines: list[AsyncEngine] = []
    sqlite_indexes: list[SqliteVectorIndex] = []
    if request.param == "memory":
        memory = MemoryVectorIndex()
        yield IndexBackend("memory", memory, lambda: MemoryVectorIndex(memory.chunks))
        return
    if request.param.startswith("sqlite"):
        url = f"sqlite+aiosqlite:///{tmp_path / 'data' / 'respgate.db'}"
        await upgrade_to_head(url)

        def make_sqlite() -> VectorIndexes:
            engine = create_engine_for(url)
            engines.append(engine)
            index = SqliteVectorIndex(engine, inline_reads=request.param == "sqlite")
            sqlite_indexes.append(index)
            return index

        backend = IndexBackend("sqlite", make_sqlite(), make_sqlite)
    else:
        pgvector = request.param == "pgvector"
        pg: Postgres = request.getfixturevalue(
            "pg_vector_schema" if pgvector else "pg_array_schema"
        )
        state = await _prepare_postgres(pg, pgvector=pgvector)
        if pgvector and not state.uses_pgvector:
            pytest.skip(f"pgvector is not installed on the PostgreSQL server at {_server()}")
        assert state.uses_pgvector == pgvector
        index_class = PgVectorIndex if pgvector else PgArrayIndex

        def make_pg() -> VectorIndexes:
            engine = _in_schema(create_engine_for(pg.url), pg.schema)
            engines.append(engine)
            return index_class(engine)

        backend = IndexBackend(request.param, make_pg(), make_pg)
    try:
        yield backend
    finally:
        for index in sqlite_indexes:
            await index.aclose()
        for engine in engines:
            await engine.dispose()


def _server() -> str:
    url = make_url(POSTGRES_URL)
    return f"{url.host}:{url.port or 5432}"


def assert_scores(hits: list[SearchHit]) -> None:
    scores = [hit.score for hit in hits]
    assert all(0.0 <= score <= 1.0 for score in scores), scores
    assert scores == sorted(scores, reverse=True), scores


async def semantic(index: VectorIndex, query: str, limit: int = 10, **kw: Any) -> list[SearchHit]:
    return await index.search(
        VS, embedding=EMBEDDER.vector(query), query=query, limit=limit, ranker="semantic", **kw
    )


# --- writes -----------------------------------------------------------------------------------


async def test_replace_file_chunks_and_file_chunks(backend: IndexBackend) -> None:
    index = backend.index
    await index.replace_file_chunks(VS, "file_a", [chunk(0, "alpha one"), chunk(1, "alpha two")])
    await index.replace_file_chunks(VS, "file_b", [chunk(1, "beta two"), chunk(0, "beta one")])

    assert await index.file_chunks(VS, "file_a") == ["alpha one", "alpha two"]
    assert await index.file_chunks(VS, "file_b") == ["beta one", "beta two"]  # by position
    assert await index.file_chunks(VS, "missing") == []
    assert await index.file_chunks("vs_other", "file_a") == []

    await index.replace_file_chunks(VS, "file_a", [chunk(0, "gamma replaced")])

    assert await index.file_chunks(VS, "file_a") == ["gamma replaced"]
    hits = await semantic(index, "alpha one")
    assert {hit.text for hit in hits} == {"gamma replaced", "beta one", "beta two"}
    keyword = await index.search(VS, embedding=None, query="alpha", limit=5, ranker="keyword")
    assert keyword == []  # the full-text index forgot the old chunks too
    assert (await index.search(VS, embedding=None, query="gamma", limit=5, ranker="keyword"))[
        0
    ].text == "gamma replaced"


async def test_replace_is_one_transaction(backend: IndexBackend) -> None:
    index = backend.index
    await index.replace_file_chunks(VS, "file_a", [chunk(0, "kept one"), chunk(1, "kept two")])
    broken = IndexedChunk(position=1, text=None, tokens=1, embedding=EMBEDDER.vector("x"))  # type: ignore[arg-type]

    with pytest.raises(Exception, match=r"(?i)null"):
        await index.replace_file_chunks(VS, "file_a", [chunk(0, "new one"), broken])

    assert await index.file_chunks(VS, "file_a") == ["kept one", "kept two"]
    hits = await semantic(index, "kept one")
    assert [hit.text for hit in hits] == ["kept one", "kept two"]


async def test_replace_with_nothing_and_delete_file(backend: IndexBackend) -> None:
    index = backend.index
    await index.replace_file_chunks(VS, "file_a", [chunk(0, "apple pie")])
    await index.replace_file_chunks(VS, "file_b", [chunk(0, "banana bread")])
    await index.replace_file_chunks(VS, "file_c", [chunk(0, "cherry tart")])
    await semantic(index, "apple")  # caches the matrix (SQLite)

    await index.replace_file_chunks(VS, "file_a", [])
    await index.delete_file(VS, "file_b")
    await index.delete_file(VS, "never_indexed")

    assert await index.file_chunks(VS, "file_a") == []
    assert await index.file_chunks(VS, "file_b") == []
    assert [hit.file_id for hit in await semantic(index, "apple banana cherry")] == ["file_c"]
    for ranker in ("keyword", "hybrid"):
        hits = await index.search(
            VS,
            embedding=EMBEDDER.vector("apple banana"),
            query="apple banana cherry",
            limit=5,
            ranker=ranker,
        )
        assert [hit.file_id for hit in hits] == ["file_c"], ranker


async def test_delete_store_leaves_other_stores(backend: IndexBackend) -> None:
    index = backend.index
    await index.replace_file_chunks(VS, "file_a", [chunk(0, "shared words here")])
    await index.replace_file_chunks("vs_other", "file_a", [chunk(0, "shared words there")])
    await semantic(index, "shared")

    await index.delete_store(VS)

    assert await index.file_chunks(VS, "file_a") == []
    assert await semantic(index, "shared words") == []
    assert await index.search(VS, embedding=None, query="shared", limit=5, ranker="keyword") == []
    others = await index.search(
        "vs_other", embedding=EMBEDDER.vector("shared"), query="shared", limit=5, ranker="hybrid"
    )
    assert [hit.text for hit in others] == ["shared words there"]
    await index.replace_file_chunks(VS, "file_z", [chunk(0, "shared again")])
    assert [hit.text for hit in await semantic(index, "shared")] == ["shared again"]


async def test_writes_of_another_process_are_seen(backend: IndexBackend) -> None:
    # Two index objects on one database, as two gateway processes would have: the SQLite one
    # caches matrices and must notice the other's writes.
    first, second = backend.index, backend.make_index()
    await first.replace_file_chunks(VS, "file_a", [chunk(0, "red apple")])
    assert [hit.text for hit in await semantic(first, "red apple")] == ["red apple"]

    await second.replace_file_chunks(VS, "file_a", [chunk(0, "green pear")])
    await second.replace_file_chunks(VS, "file_b", [chunk(0, "red cherry")])
    assert [hit.text for hit in await semantic(first, "red apple", limit=1)] == ["red cherry"]

    await second.delete_file(VS, "file_b")
    assert [hit.text for hit in await semantic(first, "red apple")] == ["green pear"]

    await first.replace_file_chunks(VS, "file_c", [chunk(0, "red apple again")])
    assert [hit.text for hit in await semantic(second, "red apple", limit=1)] == ["red apple again"]


async def test_concurrent_replaces_of_one_file_leave_one_set(backend: IndexBackend) -> None:
    first, second = backend.index, backend.make_index()
    versions = [
        [chunk(position, f"version {n} part {position}") for position in range(20)]
        for n in range(6)
    ]

    await asyncio.gather(
        *(
            (first if n % 2 else second).replace_file_chunks(VS, "file_a", chunks)
            for n, chunks in enumerate(versions)
        )
    )

    stored = await first.file_chunks(VS, "file_a")
    assert stored in [[c.text for c in chunks] for chunks in versions]
    hits = await semantic(first, "version part", limit=100)
    assert sorted(hit.text for hit in hits) == sorted(stored)


async def test_postgres_index_on_a_migrated_database(caplog: pytest.LogCaptureFixture) -> None:
    # The migration's own DDL (not create_all's), and the index the gateway picks for it:
    # pgvector's where the server has pgvector, else the exact index over real[] embeddings.
    with throwaway_database("respgate_index") as url:
        await _check_migrated_index(url, caplog)


async def _check_migrated_index(url: str, caplog: pytest.LogCaptureFixture) -> None:
    engine = create_engine_for(url)
    try:
        await upgrade_to_head(url)
        async with engine.connect() as conn:
            state = await conn.run_sync(read_pgvector_state)
        caplog.set_level("INFO", logger="app.store.vector_index.choice")
        indexes = await open_vector_index(engine)
        assert isinstance(indexes, PgVectorIndex if state.available else PgArrayIndex)
        index = indexes.for_tenant(DEFAULT_TENANT)
        assert state.uses_pgvector == state.available
        assert "file search index: " + ("pgvector" if state.available else "exact") in caplog.text
        assert state.reason() in caplog.text
        await index_words(index)
        code = await index.search(VS, embedding=None, query="XK-4410", limit=3, ranker="keyword")
        assert [hit.position for hit in code] == [2]
        near = await semantic(index, "cherry trees in the orchard", limit=1)
        assert near[0].text == "the orchard also has cherry trees"
        async with engine.connect() as conn:
            storage = await conn.scalar(
                text(
                    "SELECT attstorage::text FROM pg_attribute "
                    "WHERE attrelid = 'chunks'::regclass AND attname = 'embedding'"
                )
            )
        assert storage == "m"  # embeddings stay in the row (not TOAST): 6x faster scans
    finally:
        await engine.dispose()


def test_pgvector_state_reasons() -> None:
    on = PgVectorState(schema="public", available=True, column="vector")
    assert on.uses_pgvector
    assert on.reason() == "chunks.embedding is a pgvector column"
    later = PgVectorState(schema=None, available=True, column="_float4")
    assert not later.uses_pgvector
    assert "run `respgate migrate`" in later.reason()
    absent = PgVectorState(schema=None, available=False, column="_float4")
    assert "pgvector extension is not on this PostgreSQL server" in absent.reason()
    assert "postgresql-<major>-pgvector" in absent.reason()
    assert "pgvector/pgvector" in absent.reason()


# --- search ---------------------------------------------------------------------------------


async def index_words(index: VectorIndex) -> None:
    await index.replace_file_chunks(
        VS,
        "file_fruit",
        [
            chunk(0, "apples and pears grow in the orchard"),
            chunk(1, "the orchard also has cherry trees"),
            chunk(2, "error code E-2291 means the firmware signature is bad"),
        ],
    )
    await index.replace_file_chunks(
        VS,
        "file_city",
        [
            chunk(0, "the city has trams and buses"),
            chunk(1, "buses run every ten minutes in the city"),
            chunk(2, "model XK-4410 is an outdoor access point"),
        ],
    )


async def test_semantic_search_is_exact_and_scored(backend: IndexBackend) -> None:
    index = backend.index
    await index_words(index)
    texts = [
        "apples and pears grow in the orchard",
        "the orchard also has cherry trees",
        "error code E-2291 means the firmware signature is bad",
        "the city has trams and buses",
        "buses run every ten minutes in the city",
        "model XK-4410 is an outdoor access point",
    ]
    query = "cherry trees in the orchard"
    matrix = np.asarray([EMBEDDER.vector(value) for value in texts], dtype=np.float32)
    cosines = matrix @ np.asarray(EMBEDDER.vector(query), dtype=np.float32)
    expected = [texts[i] for i in np.argsort(-cosines, kind="stable")[:4]]

    hits = await semantic(index, query, limit=4)

    assert [hit.text for hit in hits] == expected
    assert_scores(hits)
    for hit in hits:
        cosine = float(cosines[texts.index(hit.text)])
        assert hit.score == pytest.approx(max(0.0, cosine), abs=1e-5)
    same = await semantic(index, texts[3], limit=1)
    assert same[0].text == texts[3]
    assert same[0].score == pytest.approx(1.0, abs=1e-5)
    assert (same[0].file_id, same[0].position) == ("file_city", 0)


async def test_keyword_search(backend: IndexBackend) -> None:
    index = backend.index
    await index_words(index)

    code = await index.search(VS, embedding=None, query="XK-4410", limit=5, ranker="keyword")
    assert [(hit.file_id, hit.position) for hit in code] == [("file_city", 2)]
    words = await index.search(
        VS, embedding=None, query="Which buses go to the city?", limit=10, ranker="keyword"
    )
    # the terms are OR-ed, function words ("which", "to", "the") left out: only the chunks
    # with "buses" or "city" match
    assert {hit.text for hit in words} == {
        "buses run every ten minutes in the city",
        "the city has trams and buses",
    }
    assert_scores(words)
    assert all(0.0 < hit.score < 1.0 for hit in words)
    assert await index.search(VS, embedding=None, query="zeppelin", limit=5, ranker="keyword") == []
    assert await index.search(VS, embedding=None, query=" ?! ", limit=5, ranker="keyword") == []


@pytest.mark.parametrize(
    ("query", "finds_orchard"),
    [
        ('orchard" OR "city', True),
        ("orchard*", True),
        ("NEAR(orchard city)", False),  # the phrase "near orchard", or "city"
        ("-orchard", True),
        ("orchard AND NOT city", True),
        ("title:orchard", False),
        ("(orchard", True),
        ("orchard'); DROP TABLE chunks; --", True),
        ("^orchard", True),
        ("orchard | city & !trams <-> buses", True),
        ("_ __ \\ \x00 ?", False),
    ],
)
async def test_keyword_search_takes_any_text(
    backend: IndexBackend, query: str, finds_orchard: bool
) -> None:
    index = backend.index
    await index_words(index)

    hits = await index.search(VS, embedding=None, query=query, limit=5, ranker="keyword")

    assert_scores(hits)
    assert any("orchard" in hit.text for hit in hits) == finds_orchard
    assert len(await index.file_chunks(VS, "file_city")) == 3


async def test_hybrid_search_fuses_both_rankings(backend: IndexBackend) -> None:
    index = backend.index
    await index_words(index)
    query = "orchard cherry trees"

    hits = await index.search(
        VS, embedding=EMBEDDER.vector(query), query=query, limit=3, ranker="hybrid"
    )

    assert_scores(hits)
    assert hits[0].text == "the orchard also has cherry trees"  # first in both rankings
    assert hits[0].score == pytest.approx(1.0)
    assert len(hits) == 3
    # keyword only (no embedding): still a hybrid answer, on the keyword ranking
    no_vector = await index.search(VS, embedding=None, query=query, limit=3, ranker="hybrid")
    assert no_vector[0].text == "the orchard also has cherry trees"
    assert no_vector[0].score == pytest.approx(1.0)
    assert_scores(no_vector)
    # a code that only the keyword ranking finds comes up, in the semantic ranking's company
    code = await index.search(
        VS, embedding=EMBEDDER.vector("E-2291 error"), query="E-2291", limit=6, ranker="hybrid"
    )
    assert code[0].text.startswith("error code E-2291")
    assert_scores(code)


async def test_file_ids_restrict_every_ranker(backend: IndexBackend) -> None:
    index = backend.index
    await index_words(index)
    query = "the orchard and the city"
    vector = EMBEDDER.vector(query)

    for ranker in ("semantic", "keyword", "hybrid"):
        hits = await index.search(
            VS, embedding=vector, query=query, limit=10, ranker=ranker, file_ids=["file_city"]
        )
        assert hits, ranker
        assert {hit.file_id for hit in hits} == {"file_city"}, ranker
        assert_scores(hits)
        both = await index.search(
            VS,
            embedding=vector,
            query=query,
            limit=10,
            ranker=ranker,
            file_ids=["file_city", "file_fruit", "file_nope"],
        )
        assert {hit.file_id for hit in both} == {"file_city", "file_fruit"}, ranker
        none = await index.search(
            VS, embedding=vector, query=query, limit=10, ranker=ranker, file_ids=[]
        )
        assert none == [], ranker


async def test_limits_rankers_and_dimensions(backend: IndexBackend) -> None:
    index = backend.index
    await index_words(index)
    vector = EMBEDDER.vector("city")

    assert len(await semantic(index, "city", limit=2)) == 2
    assert await semantic(index, "city", limit=0) == []
    with pytest.raises(ValueError, match="ranker"):
        await index.search(VS, embedding=vector, query="city", limit=3, ranker="bm42")
    with pytest.raises(ValueError, match="embedding"):
        await index.search(VS, embedding=None, query="city", limit=3, ranker="semantic")
    # a query vector of another size than the store's chunks matches nothing (another
    # embedder); chunks of that size in the same store are searched on their own
    assert (
        await index.search(VS, embedding=[1.0, 0.0, 0.0], query="x", limit=3, ranker="semantic")
        == []
    )
    await index.replace_file_chunks(VS, "file_3d", [chunk(0, "three dims", [0.0, 1.0, 0.0])])
    small = await index.search(VS, embedding=[0.0, 1.0, 0.0], query="", limit=3, ranker="semantic")
    assert [(hit.text, round(hit.score, 5)) for hit in small] == [("three dims", 1.0)]
    assert len(await semantic(index, "city", limit=10)) == 6


async def test_empty_store(backend: IndexBackend) -> None:
    index = backend.index
    for ranker in ("semantic", "keyword", "hybrid"):
        hits = await index.search(
            "vs_empty", embedding=EMBEDDER.vector("x"), query="x", limit=5, ranker=ranker
        )
        assert hits == []


async def test_sqlite_schema_from_create_schema(tmp_path: Path) -> None:
    # tests and benchmarks build the schema with create_all: the FTS5 table and its triggers
    # come from the metadata's DDL events
    engine = create_engine_for(f"sqlite+aiosqlite:///{tmp_path / 'respgate.db'}")
    indexes = SqliteVectorIndex(engine)
    index = indexes.for_tenant(DEFAULT_TENANT)
    try:
        await create_schema(engine)
        await index.replace_file_chunks(VS, "file_a", [chunk(0, "the XK-4410 access point")])
        hits = await index.search(VS, embedding=None, query="xk-4410", limit=5, ranker="keyword")
        assert [hit.text for hit in hits] == ["the XK-4410 access point"]
    finally:
        await indexes.aclose()
        await engine.dispose()


async def test_sqlite_cache_is_patched_by_its_own_writes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from app.store.vector_index import sqlite as sqlite_index

    loads: list[int] = []
    build = sqlite_index._build_matrix

    def counting_build(*args: Any) -> Any:
        loads.append(1)
        return build(*args)

    monkeypatch.setattr(sqlite_index, "_build_matrix", counting_build)
    url = f"sqlite+aiosqlite:///{tmp_path / 'respgate.db'}"
    await upgrade_to_head(url)
    engine, other_engine = create_engine_for(url), create_engine_for(url)
    roots = SqliteVectorIndex(engine), SqliteVectorIndex(other_engine)
    index, other = (root.for_tenant(DEFAULT_TENANT) for root in roots)
    try:
        await index.replace_file_chunks(VS, "file_a", [chunk(0, "red apple"), chunk(1, "pear")])
        await index.replace_file_chunks(VS, "file_b", [chunk(0, "red cherry")])
        assert [hit.text for hit in await semantic(index, "red apple", limit=1)] == ["red apple"]
        assert len(loads) == 1

        await index.replace_file_chunks(VS, "file_a", [chunk(0, "green pear")])
        await index.delete_file(VS, "file_b")
        await index.replace_file_chunks(VS, "file_c", [chunk(0, "red apple pie")])
        await index.replace_file_chunks(VS, "file_d", [chunk(0, "three", [0.0, 0.0, 1.0])])

        assert [(hit.file_id, hit.text) for hit in await semantic(index, "red apple")] == [
            ("file_c", "red apple pie"),
            ("file_a", "green pear"),
        ]
        restricted = await semantic(index, "red apple", file_ids=["file_a"])
        assert [hit.text for hit in restricted] == ["green pear"]
        assert len(loads) == 1  # patched in place, never reloaded

        await other.replace_file_chunks(VS, "file_e", [chunk(0, "red apple tart")])
        hits = await semantic(index, "red apple tart", limit=1)
        assert [hit.text for hit in hits] == ["red apple tart"]
        assert len(loads) == 2  # another process wrote: reloaded once
    finally:
        for root in roots:
            await root.aclose()
        await engine.dispose()
        await other_engine.dispose()


async def test_sqlite_cache_bound(tmp_path: Path) -> None:
    url = f"sqlite+aiosqlite:///{tmp_path / 'respgate.db'}"
    await upgrade_to_head(url)
    engine = create_engine_for(url)
    indexes = SqliteVectorIndex(engine, cache_bytes=1)  # keeps only the matrix last used
    index = indexes.for_tenant(DEFAULT_TENANT)
    try:
        for store in ("vs_1", "vs_2"):
            await index.replace_file_chunks(store, "file_a", [chunk(0, f"words of {store}")])
        for _ in range(2):
            for store in ("vs_1", "vs_2"):
                hits = await index.search(
                    store,
                    embedding=EMBEDDER.vector("words"),
                    query="",
                    limit=3,
                    ranker="semantic",
                )
                assert [hit.text for hit in hits] == [f"words of {store}"]
                assert indexes._cache.store_keys(store)
        assert not indexes._cache.store_keys("vs_1")
    finally:
        await indexes.aclose()
        await engine.dispose()


# --- tenants: one view never reaches another tenant's chunks --------------------------------


async def _search_all(index: VectorIndex, store: str, query: str) -> dict[str, list[str]]:
    """Each ranker's hit texts for ``query`` in ``store``."""
    found = {}
    for ranker in ("semantic", "keyword", "hybrid"):
        hits = await index.search(
            store, embedding=EMBEDDER.vector(query), query=query, limit=10, ranker=ranker
        )
        found[ranker] = [hit.text for hit in hits]
    return found


async def test_another_tenants_chunks_are_unknown(backend: IndexBackend) -> None:
    alice, bob = backend.indexes.for_tenant("alice"), backend.indexes.for_tenant("bob")
    await alice.replace_file_chunks(VS, "file_a", [chunk(0, "heron nests"), chunk(1, "reeds")])
    await bob.replace_file_chunks("vs_bob", "file_b", [chunk(0, "heron sightings")])
    assert (await _search_all(alice, VS, "heron"))["semantic"]  # alice's matrix is cached

    # bob names alice's store: nothing, by every ranker, whether cached or not
    assert await _search_all(bob, VS, "heron nests") == {
        "semantic": [],
        "keyword": [],
        "hybrid": [],
    }
    assert await bob.file_chunks(VS, "file_a") == []
    assert await _search_all(alice, "vs_bob", "heron sightings") == {
        "semantic": [],
        "keyword": [],
        "hybrid": [],
    }
    # nor can bob replace or delete alice's chunks
    await bob.delete_file(VS, "file_a")
    await bob.delete_store(VS)
    await bob.replace_file_chunks(VS, "file_a", [])
    assert await alice.file_chunks(VS, "file_a") == ["heron nests", "reeds"]
    found = await _search_all(alice, VS, "heron nests")
    assert found["semantic"][0] == found["keyword"][0] == found["hybrid"][0] == "heron nests"
    assert [hit.text for hit in await semantic(backend.index, "heron")] == []  # the default's
    assert await _search_all(bob, "vs_bob", "heron") == {
        "semantic": ["heron sightings"],
        "keyword": ["heron sightings"],
        "hybrid": ["heron sightings"],
    }


async def test_tenants_chunks_in_one_store_id_stay_apart(backend: IndexBackend) -> None:
    # Store ids are the gateway's and never shared; even if two tenants wrote under one id,
    # each would read, replace and delete only its own chunks (here from two processes).
    alice = backend.indexes.for_tenant("alice")
    bob = backend.make_indexes().for_tenant("bob")
    await alice.replace_file_chunks(VS, "file_x", [chunk(0, "alice red apple")])
    await bob.replace_file_chunks(VS, "file_x", [chunk(0, "bob red apple")])
    assert (await _search_all(alice, VS, "red apple"))["semantic"] == ["alice red apple"]

    await bob.replace_file_chunks(VS, "file_x", [chunk(0, "bob green pear")])

    assert await alice.file_chunks(VS, "file_x") == ["alice red apple"]
    assert await _search_all(alice, VS, "red apple") == {
        "semantic": ["alice red apple"],
        "keyword": ["alice red apple"],
        "hybrid": ["alice red apple"],
    }
    assert (await _search_all(bob, VS, "red apple"))["semantic"] == ["bob green pear"]
    await alice.delete_store(VS)
    assert await bob.file_chunks(VS, "file_x") == ["bob green pear"]
    assert (await _search_all(alice, VS, "pear"))["semantic"] == []


# --- fusion and query terms (no database) ------------------------------------------------------


def test_reciprocal_rank_fusion() -> None:
    fused = reciprocal_rank_fusion([["a", "b", "c"], ["b", "d"]])
    assert [key for key, _ in fused] == ["b", "a", "d", "c"]
    scores = dict(fused)
    best = 2 / 61
    assert scores["b"] == pytest.approx((1 / 62 + 1 / 61) / best)
    assert scores["a"] == pytest.approx((1 / 61) / best)
    assert reciprocal_rank_fusion([["a"], []]) == [("a", 1.0)]
    assert reciprocal_rank_fusion([[], []]) == []
    weighted = dict(reciprocal_rank_fusion([["a"], ["b"]], weights=[3.0, 1.0]))
    assert weighted == {"a": pytest.approx(0.75), "b": pytest.approx(0.25)}


def test_query_terms() -> None:
    assert query_terms('What does "E-2291" mean?') == ["E-2291", "mean"]
    assert query_terms("what is it") == ["what", "is", "it"]  # only function words: kept
    assert query_terms("-x NEAR(a b) ^c 'd' _ ?? x") == ["x", "NEAR(a", "b", "^c", "d"]
    assert query_terms("a " * 100) == ["a"]
    assert len(query_terms(" ".join(f"w{i}" for i in range(100)))) == 32


# --- quality on the labelled corpus ----------------------------------------------------------


@dataclass
class Corpus:
    embedder: str
    doc_ids: list[str]
    doc_texts: list[str]
    doc_vectors: np.ndarray[Any, Any]
    queries: list[dict[str, Any]]
    query_vectors: np.ndarray[Any, Any]


def _read_jsonl(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


_CORPORA: dict[str, Corpus] = {}


async def _corpus(kind: str) -> Corpus:
    if kind in _CORPORA:
        return _CORPORA[kind]
    documents = _read_jsonl(CORPUS / "documents.jsonl")
    queries = _read_jsonl(CORPUS / "queries.jsonl")
    embedder: Any
    if kind == "local":
        from app.files import embeddings

        if not embeddings.local_embeddings_installed():
            pytest.skip("the local embedding model (respgate[embeddings]) is not installed")
        embedder = embeddings.LocalEmbedder()
        try:
            await embedder.load()
        except Exception as exc:
            pytest.skip(f"the local embedding model does not load: {exc}")
    else:
        embedder = EMBEDDER
    doc_vectors = await embedder.embed([doc["text"] for doc in documents])
    query_vectors = await embedder.embed([query["query"] for query in queries])
    corpus = Corpus(
        embedder=str(embedder.name),
        doc_ids=[doc["id"] for doc in documents],
        doc_texts=[doc["text"] for doc in documents],
        doc_vectors=np.asarray(doc_vectors, dtype=np.float32),
        queries=queries,
        query_vectors=np.asarray(query_vectors, dtype=np.float32),
    )
    _CORPORA[kind] = corpus
    return corpus


def recall(found: list[str], relevant: list[str]) -> float:
    return len(set(found) & set(relevant)) / len(relevant)


@pytest.mark.parametrize("embedder", ["local", "fake"])
async def test_corpus_quality(backend: IndexBackend, embedder: str, record_property: Any) -> None:
    corpus = await _corpus(embedder)
    record_property("embedder", corpus.embedder)
    index = backend.index
    for doc_id, doc_text, vector in zip(
        corpus.doc_ids, corpus.doc_texts, corpus.doc_vectors, strict=True
    ):
        await index.replace_file_chunks(
            "vs_corpus", doc_id, [chunk(0, doc_text, [float(x) for x in vector])]
        )

    exact_recalls, semantic_recalls = [], []
    keyword_heavy: dict[str, list[float]] = {"semantic": [], "hybrid": []}
    for query, vector in zip(corpus.queries, corpus.query_vectors, strict=True):
        relevant = query["relevant"]
        exact = [corpus.doc_ids[i] for i in np.argsort(-(corpus.doc_vectors @ vector))[:5]]
        embedding = [float(x) for x in vector]
        found: dict[str, list[str]] = {}
        for ranker in ("semantic", "hybrid"):
            hits = await index.search(
                "vs_corpus", embedding=embedding, query=query["query"], limit=5, ranker=ranker
            )
            assert_scores(hits)
            found[ranker] = [hit.file_id for hit in hits]
        # the index's semantic search is exact: the same five documents as brute force
        assert set(found["semantic"]) == set(exact), query["query"]
        exact_recalls.append(recall(exact, relevant))
        semantic_recalls.append(recall(found["semantic"], relevant))
        if query["keyword_heavy"]:
            for ranker in ("semantic", "hybrid"):
                keyword_heavy[ranker].append(recall(found[ranker], relevant))

    assert np.mean(semantic_recalls) == pytest.approx(np.mean(exact_recalls))
    semantic_kw = float(np.mean(keyword_heavy["semantic"]))
    hybrid_kw = float(np.mean(keyword_heavy["hybrid"]))
    record_property("recall@5", round(float(np.mean(semantic_recalls)), 3))
    record_property("keyword-heavy recall@5 semantic/hybrid", (semantic_kw, hybrid_kw))
    print(
        f"[{corpus.embedder} on {backend.name}] recall@5 semantic {np.mean(semantic_recalls):.3f}"
        f" (exact {np.mean(exact_recalls):.3f}); keyword-heavy queries: semantic "
        f"{semantic_kw:.3f}, hybrid {hybrid_kw:.3f}"
    )
    assert hybrid_kw >= semantic_kw
