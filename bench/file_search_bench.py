"""End-to-end file_search round: what one file_search tool round adds to a response.

    python bench/file_search_bench.py                  # (a) 1k and 10k chunks, then (b), ~7 min
    python bench/file_search_bench.py --quick          # (a) only, fewer iterations: < 60 s
    python bench/file_search_bench.py --part http      # (b) only;  --part inproc: (a) only
    python bench/file_search_bench.py --contention     # + the embedding with one core busy, +30 s
    python bench/file_search_bench.py --sizes 10000 --iterations 1000 --no-profile
    OPENBLAS_NUM_THREADS=1 python bench/file_search_bench.py --part inproc --sizes 10000

Every figure is a difference against the same tool loop with an instant tool, taken in the
same run (entries interleaved, order rotating, as ``loop_bench.py`` does). A response for model
``loop-K`` has K rounds: K-1 that end in a call to the request's first function tool, then one
that ends in a message. One tool round costs T(K=2) - T(K=1) of the same request.

(a) in process (``--part inproc``), for each ``--sizes`` (chunks in one vector store):
    - ``ResponsesService`` with an instant in-memory upstream (``SearchUpstream``: no I/O,
      events parsed from pre-serialized JSON with orjson, like ``loop_bench.InstantUpstream``;
      round 1 is a ``function_call`` to ``file_search`` with ``{"query": ...}``, a different
      query each time from a fixed list, round 2 a message) and ``tests.fakes.
      MemoryResponseStore`` (``"store": false``);
    - toolkit ``GatewayToolKit([FileSearchToolProvider(vector_stores)])``, the gateway's own
      provider, on a real ``VectorStoresService``: ``SqlFileStore`` and ``SqliteVectorIndex``
      (``app.main.build_vector_index``) on a temporary SQLite database prepared with
      ``app.store.migrate.prepare_database``, ``DiskBlobStore`` in a temporary directory.
      The store holds N chunks in files of 100, ingested straight through the index
      (``replace_file_chunks``: FTS5 triggers included) with precomputed random unit vectors
      of 384 dimensions and ~``--words`` words of text per chunk (Zipf over a vocabulary whose
      head is common English words, so natural-language queries hit them in the full-text
      half of the default hybrid ranking as they would on real text); every file is recorded
      ``completed`` with a filename;
    - two embedders: ``LocalEmbedder`` (the bundled all-MiniLM-L6-v2 on the CPU, what the
      gateway uses by default: it embeds the query in every round) and an instant fake that
      returns a precomputed unit vector, so the embedding and the gateway's own cost separate;
    - the same loop with the instant tool (``loop_bench.InstantToolKit``) as the baseline.
    The tool is ``{"type": "file_search", "vector_store_ids": [id]}``: defaults, i.e. 10
    results and the hybrid ranker, results not included in the response.
    Interleaved entries, streaming (events encoded with ``app.api.sse.encode_event``) and JSON
    (``create`` + orjson dump), each timed for wall clock, process CPU (all threads: aiosqlite's
    and the embedder's included) and the event-loop thread's CPU:
      no tools | instant K=1 | instant K=2 | file_search K=1 | file_search K=2 (fake embedder) |
      file_search K=2 (local embedder)
    and, in the streaming group, the components on their own: the query embedding
    (``LocalEmbedder.embed([query])``), ``SearchService.search`` (fake embedder) as the
    tool calls it, and ``SqliteVectorIndex.search(ranker="hybrid")`` alone. The tool's own run
    time inside the loop is also taken from ``ToolEvents`` (``duration_ms``).
    The local embedder's entries run in a group of their own (file_search K=1, K=2 with each
    embedder, the embedding alone), so that torch's threads, which keep spinning a while after
    an embedding, do not take CPU from the other entries.
    Then: the SQL statements one search issues (by kind), and a cProfile pass (wall clock) over
    file_search K=2 responses with the fake embedder (streaming): top functions by own time,
    own time by module, and app functions inclusive, in µs per response.
    ``--contention``: the query embedding alone, torch's default threads and one, on the idle
    machine and with a busy loop of this benchmark's own in another process.

(b) over HTTP (``--part http``; ``--quick`` leaves it out unless asked): the shared mock upstream
    (``shared/bench/mock_upstream.py``'s raw server, imported by path, with ``loop_bench``'s
    ``loop-K`` rule and the file_search query rotated through the same list) and two gateways
    as ``bench/gateway_launcher.py`` runs them (uvicorn defaults; ``loop_bench``'s instant tool
    added at run time), each on its own copy of a prepared data directory holding a store of
    ``--http-size`` chunks: one with the local embedder, one with the fake embedder patched in
    at run time. ``shared/bench/load.py`` at c=1, JSON and SSE: the mock directly, then each
    request through the gateways. Reported: p50/p99, the gateway's CPU per request, and the p50
    added per round (K=2 - K=1 of the same tool).

Nothing is asserted. Raw results go to ``--out`` (JSON).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import cProfile
import importlib.util
import json
import os
import pstats
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import orjson

from app.core.tenancy import DEFAULT_TENANT  # the bench's stores are the default tenant's

sys.path.insert(0, str(Path(__file__).resolve().parent))

import _harness
from _harness import (
    DEFAULT_SHARED_BENCH,
    Server,
    fmt,
    free_port,
    machine_info,
    run_load,
    running,
    summarize,
    use_ref,
)
from loop_bench import (
    CALL_ARGUMENTS,
    INPUT,
    InstantToolKit,
    _Events,
    category,
    check_response,
    first_function,
    make_runner,
    outputs_in,
    parsed,
    rounds_wanted,
)
from mcp_bench import pct, run_loop

JsonObject = dict[str, Any]
DIMS = 384
CHUNKS_PER_FILE = 100
VOCABULARY = 20_000
QUERY_COUNT = 64
QUESTION = "What do my files say about this?"
ANSWER = "According to the files, the answer is in the passages above."
# The head of the Zipf vocabulary: frequent English words, so that a natural-language query
# has terms that match most chunks in the full-text ranking, as on real documents.
_COMMON_WORDS = (
    "the of and to a in is it you that he was for on are with as I his they be at one have "
    "this from or had by not word but what some we can out other were all there when up use "
    "your how said an each she which do their time if will way about many then them write "
    "would like so these her long make thing see him two has look more day could go come did "
    "number sound no most people my over know water than call first who may down side been "
    "now find"
)
COMMON = _COMMON_WORDS.split()


def app_root() -> Path:
    return Path(_harness.APP_ROOT)


# ============================================================================= data


class Corpus:
    """``size`` chunks (unit vectors and texts) and the queries (texts, and for the fake
    embedder a vector near a stored one)."""

    def __init__(self, size: int, words: int, seed: int = 11) -> None:
        rng = np.random.default_rng(seed)
        vectors = rng.standard_normal((size, DIMS), dtype=np.float32)
        self.vectors = vectors / np.linalg.norm(vectors, axis=1, keepdims=True)
        vocabulary = COMMON + [f"w{i}" for i in range(VOCABULARY - len(COMMON))]
        picks = np.minimum(rng.zipf(1.3, size=(size, words)), VOCABULARY) - 1
        self.texts = [" ".join([vocabulary[i] for i in row]) for row in picks.tolist()]
        qrng = np.random.default_rng(seed + 1)
        words_of = [
            (
                vocabulary[int(qrng.integers(100, 600))],
                vocabulary[int(qrng.integers(100, 600))],
                vocabulary[int(qrng.integers(2000, VOCABULARY))],
            )
            for _ in range(QUERY_COUNT)
        ]
        self.queries = [f"what do the files say about {a} and {b} in {c}" for a, b, c in words_of]
        # The same queries without their common words (as index_bench.py's keyword queries).
        self.term_queries = dict(zip(self.queries, (" ".join(w) for w in words_of), strict=True))
        near = self.vectors[qrng.integers(0, size, QUERY_COUNT)]
        noisy = near + 0.5 * qrng.standard_normal(near.shape).astype(np.float32) / np.sqrt(DIMS)
        unit = noisy / np.linalg.norm(noisy, axis=1, keepdims=True)
        self.query_vectors: dict[str, list[float]] = {
            query: [float(x) for x in vector]
            for query, vector in zip(self.queries, unit, strict=True)
        }


class FakeEmbedder:
    """``core.ports.Embedder`` that answers at once with precomputed vectors."""

    name = "fake/instant"

    def __init__(self, table: Mapping[str, list[float]]) -> None:
        self._table = dict(table)
        self._fallback = next(iter(self._table.values()))

    async def embed(self, texts: list[str]) -> list[list[float]]:
        return [self._table.get(text, self._fallback) for text in texts]

    async def aclose(self) -> None:
        return None


async def populate(url: str, corpus: Corpus, vs_id: str) -> float:
    """The database at ``url`` prepared (migrations) and holding one completed vector store
    of ``corpus``; returns the seconds the index's ingestion took."""
    from app.files.chunking import normalize_chunking_strategy
    from app.files.ports import IndexedChunk, StoredFile, StoredVectorStore, StoredVectorStoreFile
    from app.main import build_vector_index
    from app.store.engine import create_engine_for
    from app.store.files_sql import SqlFileStores
    from app.store.migrate import prepare_database

    await prepare_database(url, auto_migrate=True)
    engine = create_engine_for(url)
    try:
        files = SqlFileStores(engine).for_tenant(DEFAULT_TENANT)
        indexes = await build_vector_index(engine)
        index = indexes.for_tenant(DEFAULT_TENANT)
        now = int(time.time())
        chunking = normalize_chunking_strategy(None)
        size = len(corpus.texts)
        await files.create_vector_store(
            StoredVectorStore(
                id=vs_id,
                name=f"bench {size}",
                created_at=now,
                metadata={},
                expires_after=None,
                expires_at=None,
                last_active_at=now,
                status="completed",
                usage_bytes=sum(len(t) for t in corpus.texts),
            )
        )
        ingest = 0.0
        for number, start in enumerate(range(0, size, CHUNKS_PER_FILE)):
            file_id = f"file-bench{number:06d}"
            texts = corpus.texts[start : start + CHUNKS_PER_FILE]
            usage = sum(len(t) for t in texts)
            await files.add_file(
                StoredFile(
                    id=file_id,
                    filename=f"doc-{number:05d}.txt",
                    purpose="assistants",
                    bytes=usage,
                    created_at=now,
                )
            )
            await files.put_vector_store_file(
                StoredVectorStoreFile(
                    vector_store_id=vs_id,
                    file_id=file_id,
                    created_at=now,
                    status="completed",
                    last_error=None,
                    attributes={},
                    chunking_strategy=chunking,
                    usage_bytes=usage,
                )
            )
            chunks = [
                IndexedChunk(
                    position=offset,
                    text=text,
                    tokens=len(text.split()),
                    embedding=corpus.vectors[start + offset].tolist(),
                )
                for offset, text in enumerate(texts)
            ]
            started = time.perf_counter()
            await index.replace_file_chunks(vs_id, file_id, chunks)
            ingest += time.perf_counter() - started
        await indexes.aclose()
    finally:
        await engine.dispose()
    return ingest


# ============================================================================= (a) in process


class SearchUpstream:
    """``core.ports.Upstream`` without I/O, ``loop-K`` as in ``loop_bench.InstantUpstream``;
    a call to a tool named ``file_search`` gets ``{"query": q}`` with the next of ``queries``,
    any other tool ``loop_bench.CALL_ARGUMENTS``."""

    def __init__(self, queries: list[str]) -> None:
        from tests.fakes import USAGE, function_call, message, round_events

        self._n = 0
        self._queries = queries
        self.last_output: str | None = None
        self.record = False
        text = message(ANSWER) | {"id": "msg_@N@"}
        self._message = {
            "stream": b"\n".join(orjson.dumps(e) for e in round_events([text])),
            "json": orjson.dumps({"status": "completed", "output": [text], "usage": USAGE}),
        }
        self._calls: dict[tuple[str, str, int], bytes] = {}
        self._make = (USAGE, function_call, round_events)

    def _call(self, kind: str, name: str, number: int) -> bytes:
        query = number % len(self._queries) if name == "file_search" else -1
        key = (kind, name, query)
        raw = self._calls.get(key)
        if raw is None:
            usage, function_call, round_events = self._make
            arguments = (
                orjson.dumps({"query": self._queries[query]}).decode()
                if query >= 0
                else CALL_ARGUMENTS
            )
            call = function_call(name, arguments, call_id="call_@N@") | {"id": "fc_@N@"}
            if kind == "stream":
                raw = b"\n".join(orjson.dumps(e) for e in round_events([call]))
            else:
                raw = orjson.dumps({"status": "completed", "output": [call], "usage": usage})
            self._calls[key] = raw
        return raw

    def _template(self, body: Mapping[str, Any], kind: str) -> bytes:
        self._n += 1
        if self.record:
            outputs = [
                i.get("output")
                for i in body.get("input") or []
                if isinstance(i, dict) and i.get("type") == "function_call_output"
            ]
            self.last_output = str(outputs[-1]) if outputs else None
        name = first_function(body)
        calls = name is not None and outputs_in(body) < rounds_wanted(body) - 1
        raw = self._call(kind, name, self._n) if calls and name else self._message[kind]
        return raw.replace(b"@N@", str(self._n).encode())

    async def create_response(self, body: JsonObject, headers: Mapping[str, str]) -> JsonObject:
        data: JsonObject = orjson.loads(self._template(body, "json"))
        return data

    async def stream_response(self, body: JsonObject, headers: Mapping[str, str]) -> _Events:
        raw = self._template(body, "stream")
        return _Events([orjson.loads(line) for line in raw.split(b"\n")])

    async def list_models(self, headers: Mapping[str, str]) -> Any:
        raise NotImplementedError

    async def check_ready(self) -> bool:
        return True

    async def aclose(self) -> None:
        return None


@dataclass
class Setup:
    """One store of ``size`` chunks and everything that searches it."""

    size: int
    corpus: Corpus
    vs_id: str
    engine: Any
    index: Any
    fake: Any  # VectorStoresService with the fake embedder
    local: Any  # VectorStoresService with the LocalEmbedder
    ingest_s: float
    first_search_ms: float


@contextlib.asynccontextmanager
async def store_setup(size: int, words: int, local_embedder: Any, tmp: Path) -> Any:
    from app.files.requests import parse_search
    from app.files.vector_stores import VectorStoresService
    from app.main import build_vector_index
    from app.store.blobs import DiskBlobStore
    from app.store.engine import create_engine_for
    from app.store.files_sql import SqlFileStores

    started = time.perf_counter()
    corpus = Corpus(size, words)
    made = time.perf_counter() - started
    url = f"sqlite+aiosqlite:///{tmp / 'respgate.db'}"
    vs_id = f"vs_bench{size}"
    ingest = await populate(url, corpus, vs_id)
    print(
        f"  {size:,} chunks: corpus {made:.1f} s, ingestion through the index {ingest:.1f} s "
        f"({size / ingest:,.0f} chunks/s)",
        flush=True,
    )
    engine = create_engine_for(url)
    index = await build_vector_index(engine)
    file_store = SqlFileStores(engine)
    blobs = DiskBlobStore(tmp / "files")
    fake = VectorStoresService(
        file_store, blobs, index, FakeEmbedder(corpus.query_vectors), time.time
    )
    local = VectorStoresService(file_store, blobs, index, local_embedder, time.time)
    t0 = time.perf_counter()
    await fake.searcher.search(
        vs_id, parse_search({"query": corpus.queries[0]}), tenant=DEFAULT_TENANT
    )
    first = (time.perf_counter() - t0) * 1000
    try:
        yield Setup(size, corpus, vs_id, engine, index, fake, local, ingest, first)
    finally:
        await fake.aclose()
        await local.aclose()
        await index.aclose()
        await engine.dispose()


class Durations:
    """``ToolEvents`` hook: the tool's run time inside the loop (``duration_ms``). Async, so
    the bus awaits it on the event loop rather than in a thread."""

    def __init__(self) -> None:
        self.values: list[float] = []

    async def __call__(self, event: Any) -> None:
        if event.type != "tool_call.started" and event.duration_ms is not None:
            self.values.append(event.duration_ms * 1000)


async def interleaved(
    entries: dict[str, Callable[[], Awaitable[Any]]],
    iterations: int,
    warmup: int,
    on_warm: Callable[[], None] = lambda: None,
) -> dict[str, dict[str, Any]]:
    """Every entry once per iteration, order rotating; wall, process CPU (all threads) and
    this thread's CPU per call, in µs."""
    names = list(entries)
    for _ in range(warmup):
        for name in names:
            await entries[name]()
    on_warm()
    wall: dict[str, list[float]] = {n: [] for n in names}
    cpu: dict[str, list[float]] = {n: [] for n in names}
    main: dict[str, list[float]] = {n: [] for n in names}
    perf, ptime, ttime = time.perf_counter_ns, time.process_time_ns, time.thread_time_ns
    for i in range(iterations):
        shift = i % len(names)
        for name in names[shift:] + names[:shift]:
            entry = entries[name]
            c0 = ptime()
            m0 = ttime()
            t0 = perf()
            await entry()
            t1 = perf()
            m1 = ttime()
            c1 = ptime()
            wall[name].append((t1 - t0) / 1e3)
            cpu[name].append((c1 - c0) / 1e3)
            main[name].append((m1 - m0) / 1e3)
    return {n: describe(wall[n], cpu[n], main[n]) for n in names}


def describe(wall: list[float], cpu: list[float], main: list[float]) -> dict[str, Any]:
    return {
        "n": len(wall),
        "p50_us": pct(wall, 50),
        "p90_us": pct(wall, 90),
        "p99_us": pct(wall, 99),
        "mean_us": statistics.fmean(wall),
        "cpu_mean_us": statistics.fmean(cpu) if cpu else None,
        "main_cpu_mean_us": statistics.fmean(main) if main else None,
    }


def check_search_response(response: JsonObject | None, rounds: int, query_in: list[str]) -> None:
    assert response is not None and response.get("status") == "completed", response
    output = response.get("output") or []
    kinds = [item.get("type") for item in output]
    assert kinds == ["file_search_call"] * (rounds - 1) + ["message"], kinds
    for call in output[:-1]:
        assert call.get("status") == "completed", call
        assert call.get("queries") and call["queries"][0] in query_in, call


def fs_body(vs_id: str, k: int, **extra: Any) -> JsonObject:
    return {
        "model": f"loop-{k}",
        "input": QUESTION,
        "tools": [{"type": "file_search", "vector_store_ids": [vs_id]}],
        "store": False,
        **extra,
    }


def services(setup: Setup) -> dict[str, Any]:
    """The three ``ResponsesService``s (instant tool, file_search with each embedder), their
    upstreams and their ``ToolEvents`` recorders."""
    from app.core.loop import LoopLimits
    from app.core.observe import ToolEvents
    from app.core.service import ResponsesService
    from app.tools.file_search.provider import FileSearchToolProvider
    from app.tools.toolkit import GatewayToolKit
    from tests.fakes import MemoryResponseStore

    out: dict[str, Any] = {}
    for label, kit in (
        ("instant", lambda: InstantToolKit()),
        ("fake", lambda: GatewayToolKit([FileSearchToolProvider(setup.fake.searcher)])),
        ("local", lambda: GatewayToolKit([FileSearchToolProvider(setup.local.searcher)])),
    ):
        upstream = SearchUpstream(setup.corpus.queries)
        events = ToolEvents()
        durations = Durations()
        events.subscribe(durations)
        service = ResponsesService(
            upstream,
            MemoryResponseStore(),
            toolkit=kit(),
            limits=LoopLimits(max_rounds=4),
            tool_events=events,
        )
        out[label] = {
            "service": service,
            "upstream": upstream,
            "durations": durations,
            "events": events,
        }
    return out


async def check_setup(setup: Setup, svc: dict[str, Any]) -> dict[str, Any]:
    """One checked response of each kind (results included once, fed to the model)."""
    queries = setup.corpus.queries
    for label in ("fake", "local"):
        upstream = svc[label]["upstream"]
        upstream.record = True
        body = fs_body(setup.vs_id, 2, include=["file_search_call.results"])
        response = await svc[label]["service"].create(parsed(body), {})
        upstream.record = False
        check_search_response(response, 2, queries)
        results = response["output"][0]["results"]
        assert len(results) == 10 and all(r["filename"].startswith("doc-") for r in results)
        fed = upstream.last_output or ""
        assert fed.startswith("[1] doc-") and fed.count("\n\n[") == 9, fed[:200]
    instant = svc["instant"]["service"]
    for k in (1, 2):
        body = {"model": f"loop-{k}", "input": INPUT, "tools": [{"type": "instant"}]}
        check_response(
            await instant.create(parsed({**body, "store": False}), {}), k, f"instant K={k}"
        )
    return {"results": len(results), "fed_chars": len(fed)}


def response_entries(
    setup: Setup, svc: dict[str, Any], stream: bool
) -> dict[str, Callable[[], Awaitable[Any]]]:
    instant = svc["instant"]["service"]
    tool = [{"type": "instant"}]
    return {
        "no tools": make_runner(
            instant, {"model": "loop-1", "input": INPUT, "store": False}, stream
        ),
        "instant K=1": make_runner(
            instant, {"model": "loop-1", "input": INPUT, "tools": tool, "store": False}, stream
        ),
        "instant K=2": make_runner(
            instant, {"model": "loop-2", "input": INPUT, "tools": tool, "store": False}, stream
        ),
        "file_search K=1": make_runner(svc["fake"]["service"], fs_body(setup.vs_id, 1), stream),
        "file_search K=2, fake embedder": make_runner(
            svc["fake"]["service"], fs_body(setup.vs_id, 2), stream
        ),
        "file_search K=2, local embedder": make_runner(
            svc["local"]["service"], fs_body(setup.vs_id, 2), stream
        ),
    }


def component_entries(setup: Setup) -> dict[str, Callable[[], Awaitable[Any]]]:
    from app.files.requests import parse_search

    corpus = setup.corpus
    queries = corpus.queries
    counters = {"embed": 0, "search": 0, "index": 0}

    def nxt(key: str) -> str:
        counters[key] += 1
        return queries[counters[key] % len(queries)]

    async def embed() -> Any:
        return await setup.local.searcher.embedder.embed([nxt("embed")])

    async def search() -> Any:
        return await setup.fake.searcher.search(
            setup.vs_id,
            parse_search({"query": nxt("search"), "max_num_results": 10}),
            tenant=DEFAULT_TENANT,
        )

    async def index_search() -> Any:
        query = nxt("index")
        return await setup.index.for_tenant(DEFAULT_TENANT).search(
            setup.vs_id,
            embedding=corpus.query_vectors[query],
            query=query,
            limit=10,
            ranker="hybrid",
        )

    async def index_semantic() -> Any:
        query = nxt("index")
        return await setup.index.for_tenant(DEFAULT_TENANT).search(
            setup.vs_id,
            embedding=corpus.query_vectors[query],
            query=query,
            limit=10,
            ranker="semantic",
        )

    async def index_terms() -> Any:
        query = nxt("index")
        return await setup.index.for_tenant(DEFAULT_TENANT).search(
            setup.vs_id,
            embedding=corpus.query_vectors[query],
            query=corpus.term_queries[query],
            limit=10,
            ranker="hybrid",
        )

    return {
        "query embedding alone (local)": embed,
        "SearchService.search alone (fake)": search,
        "index.search alone (hybrid)": index_search,
        "index.search alone (semantic)": index_semantic,
        "index.search alone (hybrid, content words only)": index_terms,
    }


ROUNDS = (
    ("instant tool", "instant K=2", "instant K=1"),
    ("file_search, fake embedder", "file_search K=2, fake embedder", "file_search K=1"),
    ("file_search, local embedder", "file_search K=2, local embedder", "file_search K=1"),
)


def round_figures(stats: dict[str, dict[str, Any]]) -> dict[str, dict[str, float]]:
    out: dict[str, dict[str, float]] = {}
    for label, hi, lo in ROUNDS:
        if hi not in stats:
            continue
        a, b = stats[hi], stats[lo]
        out[label] = {
            "p50_us": a["p50_us"] - b["p50_us"],
            "p99_us": a["p99_us"] - b["p99_us"],
            "cpu_us": a["cpu_mean_us"] - b["cpu_mean_us"],
            "main_cpu_us": a["main_cpu_mean_us"] - b["main_cpu_mean_us"],
        }
    if "instant tool" in out:
        for label, row in out.items():
            if label != "instant tool":
                add_vs_instant(row, out["instant tool"])
    return out


def add_vs_instant(row: dict[str, float], instant: dict[str, float]) -> None:
    row["added_p50_us"] = row["p50_us"] - instant["p50_us"]
    row["added_p99_us"] = row["p99_us"] - instant["p99_us"]
    row["added_cpu_us"] = row["cpu_us"] - instant["cpu_us"]


async def sql_counts(setup: Setup) -> dict[str, Any]:
    """Statements one ``SearchService.search`` issues: through SQLAlchemy (aiosqlite's
    thread; by kind, COMMIT/ROLLBACK not included: they are driver calls) and inline
    (``sqlite3`` on the calling thread). A search also writes the store's
    ``last_active_at`` once per second; this search is run right after another, so it does
    not."""
    import re

    from sqlalchemy import event

    from app.files.requests import parse_search

    counts: dict[str, Any] = {"sqlalchemy": 0, "inline": 0, "kinds": {}}

    def count(_conn: Any, _cursor: Any, statement: str, *_: Any) -> None:
        counts["sqlalchemy"] += 1
        flat = " ".join(statement.split())
        table = re.search(r"\b(?:FROM|UPDATE|INTO)\s+(\w+)", flat)
        kind = flat.split(" ", 1)[0]
        if kind == "BEGIN":
            kind = flat
        elif table:
            kind = f"{kind} {table.group(1)}"
        counts["kinds"][kind] = counts["kinds"].get(kind, 0) + 1

    await setup.fake.searcher.search(
        setup.vs_id, parse_search({"query": setup.corpus.queries[2]}), tenant=DEFAULT_TENANT
    )
    inline = getattr(setup.index, "_inline", None)
    original = inline.fetch if inline is not None else None
    if inline is not None and original is not None:

        def fetch(sql: str, args: Any) -> Any:
            counts["inline"] += 1
            return original(sql, args)

        inline.fetch = fetch
    event.listen(setup.engine.sync_engine, "before_cursor_execute", count)
    try:
        await setup.fake.searcher.search(
            setup.vs_id, parse_search({"query": setup.corpus.queries[1]}), tenant=DEFAULT_TENANT
        )
    finally:
        event.remove(setup.engine.sync_engine, "before_cursor_execute", count)
        if inline is not None:
            del inline.fetch
    return counts


async def profile_round(setup: Setup, svc: dict[str, Any], responses: int) -> dict[str, Any]:
    """cProfile (wall clock) over file_search K=2 responses, fake embedder, streaming."""
    run = make_runner(svc["fake"]["service"], fs_body(setup.vs_id, 2), True)
    for _ in range(20):
        await run()
    prof = cProfile.Profile()
    started = time.perf_counter()
    prof.enable()
    for _ in range(responses):
        await run()
    prof.disable()
    elapsed = time.perf_counter() - started
    stats = pstats.Stats(prof)
    raw = stats.stats  # type: ignore[attr-defined]
    total = sum(v[2] for v in raw.values())
    rows = sorted(raw.items(), key=lambda kv: kv[1][2], reverse=True)
    top = [
        {
            "function": f"{category(filename)}:{line}({name})",
            "calls": nc / responses,
            "own_us": tt / responses * 1e6,
            "cum_us": ct / responses * 1e6,
            "own_share": tt / total,
        }
        for (filename, line, name), (_cc, nc, tt, ct, _callers) in rows[:25]
    ]
    groups: dict[str, float] = {}
    for (filename, _line, _name), (_cc, _nc, tt, _ct, _callers) in raw.items():
        key = category(filename)
        groups[key] = groups.get(key, 0.0) + tt
    inclusive = sorted(
        (
            (f"{category(filename)}:{line}({name})", nc, ct)
            for (filename, line, name), (_cc, nc, _tt, ct, _callers) in raw.items()
            if category(filename).startswith("app/")
        ),
        key=lambda row: row[2],
        reverse=True,
    )
    return {
        "responses": responses,
        "wall_us_per_response": elapsed / responses * 1e6,
        "profiled_us_per_response": total / responses * 1e6,
        "top": top,
        "by_module": [
            {"module": m, "own_us": t / responses * 1e6, "share": t / total}
            for m, t in sorted(groups.items(), key=lambda kv: kv[1], reverse=True)[:20]
        ],
        "app_inclusive": [
            {
                "function": f,
                "calls": nc / responses,
                "cum_us": ct / responses * 1e6,
                "cum_share": ct / total,
            }
            for f, nc, ct in inclusive[:30]
        ],
    }


async def inproc(args: argparse.Namespace, sizes: list[int]) -> dict[str, Any]:
    from app.files.embeddings import LocalEmbedder

    local = LocalEmbedder()
    started = time.perf_counter()
    await local.load()
    await local.embed(["warm up the model"])
    print(f"  LocalEmbedder loaded in {time.perf_counter() - started:.1f} s", flush=True)
    iterations = args.iterations or (40 if args.quick else 300)
    warmup = max(iterations // 10, 10)
    out: dict[str, Any] = {"iterations": iterations, "warmup": warmup}
    try:
        for size in sizes:
            with tempfile.TemporaryDirectory(prefix="respgate-fs-bench-") as tmp:
                async with store_setup(size, args.words, local, Path(tmp)) as setup:
                    out[str(size)] = await measure_size(args, setup, iterations, warmup)
        if args.contention:
            out["contention"] = await embed_contention(local, Corpus(100, 10).queries)
    finally:
        await local.aclose()
    return out


async def embed_contention(local: Any, queries: list[str]) -> dict[str, Any]:
    """The query embedding alone with torch's default threads and with one, on an idle
    machine and with a CPU-bound process (this benchmark's own busy loop) on one core, as
    on a shared machine or beside a busy event loop."""
    import torch

    default_threads = torch.get_num_threads()
    out: dict[str, Any] = {"default_threads": default_threads}
    for busy in (False, True):
        spinner = None
        if busy:
            spinner = await asyncio.create_subprocess_exec(sys.executable, "-c", "while True: pass")
            await asyncio.sleep(0.5)
        try:
            for threads in (default_threads, 1):
                torch.set_num_threads(threads)
                for query in queries:
                    await local.embed([query])
                wall, cpu, main = [], [], []
                for query in queries * 2:
                    c0, m0, t0 = time.process_time(), time.thread_time(), time.perf_counter()
                    await local.embed([query])
                    wall.append((time.perf_counter() - t0) * 1e6)
                    main.append((time.thread_time() - m0) * 1e6)
                    cpu.append((time.process_time() - c0) * 1e6)
                key = f"{'one core busy' if busy else 'idle'}, torch threads {threads}"
                out[key] = describe(wall, cpu, main)
                row = out[key]
                print(
                    f"  embedding alone, {key}: p50 {row['p50_us'] / 1000:.1f} ms, p90 "
                    f"{row['p90_us'] / 1000:.1f} ms, p99 {row['p99_us'] / 1000:.1f} ms, "
                    f"CPU {row['cpu_mean_us'] / 1000:.1f} ms",
                    flush=True,
                )
        finally:
            torch.set_num_threads(default_threads)
            if spinner is not None:
                spinner.kill()
                await spinner.wait()
    return out


async def measure_size(
    args: argparse.Namespace, setup: Setup, iterations: int, warmup: int
) -> dict[str, Any]:
    svc = services(setup)
    result: dict[str, Any] = {
        "ingest_s": setup.ingest_s,
        "first_search_ms": setup.first_search_ms,
        "check": await check_setup(setup, svc),
        "sql_per_search": await sql_counts(setup),
    }
    for query in setup.corpus.queries:  # every query length once: first shapes are slow
        await setup.local.searcher.embedder.embed([query])
    components = component_entries(setup)
    local_group = ("file_search K=1", "file_search K=2, fake embedder")
    for mode in ("stream", "stream, local embedder", "json"):
        # The local embedder's entries run in a group of their own: torch's worker threads
        # keep spinning after an embedding and would take CPU from the entries that follow.
        entries = response_entries(setup, svc, mode != "json")
        if mode == "stream, local embedder":
            entries = {n: e for n, e in entries.items() if n in local_group or "local" in n}
            entries["query embedding alone (local)"] = components["query embedding alone (local)"]
        else:
            del entries["file_search K=2, local embedder"]
            if mode == "stream":
                entries |= {n: e for n, e in components.items() if "local" not in n}

        def reset() -> None:
            for label in ("fake", "local"):
                svc[label]["durations"].values.clear()

        stats = await interleaved(entries, iterations, warmup, reset)
        for label in ("fake", "local"):
            await svc[label]["events"].drain()  # hooks get the events off the loop's path
        tool_run = {
            label: describe(svc[label]["durations"].values, [], [])
            for label in ("fake", "local")
            if svc[label]["durations"].values
        }
        rounds = round_figures(stats)
        if mode == "stream, local embedder":
            for row in rounds.values():
                add_vs_instant(row, result["stream"]["rounds"]["instant tool"])
        result[mode] = {"stats": stats, "rounds": rounds, "tool_run_in_loop_us": tool_run}
        print_mode(setup.size, mode, result[mode])
    print(
        f"\nSQL statements per search: {result['sql_per_search']['sqlalchemy']} through "
        f"SQLAlchemy/aiosqlite ({result['sql_per_search']['kinds']}), "
        f"{result['sql_per_search']['inline']} inline; first search "
        f"(matrix load) {setup.first_search_ms:.1f} ms; results fed to the model: "
        f"{result['check']['fed_chars']:,} characters",
        flush=True,
    )
    if not args.no_profile:
        result["profile"] = await profile_round(setup, svc, 30 if args.quick else 200)
        print_profile(setup.size, result["profile"])
    result["summary"] = summary_rows(result)
    print_summary(setup.size, result["summary"])
    return result


def summary_rows(result: dict[str, Any]) -> list[dict[str, Any]]:
    """The figures the README quotes: per round (streaming) and the components alone."""
    stream, local = result["stream"], result["stream, local embedder"]
    rows = []
    for label, res in (
        ("instant tool", stream),
        ("file_search, fake embedder", stream),
        ("file_search, local embedder", local),
    ):
        rows.append({"what": f"round: {label}", **res["rounds"][label]})
    for name, res in (
        ("query embedding alone (local)", local),
        ("SearchService.search alone (fake)", stream),
        ("index.search alone (hybrid)", stream),
        ("index.search alone (semantic)", stream),
        ("index.search alone (hybrid, content words only)", stream),
    ):
        s = res["stats"][name]
        rows.append(
            {
                "what": name,
                "p50_us": s["p50_us"],
                "p99_us": s["p99_us"],
                "cpu_us": s["cpu_mean_us"],
                "main_cpu_us": s["main_cpu_mean_us"],
            }
        )
    for label, res in (("fake", stream), ("local", local)):
        run = res["tool_run_in_loop_us"].get(label)
        if run:
            rows.append(
                {
                    "what": f"file_search executor run in the loop ({label} embedder, ToolEvents)",
                    "p50_us": run["p50_us"],
                    "p99_us": run["p99_us"],
                }
            )
    return rows


def print_summary(size: int, rows: list[dict[str, Any]]) -> None:
    print(f"\n### (a) {size:,} chunks: summary (streaming; rounds are K=2 - K=1)\n")
    print(
        "| what | p50 ms | p99 ms | CPU ms (all threads) | CPU ms (loop thread) "
        "| added p50 vs instant round |"
    )
    print("|---|---|---|---|---|---|")

    def ms(value: float | None) -> str:
        return "-" if value is None else f"{value / 1000:.2f}"

    for row in rows:
        print(
            f"| {row['what']} | {ms(row['p50_us'])} | {ms(row['p99_us'])} "
            f"| {ms(row.get('cpu_us'))} | {ms(row.get('main_cpu_us'))} "
            f"| {ms(row.get('added_p50_us'))} |"
        )


def print_mode(size: int, mode: str, res: dict[str, Any]) -> None:
    print(f"\n### (a) {size:,} chunks, {mode}: entries\n")
    print(
        "| entry | n | p50 µs | p90 µs | p99 µs | mean µs | CPU µs (all threads) "
        "| CPU µs (loop thread) |"
    )
    print("|---|---|---|---|---|---|---|---|")
    for name, s in res["stats"].items():
        print(
            f"| {name} | {s['n']} | {s['p50_us']:.1f} | {s['p90_us']:.1f} | {s['p99_us']:.1f} "
            f"| {s['mean_us']:.1f} | {s['cpu_mean_us']:.1f} | {s['main_cpu_mean_us']:.1f} |"
        )
    print(f"\n### (a) {size:,} chunks, {mode}: per round (K=2 - K=1 of the same tool)\n")
    print(
        "| round | p50 µs | p99 µs | CPU µs (all threads) | CPU µs (loop thread) "
        "| added p50 vs instant | added p99 vs instant |"
    )
    print("|---|---|---|---|---|---|---|")
    for label, row in res["rounds"].items():
        print(
            f"| {label} | {row['p50_us']:.1f} | {row['p99_us']:.1f} | {row['cpu_us']:.1f} "
            f"| {row['main_cpu_us']:.1f} | {row.get('added_p50_us', 0):.1f} "
            f"| {row.get('added_p99_us', 0):.1f} |"
        )
    for label, row in res["tool_run_in_loop_us"].items():
        print(
            f"\nfile_search executor run inside the loop ({label} embedder, ToolEvents): "
            f"p50 {row['p50_us']:.1f} µs, p99 {row['p99_us']:.1f} µs (n={row['n']})"
        )


def print_profile(size: int, prof: dict[str, Any]) -> None:
    print(
        f"\n### (a) cProfile, {size:,} chunks: {prof['responses']} file_search K=2 responses "
        f"(fake embedder, streaming); {prof['profiled_us_per_response']:.0f} µs per response "
        f"under the profiler (wall {prof['wall_us_per_response']:.0f})\n"
    )
    print("| own time by module | µs/response | share |")
    print("|---|---|---|")
    for row in prof["by_module"][:14]:
        print(f"| {row['module']} | {row['own_us']:.1f} | {row['share']:.1%} |")
    print("\n| function (top own time) | calls | own µs | cum µs | share |")
    print("|---|---|---|---|---|")
    for row in prof["top"][:18]:
        print(
            f"| `{row['function']}` | {row['calls']:.1f} | {row['own_us']:.1f} "
            f"| {row['cum_us']:.1f} | {row['own_share']:.1%} |"
        )
    print("\n| app function (inclusive) | calls | cum µs | share |")
    print("|---|---|---|---|")
    for row in prof["app_inclusive"][:22]:
        print(
            f"| `{row['function']}` | {row['calls']:.1f} | {row['cum_us']:.1f} "
            f"| {row['cum_share']:.1%} |"
        )


# ============================================================================= (b) over HTTP


def serve_mock(port: int, shared: Path, queries_file: Path) -> None:
    """The shared mock's raw server with the ``loop-K`` rule; a function whose parameters have
    ``queries`` (file_search's) is called with ``{"query": q}``, q rotating."""
    spec = importlib.util.spec_from_file_location("mock_upstream", shared / "mock_upstream.py")
    if spec is None or spec.loader is None:
        raise SystemExit(f"mock upstream not found in {shared}")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    queries = json.loads(queries_file.read_text())
    dummy = module._dummy_args
    counter = [0]

    def args_for(params: Any) -> str:
        if isinstance(params, dict) and "queries" in (params.get("properties") or {}):
            counter[0] += 1
            return orjson.dumps({"query": queries[counter[0] % len(queries)]}).decode()
        return str(dummy(params))

    module._dummy_args = args_for

    class LoopCore(module.MockCore):  # type: ignore[name-defined,misc]
        def responses(self, req: dict[str, Any]) -> Any:
            if not str(req.get("model") or "").startswith("loop-"):
                return super().responses(req)
            done = outputs_in(req)
            self.function_call = done < rounds_wanted(req) - 1
            if self.function_call and done:
                items = [
                    i
                    for i in req["input"]
                    if not (isinstance(i, dict) and i.get("type") == "function_call_output")
                ]
                req = {**req, "input": items}
            return super().responses(req)

    core = LoopCore(deltas=20)
    with contextlib.suppress(ImportError):
        import uvloop

        uvloop.install()
    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(module._serve_raw(core, "127.0.0.1", port))


def serve_gateway(argv: list[str]) -> None:
    """``bench/gateway_launcher.py`` with ``app.main`` wrapped at run time (benchmark only; app/
    is not changed): ``build_toolkit`` also serves ``loop_bench``'s instant tool
    (``{"type": "instant"}``), and with ``BENCH_FAKE_EMBEDDER`` set to a JSON file of
    {query: vector}, ``build_embedder`` gives the fake embedder."""
    import os

    from loop_bench import BenchToolKit

    import app.main as wiring

    table_path = os.environ.get("BENCH_FAKE_EMBEDDER")
    if table_path:
        table = json.loads(Path(table_path).read_text())
        wiring.build_embedder = lambda *_a, **_k: FakeEmbedder(table)  # type: ignore[assignment]
    build = wiring.build_toolkit

    def build_toolkit(settings: Any, *rest: Any, **named: Any) -> Any:
        toolkit, resources = build(settings, *rest, **named)
        return BenchToolKit(toolkit), resources

    wiring.build_toolkit = build_toolkit  # type: ignore[assignment]
    import gateway_launcher

    sys.argv = ["gateway_launcher.py", *argv]
    gateway_launcher.main()


def http_bodies(vs_id: str) -> dict[str, JsonObject]:
    tool = [{"type": "instant"}]
    return {
        "no tools": {"model": "loop-1", "input": INPUT, "store": False},
        "instant K=1": {"model": "loop-1", "input": INPUT, "tools": tool, "store": False},
        "instant K=2": {"model": "loop-2", "input": INPUT, "tools": tool, "store": False},
        "file_search K=1": fs_body(vs_id, 1),
        "file_search K=2": fs_body(vs_id, 2),
    }


def post_json(url: str, body: JsonObject, timeout: float = 120) -> JsonObject:
    import urllib.request

    request = urllib.request.Request(
        url, data=json.dumps(body).encode(), headers={"content-type": "application/json"}
    )
    with urllib.request.urlopen(request, timeout=timeout) as reply:
        data: JsonObject = json.loads(reply.read())
        return data


def run_http(args: argparse.Namespace) -> dict[str, Any]:
    shared = args.shared_bench.resolve()
    size = args.http_size
    work = Path(tempfile.mkdtemp(prefix="respgate-fs-http-"))
    try:
        corpus = Corpus(size, args.words)
        vs_id = f"vs_bench{size}"
        local_dir, fake_dir = work / "local", work / "fake"
        local_dir.mkdir()
        url = f"sqlite+aiosqlite:///{local_dir / 'respgate.db'}"
        ingest = run_loop(populate(url, corpus, vs_id), args.loop)
        print(f"  (b) store of {size:,} chunks ingested in {ingest:.1f} s", flush=True)
        shutil.copytree(local_dir, fake_dir)
        (work / "queries.json").write_text(json.dumps(corpus.queries))
        (work / "table.json").write_text(json.dumps(corpus.query_vectors))
        return http_scenarios(args, shared, work, vs_id, corpus)
    finally:
        shutil.rmtree(work, ignore_errors=True)


def http_scenarios(
    args: argparse.Namespace, shared: Path, work: Path, vs_id: str, corpus: Corpus
) -> dict[str, Any]:
    me = str(Path(__file__).resolve())
    mock_port = free_port()
    mock = Server(
        "mock",
        [
            sys.executable,
            me,
            "--serve-mock",
            str(mock_port),
            "--shared-bench",
            str(shared),
            "--queries-file",
            str(work / "queries.json"),
        ],
        mock_port,
    )
    gateways = {}
    for label in ("fake", "local"):
        port = free_port()
        env = {"RESPGATE_DATA_DIR": str(work / label)}
        if label == "fake":
            env["BENCH_FAKE_EMBEDDER"] = str(work / "table.json")
        gateways[label] = Server(
            f"gateway-{label}",
            [
                sys.executable,
                me,
                "--serve-gateway",
                "--port",
                str(port),
                "--upstream-url",
                mock.base,
            ],
            port,
            env=env,
        )
    bodies = http_bodies(vs_id)
    targets: list[tuple[str, Server, JsonObject]] = [
        ("direct", mock, {"model": "loop-1", "input": INPUT})
    ]
    targets += [(f"{name} (fake gw)", gateways["fake"], body) for name, body in bodies.items()]
    targets += [
        (f"{name} (local gw)", gateways["local"], bodies[name])
        for name in ("no tools", "file_search K=1", "file_search K=2")
    ]
    duration = args.duration or (1.0 if args.quick else 3.0)
    repeats = args.rounds or (1 if args.quick else 2)
    warmup = 5 if args.quick else 20
    raw: dict[str, list[dict[str, Any]]] = {}
    everyone = [mock, *gateways.values()]
    with running(everyone):
        for label, server, body in targets[1:]:
            reply = post_json(server.base + "/v1/responses", body)
            kinds = [item.get("type") for item in reply.get("output") or []]
            assert reply.get("status") == "completed", (label, reply)
            if "file_search K=2" in label:
                assert kinds == ["file_search_call", "message"], (label, kinds)
                assert reply["output"][0]["status"] == "completed", reply["output"][0]
        for rep in range(repeats):
            for mode in ("json", "sse"):
                for label, server, body in targets:
                    res = run_load(
                        shared,
                        server.base + "/v1/responses",
                        concurrency=1,
                        duration=duration,
                        stream=(mode == "sse"),
                        server=server,
                        others=[s for s in everyone if s is not server],
                        body=body,
                        warmup=warmup,
                    )
                    raw.setdefault(f"{mode}-{label}", []).append(res)
                    print(
                        f"  {rep + 1}/{repeats} {mode.upper():4s} c=1 {label:30s} "
                        f"{res['rps']:>7,.0f} req/s  p50 {res['latency_ms']['p50']:7.3f} ms  "
                        f"p99 {res['latency_ms']['p99']:7.3f} ms  "
                        f"CPU {res.get('server_cpu_us_per_req', 0):6.0f} µs/req  "
                        f"bg {res['bg_cpu_pct']:5.1f}%",
                        flush=True,
                    )
    summary = {
        mode: {label: summarize(raw[f"{mode}-{label}"]) for label, _s, _b in targets}
        for mode in ("json", "sse")
    }
    print_http(summary)
    return {"summary": summary, "raw": raw, "duration_s": duration, "repeats": repeats}


HTTP_ROUNDS = (
    ("instant tool", "instant K=2 (fake gw)", "instant K=1 (fake gw)"),
    ("file_search, fake embedder", "file_search K=2 (fake gw)", "file_search K=1 (fake gw)"),
    ("file_search, local embedder", "file_search K=2 (local gw)", "file_search K=1 (local gw)"),
)


def print_http(summary: dict[str, Any]) -> None:
    for mode, rows in summary.items():
        print(f"\n### (b) over HTTP, {mode.upper()} c=1\n")
        print("| target | req/s | p50 ms | p99 ms | gateway CPU µs/req | bg CPU % |")
        print("|---|---|---|---|---|---|")
        for label, row in rows.items():
            cpu = "-" if label == "direct" else fmt(row["server_cpu_us_per_req"], 0)
            print(
                f"| {label} | {fmt(row['rps'])} | {fmt(row['p50_ms'])} | {fmt(row['p99_ms'])} "
                f"| {cpu} | {fmt(row['bg_cpu_pct_max'], 0)} |"
            )
        print("\n| round (K=2 - K=1) | added p50 ms | added p99 ms | gateway CPU µs |")
        print("|---|---|---|---|")
        for label, hi, lo in HTTP_ROUNDS:
            a, b = rows[hi], rows[lo]
            print(
                f"| {label} | {a['p50_ms'] - b['p50_ms']:.3f} | {a['p99_ms'] - b['p99_ms']:.3f} "
                f"| {a['server_cpu_us_per_req'] - b['server_cpu_us_per_req']:.0f} |"
            )


# ============================================================================= main


def main() -> int:
    if len(sys.argv) > 1 and sys.argv[1] == "--serve-gateway":
        serve_gateway(sys.argv[2:])
        return 0
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="(a) only, fewer iterations: < 60 s")
    ap.add_argument(
        "--part", choices=("all", "inproc", "http"), help="default: all (quick: inproc)"
    )
    ap.add_argument("--sizes", default="1000,10000", help="(a) chunks per store, comma list")
    ap.add_argument("--words", type=int, default=200, help="words per chunk (default 200)")
    ap.add_argument("--iterations", type=int, help="(a) samples per entry (300; quick 40)")
    ap.add_argument("--no-profile", action="store_true", help="(a) skip the cProfile pass")
    ap.add_argument(
        "--contention",
        action="store_true",
        help="(a) also the query embedding with one core kept busy (torch threads 2 vs 1)",
    )
    ap.add_argument("--http-size", type=int, default=10_000, help="(b) chunks in the store")
    ap.add_argument("--duration", type=float, help="(b) seconds per load run (3; quick 1)")
    ap.add_argument("--rounds", type=int, help="(b) repeats of every scenario (2; quick 1)")
    ap.add_argument("--shared-bench", type=Path, default=DEFAULT_SHARED_BENCH)
    ap.add_argument("--loop", choices=("uvloop", "asyncio"), default="uvloop")
    ap.add_argument("--out", type=Path, default=Path("/tmp/respgate-file-search-bench.json"))
    ap.add_argument("--ref", help="measure this git commit's app/ (see bench/README.md)")
    ap.add_argument("--serve-mock", type=int, metavar="PORT", help=argparse.SUPPRESS)
    ap.add_argument("--queries-file", type=Path, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.serve_mock:
        serve_mock(args.serve_mock, args.shared_bench.resolve(), args.queries_file)
        return 0
    part = args.part or ("inproc" if args.quick else "all")
    provenance = use_ref(args.ref)
    sys.path.insert(0, str(app_root()))
    sizes = [int(s) for s in args.sizes.split(",")]
    info = machine_info()
    print(
        f"# file_search_bench: app from {provenance['source']} (HEAD {provenance['head']}, app/ "
        f"dirty: {provenance['app_dirty']}, digest {provenance['app_sha256']}); "
        f"{info.get('cpus')} CPUs, loadavg {' '.join(info.get('loadavg', []))}; "
        f"{args.words} words per chunk; OPENBLAS_NUM_THREADS="
        f"{os.environ.get('OPENBLAS_NUM_THREADS', '(unset)')}",
        flush=True,
    )
    started = time.monotonic()
    result: dict[str, Any] = {
        "when": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "machine": info,
        "app": provenance,
        "argv": sys.argv[1:],
        "env": {k: os.environ.get(k) for k in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS")},
    }
    if part in ("all", "inproc"):
        result["inproc"] = run_loop(inproc(args, sizes), args.loop)
    if part in ("all", "http"):
        result["http"] = run_http(args)
    result["elapsed_s"] = round(time.monotonic() - started, 1)
    print(f"\nwall time {result['elapsed_s']:.0f} s; raw results in {args.out}")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
