"""Ingestion through the whole pipeline: upload -> extract -> chunk -> embed -> index.

One process, the real parts: ``FilesService`` and ``VectorStoresService`` on a temporary SQLite
database (migrated like the gateway's), the disk blob store, the embedded index and the local
embedding model (``respgate[embeddings]``). A generated text document of ``--kb`` KiB is
uploaded ``--files`` times and attached to one vector store; the figure is chunks per second
from the first attach to the store's ``completed`` status, with OpenAI's default chunking (800
tokens, 400 of overlap) and with a static 200/0 strategy.

    python bench/ingest_bench.py               # 4 files of 64 KiB
    python bench/ingest_bench.py --quick       # 2 files of 32 KiB
"""

from __future__ import annotations

import argparse
import asyncio
import random
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from app.core.tenancy import DEFAULT_TENANT  # noqa: E402
from app.files.embeddings import LocalEmbedder  # noqa: E402
from app.files.files import FilesService  # noqa: E402
from app.files.vector_stores import VectorStoresService  # noqa: E402
from app.store.blobs import DiskBlobStore  # noqa: E402
from app.store.engine import create_engine_for  # noqa: E402
from app.store.files_sql import SqlFileStores  # noqa: E402
from app.store.migrate import prepare_database  # noqa: E402
from app.store.vector_index.sqlite import SqliteVectorIndex  # noqa: E402

WORDS = (  # noqa: SIM905
    "gateway stream response tool search vector memory ownership borrow model token chunk "
    "index query upstream server client event round loop file store embedding text result"
).split()


def document(kib: int, seed: int) -> bytes:
    rng = random.Random(seed)
    out: list[str] = []
    size = 0
    while size < kib * 1024:
        sentence = " ".join(rng.choice(WORDS) for _ in range(rng.randint(8, 20))).capitalize()
        out.append(sentence + ".")
        size += len(sentence) + 2
    return " ".join(out).encode()


async def run(files: int, kib: int, strategy: dict[str, object] | None) -> tuple[int, float]:
    with tempfile.TemporaryDirectory() as tmp:
        url = f"sqlite+aiosqlite:///{tmp}/bench.db"
        await prepare_database(url, auto_migrate=True)
        engine = create_engine_for(url)
        embedder = LocalEmbedder()
        await embedder.embed(["warm up"])  # the model load is not ingestion
        store, blobs = SqlFileStores(engine), DiskBlobStore(Path(tmp) / "files")
        index = SqliteVectorIndex(engine)
        stores = VectorStoresService(store, blobs, index, embedder, time.time)
        uploads = FilesService(store, blobs, time.time, detacher=stores.store_files)
        ids = [
            (
                await uploads.create(
                    tenant=DEFAULT_TENANT,
                    filename=f"doc{n}.txt",
                    data=document(kib, n),
                    purpose="assistants",
                )
            )["id"]
            for n in range(files)
        ]
        started = time.perf_counter()
        created = await stores.stores.create(
            tenant=DEFAULT_TENANT,
            name="bench",
            metadata={},
            expires_after=None,
            file_ids=ids,
            chunking_strategy=strategy,
        )
        await stores.wait_idle()
        elapsed = time.perf_counter() - started
        state = await stores.stores.get(created["id"], tenant=DEFAULT_TENANT)
        assert state["file_counts"]["completed"] == files, state
        chunks = 0
        for file_id in ids:
            chunks += len(await index.file_chunks(created["id"], file_id, tenant=DEFAULT_TENANT))
        await stores.aclose()
        await index.aclose()
        await embedder.aclose()
        await engine.dispose()
        return chunks, elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--files", type=int, default=4)
    parser.add_argument("--kb", type=int, default=64)
    args = parser.parse_args()
    files, kib = (2, 32) if args.quick else (args.files, args.kb)
    print(f"{files} files of {kib} KiB, local embedder, SQLite\n")
    print("| chunking | chunks | seconds | chunks/s |\n|---|---|---|---|")
    static = {"type": "static", "static": {"max_chunk_size_tokens": 200, "chunk_overlap_tokens": 0}}
    for label, strategy in (("auto (800/400)", None), ("static 200/0", static)):
        chunks, elapsed = asyncio.run(run(files, kib, strategy))
        print(f"| {label} | {chunks} | {elapsed:.2f} | {chunks / elapsed:.1f} |")


if __name__ == "__main__":
    main()
