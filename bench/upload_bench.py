"""Peak memory of the gateway while a large file is uploaded to ``POST /v1/files``.

The gateway runs as ``python -m app.cli serve`` (uvicorn, one worker) on a temporary data
directory; the client streams a multipart body of ``--mb`` MiB (never held whole in the client
either) with a ``content-length``, as the openai SDK sends it. The figure is the server's
resident set: ``VmRSS`` once it is ready, then its peak (``VmHWM``) during the upload, after
resetting the peak with ``/proc/PID/clear_refs`` (Linux). Nothing is asserted.

``--docx-bomb MB`` measures ingestion instead: a DOCX whose ``word/document.xml`` is MB MB of
one repeated paragraph (tests/files/hostile.py; 300 MB is about 1 MB of upload) is uploaded
and attached to a vector store; the figures are the gateway's peak RSS until the file's status
is final, the time that took and the file's ``last_error``. The embedder is "upstream" with
no upstream (no model is loaded; a file that gets past extraction fails at embedding).

    python bench/upload_bench.py                 # 200 MiB, the work tree
    python bench/upload_bench.py --ref main      # the same against a commit (git archive)
    python bench/upload_bench.py --mb 50
    python bench/upload_bench.py --docx-bomb 300 [--ref main] [--widen-zip-checks]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(1, str(Path(__file__).resolve().parent.parent))

import _harness

BOUNDARY = "respgatebenchboundary"
CHUNK = b"0123456789abcdef" * 65536  # 1 MiB


def status_kib(pid: int, field: str) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    raise KeyError(field)


def body(mib: int) -> tuple[int, Iterator[bytes]]:
    head = (
        f'--{BOUNDARY}\r\nContent-Disposition: form-data; name="purpose"\r\n\r\nassistants\r\n'
        f'--{BOUNDARY}\r\nContent-Disposition: form-data; name="file"; filename="big.txt"\r\n'
        "Content-Type: text/plain\r\n\r\n"
    ).encode()
    tail = f"\r\n--{BOUNDARY}--\r\n".encode()

    def chunks() -> Iterator[bytes]:
        yield head
        for _ in range(mib):
            yield CHUNK
        yield tail

    return len(head) + mib * len(CHUNK) + len(tail), chunks()


def ingest_bomb(base: str, megabytes: int) -> tuple[float, object]:
    """Upload the DOCX bomb, attach it, wait for its final status: (seconds, last_error)."""
    from tests.files.hostile import zip_bomb_docx

    data = zip_bomb_docx(megabytes)
    print(f"docx bomb: {len(data) / 1024:.0f} KiB upload, {megabytes} MB of XML")
    with httpx.Client(base_url=base, timeout=600) as http:
        file_id = http.post(
            "/v1/files", files={"file": ("bomb.docx", data)}, data={"purpose": "assistants"}
        ).json()["id"]
        started = time.perf_counter()
        store = http.post("/v1/vector_stores", json={"file_ids": [file_id]}).json()["id"]
        while True:
            record = http.get(f"/v1/vector_stores/{store}/files/{file_id}").json()
            if record["status"] != "in_progress":
                return time.perf_counter() - started, record["last_error"]
            time.sleep(0.05)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mb", type=int, default=200, help="upload size in MiB (default 200)")
    parser.add_argument("--docx-bomb", type=int, help="ingest a DOCX of this many MB of XML")
    parser.add_argument(
        "--widen-zip-checks",
        action="store_true",
        help="turn the zip checks off ([extraction]), so the bomb meets the memory budget",
    )
    parser.add_argument("--ref", help="measure this git ref (git archive) instead of the tree")
    args = parser.parse_args()
    provenance = _harness.use_ref(args.ref)
    port = _harness.free_port()
    with tempfile.TemporaryDirectory(prefix="respgate-upload-") as data_dir:
        cmd = _harness.serve_command(port, "http://127.0.0.1:9", data_dir)
        env = {"RESPGATE_EMBEDDINGS_PROVIDER": "upstream"}
        if args.widen_zip_checks:
            env["RESPGATE_EXTRACTION__MAX_UNZIPPED_MB"] = "100000"
            env["RESPGATE_EXTRACTION__MAX_COMPRESSION_RATIO"] = "1000000"
        gateway = _harness.Server("gateway", cmd, port, env=env)
        with _harness.running([gateway]):
            assert gateway.proc is not None
            pid = gateway.proc.pid
            ready_rss = status_kib(pid, "VmRSS")
            Path(f"/proc/{pid}/clear_refs").write_text("5")  # reset VmHWM to the current RSS
            if args.docx_bomb:
                seconds, error = ingest_bomb(gateway.base, args.docx_bomb)
                peak = status_kib(pid, "VmHWM")
                print(f"# docx bomb: {provenance['source']} ({provenance['head']})")
                print(f"final status after {seconds:.1f} s; last_error: {error}")
                print(
                    f"gateway RSS ready {ready_rss / 1024:.0f} MiB, peak {peak / 1024:.0f} MiB "
                    f"(+{(peak - ready_rss) / 1024:.0f} MiB)"
                )
                return
            length, chunks = body(args.mb)
            started = time.perf_counter()
            reply = httpx.post(
                f"{gateway.base}/v1/files",
                content=chunks,
                headers={
                    "content-type": f"multipart/form-data; boundary={BOUNDARY}",
                    "content-length": str(length),
                },
                timeout=600,
            )
            seconds = time.perf_counter() - started
            peak = status_kib(pid, "VmHWM")
            after = status_kib(pid, "VmRSS")
        stored = sum(p.stat().st_size for p in (Path(data_dir) / "files").glob("file-*"))
    print(f"# upload bench: {provenance['source']} ({provenance['head']})")
    print(
        f"status {reply.status_code}, {args.mb} MiB in {seconds:.1f} s "
        f"({args.mb / seconds:.0f} MiB/s), stored {stored / 2**20:.0f} MiB"
    )
    print("| RSS ready | peak RSS during upload | peak - ready | RSS after |")
    print("|---|---|---|---|")
    print(
        f"| {ready_rss / 1024:.0f} MiB | {peak / 1024:.0f} MiB | "
        f"{(peak - ready_rss) / 1024:.0f} MiB | {after / 1024:.0f} MiB |"
    )


if __name__ == "__main__":
    main()
