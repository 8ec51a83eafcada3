"""The bench scripts still run against today's app/.

bench/ is not imported by the gateway, so nothing else notices when a refactoring of app/ breaks
one (three did: the service took a parsed request, the MCP provider a namespace and sessions,
``build_response`` an outcome). Every script is imported and answers ``--help``; the in-process
parts that call app/ directly run once with the smallest sizes. Nothing here measures time."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

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
