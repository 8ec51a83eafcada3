"""Benchmark file_search's vector indexes: search latency and ingestion.

    python bench/index_bench.py                        # 10k and 100k chunks, ~2-3 min
    python bench/index_bench.py --quick                # fewer queries, < 60 s
    python bench/index_bench.py --backend sqlite --sizes 10000
    python bench/index_bench.py --out /tmp/index-bench.md

For each size (chunks of ``--dims`` 384 float32 dimensions, random unit vectors, ~40-word
texts drawn from a Zipf vocabulary, 100 chunks per file, one vector store), in one process:

- **ingestion**: ``replace_file_chunks`` file after file, rows/s, timed over the last
  ``--ingest-rows`` rows of the size (default all of them; 5,000 with ``--quick``, the rows
  before them bulk-loaded through the driver first), so it is the rate of filling the index
  up to that size (SQLite: FTS5 triggers included; PostgreSQL: the generated tsvector and its
  GIN index included);
- **SQLite semantic, numpy** (what ``SqliteVectorIndex`` ships): the first search (loads the
  store's matrix into the cache), then p50/p99 of ``search(ranker="semantic")`` through the
  whole index (version check, product, partial sort, text fetch), and of the product + top-k
  alone;
- **SQLite semantic, sqlite-vec** (the alternative measured): a ``vec0`` virtual table
  (``distance_metric=cosine``, its own brute-force KNN, ``k = 10``) and a
  ``vec_distance_cosine()`` scan of the ``chunks`` BLOBs, both on an ``apsw`` connection (the
  stdlib ``sqlite3`` of this Python cannot load extensions); needs ``pip install sqlite-vec
  apsw``, skipped otherwise;
- **keyword** (FTS5 / PostgreSQL full text) and **hybrid** p50/p99;
- **pgvector**: the same through ``PgVectorIndex`` (exact ``<=>`` scan).

Searches are sequential (c=1), 10 results, after 5 warm-up queries. PostgreSQL:
``--postgres-url`` (default ``$RESPGATE_TEST_POSTGRES_URL`` or the local ``test`` database),
in a scratch schema dropped afterwards. Prints a markdown section and writes it to ``--out``.
Nothing is asserted: these are figures.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import platform
import statistics
import struct
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import numpy as np
from sqlalchemy import event, text
from sqlalchemy.ext.asyncio import AsyncEngine

from app.core.tenancy import DEFAULT_TENANT
from app.files.ports import IndexedChunk, VectorIndex
from app.store import tables
from app.store.engine import create_engine_for, create_schema
from app.store.vector_index.pg_vector import PgVectorIndex
from app.store.vector_index.sqlite import SqliteVectorIndex, encode_embedding

DEFAULT_PG_URL = os.environ.get(
    "RESPGATE_TEST_POSTGRES_URL", "postgresql+asyncpg://postgres@127.0.0.1:5432/test"
)
VS = "vs_bench"
CHUNKS_PER_FILE = 100
WORDS_PER_CHUNK = 40
VOCABULARY = 20_000
TOP_K = 10
WARMUP = 5


# ----------------------------------------------------------------------------- data


class Corpus:
    """``size`` chunks: unit vectors, texts and the queries to run against them."""

    def __init__(self, size: int, dims: int, queries: int, seed: int = 7) -> None:
        rng = np.random.default_rng(seed)
        vectors = rng.standard_normal((size, dims)).astype(np.float32)
        self.vectors = vectors / np.linalg.norm(vectors, axis=1, keepdims=True)
        words = np.asarray([f"w{i}" for i in range(VOCABULARY)])
        picks = np.minimum(rng.zipf(1.3, size=(size, WORDS_PER_CHUNK)), VOCABULARY) - 1
        self.texts = [" ".join(row) + f" code-{i}" for i, row in enumerate(words[picks])]
        near = self.vectors[rng.integers(0, size, queries)]
        noisy = near + 0.5 * rng.standard_normal(near.shape).astype(np.float32) / np.sqrt(dims)
        self.queries = (noisy / np.linalg.norm(noisy, axis=1, keepdims=True)).astype(np.float32)
        # keyword queries: two mid-frequency words and a rare one
        self.keyword_queries = [
            f"w{rng.integers(50, 500)} w{rng.integers(50, 500)} w{rng.integers(2000, 20000)}"
            for _ in range(queries)
        ]

    def files(self) -> list[tuple[str, list[IndexedChunk]]]:
        out = []
        for start in range(0, len(self.texts), CHUNKS_PER_FILE):
            chunks = [
                IndexedChunk(
                    position=offset,
                    text=self.texts[start + offset],
                    tokens=WORDS_PER_CHUNK,
                    embedding=self.vectors[start + offset].tolist(),
                )
                for offset in range(min(CHUNKS_PER_FILE, len(self.texts) - start))
            ]
            out.append((f"file_{start // CHUNKS_PER_FILE:06d}", chunks))
        return out


# ----------------------------------------------------------------------------- timing


def percentiles(samples: list[float]) -> tuple[float, float]:
    """p50 and p99 in milliseconds."""
    ordered = sorted(samples)
    p99 = ordered[min(len(ordered) - 1, round(0.99 * (len(ordered) - 1)))]
    return statistics.median(ordered) * 1000, p99 * 1000


async def time_async(calls: list[Callable[[], Awaitable[Any]]]) -> tuple[float, float]:
    for call in calls[:WARMUP]:
        await call()
    samples = []
    for call in calls:
        started = time.perf_counter()
        await call()
        samples.append(time.perf_counter() - started)
    return percentiles(samples)


def time_sync(calls: list[Callable[[], Any]]) -> tuple[float, float]:
    for call in calls[:WARMUP]:
        call()
    samples = []
    for call in calls:
        started = time.perf_counter()
        call()
        samples.append(time.perf_counter() - started)
    return percentiles(samples)


def fmt(pair: tuple[float, float] | None) -> str:
    if pair is None:
        return "—"
    return f"{pair[0]:.2f} / {pair[1]:.2f}"


# ----------------------------------------------------------------------------- backends


@asynccontextmanager
async def sqlite_index(
    directory: Path,
) -> AsyncIterator[tuple[SqliteVectorIndex, AsyncEngine, Path]]:
    path = directory / f"index-{uuid.uuid4().hex[:8]}.db"
    engine = create_engine_for(f"sqlite+aiosqlite:///{path}")
    await create_schema(engine)
    try:
        yield SqliteVectorIndex(engine), engine, path
    finally:
        await engine.dispose()


@asynccontextmanager
async def postgres_index(url: str) -> AsyncIterator[tuple[PgVectorIndex, AsyncEngine]]:
    schema = f"bench_{uuid.uuid4().hex[:8]}"
    admin = create_engine_for(url)
    async with admin.begin() as conn:
        await conn.execute(text(f"CREATE SCHEMA {schema}"))
    engine: AsyncEngine = create_engine_for(url)

    @event.listens_for(engine.sync_engine, "connect")
    def _search_path(dbapi_connection: Any, _record: Any) -> None:
        autocommit = dbapi_connection.autocommit
        dbapi_connection.autocommit = True
        cursor = dbapi_connection.cursor()
        cursor.execute(f"SET SESSION search_path TO {schema}")
        cursor.close()
        dbapi_connection.autocommit = autocommit

    try:
        await create_schema(engine)
        yield PgVectorIndex(engine), engine
    finally:
        await engine.dispose()
        async with admin.begin() as conn:
            await conn.execute(text(f"DROP SCHEMA {schema} CASCADE"))
        await admin.dispose()


async def ingest(index: VectorIndex, engine: AsyncEngine, corpus: Corpus, measured: int) -> float:
    """rows/s of ``replace_file_chunks``, file after file, for the last ``measured`` rows; the
    rows before them are bulk-loaded first (one statement, not timed), so the figure is the
    rate of filling the index from ``size - measured`` to ``size`` chunks."""
    files = corpus.files()
    first = max(0, len(files) - -(-measured // CHUNKS_PER_FILE))
    await bulk_load(engine, files[:first])
    timed = files[first:]
    started = time.perf_counter()
    for file_id, chunks in timed:
        await index.replace_file_chunks(VS, file_id, chunks)
    rows = sum(len(chunks) for _file_id, chunks in timed)
    return rows / (time.perf_counter() - started)


async def bulk_load(engine: AsyncEngine, files: list[tuple[str, list[IndexedChunk]]]) -> None:
    """The chunks of ``files`` in one transaction, straight through the driver (SQLite: one
    executemany; PostgreSQL: a binary COPY, the GIN index rebuilt after it)."""
    if not files:
        return
    rows = [
        (VS, file_id, chunk.position, chunk.text, chunk.tokens, DEFAULT_TENANT, chunk.embedding)
        for file_id, chunks in files
        for chunk in chunks
    ]
    columns = ["vector_store_id", "file_id", "position", "text", "tokens", "tenant", "embedding"]
    async with engine.connect() as conn:
        driver: Any = (await conn.get_raw_connection()).driver_connection
        async with conn.begin():
            if engine.dialect.name == "sqlite":
                await driver.executemany(
                    f"INSERT INTO chunks ({', '.join(columns)}) VALUES (?, ?, ?, ?, ?, ?, ?)",
                    [(*row[:6], encode_embedding(row[6])) for row in rows],
                )
                return
            # pgvector's binary form (dims, 0, big-endian float32s) rather than ~4 KB of text
            # per vector for the server to parse; GIN built once at the end rather than per row.
            schema = await conn.scalar(
                text(
                    "SELECT n.nspname FROM pg_extension AS e JOIN pg_namespace AS n "
                    "ON n.oid = e.extnamespace WHERE e.extname = 'vector'"
                )
            )
            await driver.set_type_codec(
                "vector",
                schema=schema,
                encoder=lambda vector: (
                    struct.pack(">HH", len(vector), 0) + np.asarray(vector, dtype=">f4").tobytes()
                ),
                decoder=bytes,
                format="binary",
            )
            await conn.execute(text("SET LOCAL maintenance_work_mem = '256MB'"))
            await conn.execute(text(f"DROP INDEX {tables.PG_TSV_INDEX}"))
            await driver.copy_records_to_table("chunks", records=rows, columns=columns)
            await conn.execute(text(tables.PG_CHUNKS_DDL[1]))
        await conn.invalidate()  # no pooled connection keeps that codec


async def search_figures(index: VectorIndex, corpus: Corpus) -> dict[str, Any]:
    figures: dict[str, Any] = {}
    queries = [[float(x) for x in query] for query in corpus.queries]
    started = time.perf_counter()
    await index.search(VS, embedding=queries[0], query="", limit=TOP_K, ranker="semantic")
    figures["first"] = (time.perf_counter() - started) * 1000

    def semantic(vector: list[float]) -> Callable[[], Awaitable[Any]]:
        return lambda: index.search(VS, embedding=vector, query="", limit=TOP_K, ranker="semantic")

    def keyword(words: str) -> Callable[[], Awaitable[Any]]:
        return lambda: index.search(VS, embedding=None, query=words, limit=TOP_K, ranker="keyword")

    def hybrid(vector: list[float], words: str) -> Callable[[], Awaitable[Any]]:
        return lambda: index.search(VS, embedding=vector, query=words, limit=TOP_K, ranker="hybrid")

    figures["semantic"] = await time_async([semantic(vector) for vector in queries])
    figures["keyword"] = await time_async([keyword(words) for words in corpus.keyword_queries])
    figures["hybrid"] = await time_async(
        [hybrid(v, w) for v, w in zip(queries, corpus.keyword_queries, strict=True)]
    )
    return figures


def numpy_only(corpus: Corpus) -> tuple[float, float]:
    """The product and partial sort alone, on the same matrix the index caches."""
    matrix = corpus.vectors

    def top(query: np.ndarray[Any, Any]) -> Callable[[], Any]:
        def run() -> Any:
            scores = matrix @ query
            best = np.argpartition(-scores, TOP_K - 1)[:TOP_K]
            return best[np.argsort(-scores[best])]

        return run

    return time_sync([top(query) for query in corpus.queries])


def sqlite_vec_figures(corpus: Corpus, index_path: Path, scan_queries: int) -> dict[str, Any]:
    """sqlite-vec through apsw: a vec0 table (its own copy of the vectors) and a
    ``vec_distance_cosine`` scan of the index's own ``chunks`` BLOBs."""
    try:
        import apsw
        import sqlite_vec
    except ImportError:
        return {"skipped": "pip install sqlite-vec apsw"}
    figures: dict[str, Any] = {"version": None}
    dims = corpus.vectors.shape[1]
    with tempfile.TemporaryDirectory() as directory:
        connection = apsw.Connection(str(Path(directory) / "vec.db"))
        connection.enable_load_extension(True)
        connection.load_extension(sqlite_vec.loadable_path())
        figures["version"] = connection.execute("SELECT vec_version()").fetchall()[0][0]
        connection.execute(
            f"CREATE VIRTUAL TABLE vec_chunks USING vec0(embedding float[{dims}] "
            "distance_metric=cosine)"
        )
        started = time.perf_counter()
        with connection:
            connection.executemany(
                "INSERT INTO vec_chunks(rowid, embedding) VALUES (?, ?)",
                ((i + 1, corpus.vectors[i].tobytes()) for i in range(len(corpus.texts))),
            )
        figures["vec0_insert"] = len(corpus.texts) / (time.perf_counter() - started)
        knn = (
            "SELECT rowid, distance FROM vec_chunks WHERE embedding MATCH ? AND k = ? "
            "ORDER BY distance"
        )

        def vec0(query: np.ndarray[Any, Any]) -> Callable[[], Any]:
            blob = query.astype(np.float32).tobytes()
            return lambda: connection.execute(knn, (blob, TOP_K)).fetchall()

        figures["vec0"] = time_sync([vec0(query) for query in corpus.queries])
        connection.close()

    scan = apsw.Connection(str(index_path), flags=apsw.SQLITE_OPEN_READONLY)
    scan.enable_load_extension(True)
    scan.load_extension(sqlite_vec.loadable_path())
    scan_sql = (
        "SELECT id, vec_distance_cosine(embedding, ?) AS distance FROM chunks "
        "WHERE vector_store_id = ? ORDER BY distance LIMIT ?"
    )

    def scan_query(query: np.ndarray[Any, Any]) -> Callable[[], Any]:
        blob = query.astype(np.float32).tobytes()
        return lambda: scan.execute(scan_sql, (blob, VS, TOP_K)).fetchall()

    figures["scan"] = time_sync([scan_query(query) for query in corpus.queries[:scan_queries]])
    scan.close()
    return figures


# ----------------------------------------------------------------------------- run


async def bench_sqlite(
    corpus: Corpus, directory: Path, scan_queries: int, measured: int
) -> dict[str, Any]:
    async with sqlite_index(directory) as (indexes, engine, path):
        index = indexes.for_tenant(DEFAULT_TENANT)
        figures: dict[str, Any] = {"ingest": await ingest(index, engine, corpus, measured)}
        figures["ingest_rows"] = measured
        figures.update(await search_figures(index, corpus))
        figures["numpy_only"] = numpy_only(corpus)
        figures["sqlite_vec"] = sqlite_vec_figures(corpus, path, scan_queries)
    return figures


async def bench_postgres(corpus: Corpus, url: str, measured: int) -> dict[str, Any]:
    async with postgres_index(url) as (indexes, engine):
        index = indexes.for_tenant(DEFAULT_TENANT)
        figures: dict[str, Any] = {"ingest": await ingest(index, engine, corpus, measured)}
        figures["ingest_rows"] = measured
        async with engine.begin() as conn:
            await conn.execute(text("ANALYZE chunks"))
        figures.update(await search_figures(index, corpus))
    return figures


def environment() -> str:
    try:
        commit = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, check=True
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "status", "--porcelain", "app"], capture_output=True, text=True, check=True
        ).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        commit, dirty = "unknown", ""
    import sqlite3

    return (
        f"commit `{commit}`{' (app/ dirty)' if dirty else ''}, {os.cpu_count()} CPUs, "
        f"Python {platform.python_version()}, numpy {np.__version__}, "
        f"SQLite {sqlite3.sqlite_version}"
    )


def report(
    sizes: list[int],
    sqlite: dict[int, dict[str, Any]],
    postgres: dict[int, dict[str, Any]],
    queries: int,
) -> str:
    lines = [f"Index bench: {environment()}; {queries} queries per figure, top {TOP_K}.", ""]
    header = "| p50 / p99 ms | " + " | ".join(f"{size:,} chunks" for size in sizes) + " |"
    lines += [header, "|---|" + "---:|" * len(sizes)]

    def row(label: str, pick: Callable[[int], str]) -> None:
        lines.append(f"| {label} | " + " | ".join(pick(size) for size in sizes) + " |")

    if sqlite:
        row(
            "SQLite semantic, numpy (as shipped, whole search)",
            lambda s: fmt(sqlite[s]["semantic"]),
        )
        row("SQLite semantic, numpy: product + top-k only", lambda s: fmt(sqlite[s]["numpy_only"]))
        row(
            "SQLite semantic, first search (matrix load), ms", lambda s: f"{sqlite[s]['first']:.0f}"
        )

        def vec(key: str) -> Callable[[int], str]:
            def pick(size: int) -> str:
                figures = sqlite[size]["sqlite_vec"]
                return fmt(figures.get(key)) if "skipped" not in figures else "skipped"

            return pick

        row("SQLite semantic, sqlite-vec vec0 KNN (k=10)", vec("vec0"))
        row("SQLite semantic, sqlite-vec `vec_distance_cosine` scan", vec("scan"))
        row("SQLite keyword (FTS5 bm25)", lambda s: fmt(sqlite[s]["keyword"]))
        row("SQLite hybrid (RRF)", lambda s: fmt(sqlite[s]["hybrid"]))
    if postgres:
        row("pgvector semantic (exact `<=>` scan)", lambda s: fmt(postgres[s]["semantic"]))
        row("pgvector first search, ms", lambda s: f"{postgres[s]['first']:.0f}")
        row("PostgreSQL keyword (tsvector, ts_rank_cd)", lambda s: fmt(postgres[s]["keyword"]))
        row("PostgreSQL hybrid (RRF)", lambda s: fmt(postgres[s]["hybrid"]))
    timed = {figures["ingest_rows"] for figures in [*sqlite.values(), *postgres.values()]}
    lines += [
        "",
        "| ingestion, rows/s (filling the index up to) | "
        + " | ".join(f"{s:,}" for s in sizes)
        + " |",
    ]
    lines.append("|---|" + "---:|" * len(sizes))
    if sqlite:
        row(
            "SQLite index (`replace_file_chunks`, 100 per file)",
            lambda s: f"{sqlite[s]['ingest']:,.0f}",
        )

        def vec0_insert(size: int) -> str:
            figures = sqlite[size]["sqlite_vec"]
            return f"{figures['vec0_insert']:,.0f}" if "vec0_insert" in figures else "skipped"

        row("sqlite-vec vec0 insert alone (apsw executemany)", vec0_insert)
    if postgres:
        row(
            "pgvector index (`replace_file_chunks`, 100 per file)",
            lambda s: f"{postgres[s]['ingest']:,.0f}",
        )
    lines += [
        "",
        "Ingestion: `replace_file_chunks` of 100-chunk files, timed over the last "
        + ", ".join(f"{rows:,}" for rows in sorted(timed))
        + " rows of each size (the rows before them bulk-loaded, untimed).",
    ]
    versions = {
        str(figures["sqlite_vec"].get("version"))
        for figures in sqlite.values()
        if figures["sqlite_vec"].get("version")
    }
    if versions:
        lines += ["", f"sqlite-vec {', '.join(sorted(versions))} (through apsw's own SQLite)."]
    return "\n".join(lines) + "\n"


async def main_async(args: argparse.Namespace) -> str:
    sizes = [int(size) for size in args.sizes.split(",")]
    queries = args.queries or (30 if args.quick else 200)
    scan_queries = min(queries, 10 if args.quick else 40)
    sqlite: dict[int, dict[str, Any]] = {}
    postgres: dict[int, dict[str, Any]] = {}
    with tempfile.TemporaryDirectory() as directory:
        for size in sizes:
            started = time.perf_counter()
            corpus = Corpus(size, args.dims, queries + WARMUP)
            measured = min(size, args.ingest_rows or (5_000 if args.quick else size))
            print(
                f"# {size:,} chunks: data in {time.perf_counter() - started:.1f}s", file=sys.stderr
            )
            if args.backend in ("all", "sqlite"):
                sqlite[size] = await bench_sqlite(corpus, Path(directory), scan_queries, measured)
                print(f"# sqlite {size:,}: {sqlite[size]}", file=sys.stderr)
            if args.backend in ("all", "postgres"):
                postgres[size] = await bench_postgres(corpus, args.postgres_url, measured)
                print(f"# postgres {size:,}: {postgres[size]}", file=sys.stderr)
    return report(sizes, sqlite, postgres, queries)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument(
        "--quick", action="store_true", help="30 queries per figure, 5,000 rows ingestion"
    )
    parser.add_argument("--sizes", default="10000,100000", help="chunk counts, comma-separated")
    parser.add_argument("--dims", type=int, default=384)
    parser.add_argument("--queries", type=int, default=0, help="queries per figure")
    parser.add_argument(
        "--ingest-rows",
        type=int,
        default=0,
        help="rows ingested through the index and timed (the rest bulk-loaded before them); "
        "default all, 5,000 with --quick",
    )
    parser.add_argument("--backend", choices=("all", "sqlite", "postgres"), default="all")
    parser.add_argument("--postgres-url", default=DEFAULT_PG_URL)
    parser.add_argument("--out", default="/tmp/respgate-index-bench.md")
    args = parser.parse_args()
    started = time.perf_counter()
    markdown = asyncio.run(main_async(args))
    print(markdown)
    Path(args.out).write_text(markdown)
    print(f"written to {args.out} in {time.perf_counter() - started:.0f}s", file=sys.stderr)


if __name__ == "__main__":
    main()
