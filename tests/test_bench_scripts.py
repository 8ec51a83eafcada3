"""The bench scripts still run against today's app/.

bench/ is not imported by the gateway, so nothing else notices when a refactoring of app/ breaks
one (three did: the service took a parsed request, the MCP provider a namespace and sessions,
``build_response`` an outcome). Every script is imported and answers ``--help``; the in-process
parts that call app/ directly run once with the smallest sizes. Nothing here measures time."""

from __future__ import annotations

import asyncio
import importlib.util
import os
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest

BENCH = Path(__file__).resolve().parents[1] / "bench"
SHARED_BENCH = BENCH.parent.parent / "shared" / "bench"
# Helpers imported by the scripts, not scripts themselves (and every ``_name.py``).
LIBRARIES = {"_harness", "event_log", "gateway_launcher", "httpx_upstream", "minimal_proxy"}
SCRIPTS = sorted(
    p.stem for p in BENCH.glob("*.py") if p.stem not in LIBRARIES and not p.stem.startswith("_")
)


def _run(*args: str, timeout: float = 240) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(BENCH.parent)}
    return subprocess.run(
        [sys.executable, *args],
        cwd=BENCH.parent,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


def test_every_bench_module_imports() -> None:
    names = ", ".join(repr(p.stem) for p in sorted(BENCH.glob("*.py")))
    code = (
        "import importlib, sys; sys.path.insert(0, 'bench'); "
        f"[importlib.import_module(n) for n in ({names},)]"
    )
    done = _run("-c", code)
    assert done.returncode == 0, done.stderr[-3000:]


HELP_ALL = """
import contextlib, io, runpy, sys
sys.path.insert(0, "bench")
failed = []
for script in sys.argv[1:]:
    sys.argv = [f"bench/{script}.py", "--help"]
    out = io.StringIO()
    try:
        with contextlib.redirect_stdout(out):
            runpy.run_path(f"bench/{script}.py", run_name="__main__")
    except SystemExit as exit:
        if exit.code not in (0, None) or "usage:" not in out.getvalue():
            failed.append(f"{script}: exit {exit.code}")
    else:
        failed.append(f"{script}: no --help")
print("FAILED", failed)
sys.exit(1 if failed else 0)
"""


def test_every_bench_script_answers_help() -> None:
    """Each script's ``--help``, run as ``__main__`` in one interpreter (one import of app/)."""
    done = _run("-c", HELP_ALL, *SCRIPTS)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-3000:]


def test_the_tool_loop_bench_runs_in_process(tmp_path: Path) -> None:
    """``loop_bench --part inproc``: the service with an instant tool and a configured MCP
    server (the tests' counter server), streamed and not."""
    out = tmp_path / "loop.json"
    done = _run(
        "bench/loop_bench.py",
        *("--quick", "--part", "inproc", "--iterations", "3", "--no-profile", "--ks", "1,2"),
        *("--out", str(out)),
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert out.is_file() and "MCP counter.sum" in done.stdout


def test_the_profile_micro_part_runs() -> None:
    """``profile_gateway --part micro``: the app, the service and the response builder called
    directly (the mock's answers come from ../shared/bench)."""
    if not (SHARED_BENCH / "mock_upstream.py").is_file():
        pytest.skip(f"../shared/bench/mock_upstream.py is absent ({SHARED_BENCH})")
    done = _run("bench/profile_gateway.py", "--part", "micro", "-n", "20", "--repeats", "1")
    assert done.returncode == 0, done.stderr[-3000:]
    assert "ResponsesService.create" in done.stdout


def _paced_module() -> ModuleType:
    """bench/paced.py, loaded by path (bench/ is no package) under a name of its own."""
    name = "respgate_bench_paced"
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, BENCH / "paced.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # its dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


def _frames(events: int, sep: bytes) -> list[bytes]:
    """``events`` SSE frames, the first without an ``event:`` line, then ``data: [DONE]``."""
    frames = [b'data: {"n":0,"s":"data: in a string"}' + sep + sep]
    frames += [b"event: e" + sep + b'data: {"n":%d}' % i + sep + sep for i in range(1, events)]
    return [*frames, b"data: [DONE]" + sep + sep]


async def _paced_server(events: int, mode: str) -> tuple[asyncio.Server, int]:
    """A tiny paced SSE server. ``chunked``: every frame cut into 1-7 byte chunks (so ``data:``
    and the chunk headers straddle reads), two frames sent in one write once; ``close``: no
    chunking, the body ends with the connection; ``error``: a 500 with a JSON body."""

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        head = await reader.readuntil(b"\r\n\r\n")
        length = int(head.lower().split(b"content-length: ")[1].split(b"\r\n")[0])
        await reader.readexactly(length)
        if mode == "error":
            body = b'{"error":{"message":"no"}}'
            writer.write(b"HTTP/1.1 500 Oops\r\ncontent-length: %d\r\n\r\n%s" % (len(body), body))
        elif mode == "close":
            writer.write(b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n\r\n")
            for frame in _frames(events, b"\r\n"):
                writer.write(frame)
                await writer.drain()
                await asyncio.sleep(0.001)
        else:
            writer.write(b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n")
            frames = _frames(events, b"\n")
            frames[1:3] = [frames[1] + frames[2]]  # two events in one chunk, one read
            for frame in frames:
                pieces, at = [], 0
                while at < len(frame):
                    size = 1 + (at * 7 + len(frame)) % 7
                    pieces.append(frame[at : at + size])
                    at += size
                for piece in pieces:  # one write per chunk: chunk headers land in other reads
                    writer.write(b"%x\r\n%s\r\n" % (len(piece), piece))
                    await writer.drain()
                await writer.drain()
                await asyncio.sleep(0.001)
            writer.write(b"0\r\n\r\n")
        await writer.drain()
        writer.close()

    server = await asyncio.start_server(handle, "127.0.0.1", 0)
    port: int = server.sockets[0].getsockname()[1]
    return server, port


@pytest.mark.parametrize("mode", ["chunked", "close"])
async def test_the_paced_client_counts_every_event(mode: str) -> None:
    """bench/paced.py against a paced SSE server in this process: 3 slots x 2 streams x 6
    events, frames and ``data:`` split across chunks and reads, ``[DONE]`` not counted."""
    paced = _paced_module()
    server, port = await _paced_server(6, mode)
    async with server:
        result = await paced.run_paced(
            f"http://127.0.0.1:{port}/v1/responses",
            streams=3,
            pace_ms=2.0,
            per_slot=2,
            expected_events=6,
        )
    assert result["errors"] == 0, result["first_error"]
    assert result["streams_started"] == result["streams_completed"] == 6
    assert result["events"] == result["events_in_window"] == 36
    assert result["events_per_stream"] == {"6": 6}
    # Gaps from each stream's 4th event on: 3 per stream.
    assert result["gap_ms"]["n"] == 6 * (6 - paced.GAP_FROM)
    assert result["first_event_ms"]["p50"] is not None


async def test_the_paced_client_counts_errors_and_short_streams() -> None:
    paced = _paced_module()
    server, port = await _paced_server(6, "error")
    async with server:
        failed = await paced.run_paced(
            f"http://127.0.0.1:{port}/v1/responses", streams=2, pace_ms=1.0, per_slot=1
        )
    assert failed["errors"] == 2 and failed["events"] == 0 and failed["streams_completed"] == 0
    assert "HTTP 500" in failed["first_error"]
    server, port = await _paced_server(4, "chunked")
    async with server:
        short = await paced.run_paced(
            f"http://127.0.0.1:{port}/v1/responses",
            streams=2,
            pace_ms=1.0,
            per_slot=1,
            expected_events=6,
        )
    assert short["events"] == 8 and short["streams_completed"] == 2 and short["errors"] == 1


def test_the_event_counter_is_exact_at_every_split() -> None:
    """Fed one byte at a time or in one piece, the counter finds the same events."""
    paced = _paced_module()
    body = b"".join(_frames(5, b"\r\n")) + b"".join(_frames(3, b"\n"))
    whole = paced.EventCounter().feed(body)
    counter = paced.EventCounter()
    bytewise = [counter.feed(body[i : i + 1]) for i in range(len(body))]
    assert whole == sum(bytewise) == 8
    assert bytewise.count(1) == 10 and bytewise.count(-1) == 2  # [DONE]: +1, then -1
