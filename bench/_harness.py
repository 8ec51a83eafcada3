"""Shared plumbing for bench/run.py and bench/upstream_clients.py.

Starts servers as subprocesses on free ports, waits for them, runs the shared load generator
(``shared/bench/load.py``) against them and samples each server's CPU time from /proc around
every load run, so that per-request server CPU is reported next to latency and throughput.
Nothing here asserts: the scripts print figures.
"""

from __future__ import annotations

import contextlib
import json
import os
import platform
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

BENCH_DIR = Path(__file__).resolve().parent
REPO_ROOT = BENCH_DIR.parent
DEFAULT_SHARED_BENCH = (REPO_ROOT.parent / "shared" / "bench").resolve()

# Where the servers import ``app`` from: the work tree by default, or a ``git archive`` of a
# commit (``--ref``), so that a run measures one known version even while app/ is being edited.
APP_ROOT = REPO_ROOT


def use_ref(ref: str | None) -> dict[str, Any]:
    """Point APP_ROOT at an export of ``ref`` (None: the work tree); returns provenance."""
    global APP_ROOT
    if ref is None:
        APP_ROOT = REPO_ROOT
        dirty = _git("status", "--porcelain", "--", "app")
        return {
            "source": "work tree",
            "head": _git("rev-parse", "--short", "HEAD"),
            "app_dirty": bool(dirty),
            "app_sha256": _tree_digest(REPO_ROOT / "app"),
        }
    sha = _git("rev-parse", "--short", ref)
    if not sha:
        raise SystemExit(f"unknown git ref: {ref}")
    target = Path(tempfile.gettempdir()) / f"respgate-bench-src-{sha}"
    if not (target / "app").is_dir():
        target.mkdir(parents=True, exist_ok=True)
        archive = subprocess.run(
            ["git", "-C", str(REPO_ROOT), "archive", "--format=tar", sha],
            check=True,
            capture_output=True,
        ).stdout
        subprocess.run(["tar", "-x", "-C", str(target)], input=archive, check=True)
    APP_ROOT = target
    return {
        "source": f"git archive {ref} -> {target}",
        "head": sha,
        "app_dirty": False,
        "app_sha256": _tree_digest(target / "app"),
    }


def _git(*args: str) -> str:
    out = subprocess.run(
        ["git", "-C", str(REPO_ROOT), *args], capture_output=True, text=True, check=False
    )
    return out.stdout.strip()


def _tree_digest(root: Path) -> str:
    import hashlib

    digest = hashlib.sha256()
    for path in sorted(root.rglob("*.py")):
        digest.update(str(path.relative_to(root)).encode())
        digest.update(path.read_bytes())
    return digest.hexdigest()[:16]


BODY = {"model": "mock", "input": "hi"}
CLK_TCK = os.sysconf("SC_CLK_TCK")

# CPU pinning (--pin), off by default; see bench/README.md ("Pinning"):
#   c=1   everything on CPU 0: the pipeline load.py -> gateway -> mock -> gateway -> load.py is
#         strictly serial, so one core loses no parallelism and no hop pays a cross-core wake-up
#   c>1   the gateway alone on CPU 1, the mock upstream and load.py on CPU 0
PIN_SERVER_CPU = "1"
PIN_CLIENT_CPU = "0"


def pin_layout(concurrency: int) -> tuple[str, str]:
    """(server CPUs, client CPUs) for --pin."""
    if concurrency == 1:
        return PIN_CLIENT_CPU, PIN_CLIENT_CPU
    return PIN_SERVER_CPU, PIN_CLIENT_CPU


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def serve_command(port: int, upstream_url: str, data_dir: str, *more: str) -> list[str]:
    """``respgate serve`` (``python -m app.cli serve``) on 127.0.0.1:``port`` in front of
    ``upstream_url``, logging warnings only, its data in ``data_dir``; ``more``: further flags."""
    return [
        sys.executable,
        "-m",
        "app.cli",
        "serve",
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--upstream-url",
        upstream_url,
        "--log-level",
        "warning",
        "--data-dir",
        data_dir,
        *more,
    ]


def system_busy_seconds() -> float:
    """CPU seconds spent busy on all cores since boot (/proc/stat, everything but idle+iowait)."""
    with open("/proc/stat") as fh:
        values = [int(v) for v in fh.readline().split()[1:]]
    idle = values[3] + (values[4] if len(values) > 4 else 0)
    busy = sum(values[:8]) - idle  # user nice system idle iowait irq softirq steal
    return busy / CLK_TCK


def cpu_seconds(pid: int, stat_path: str | None = None) -> float:
    """utime + stime of one process (all its threads), in seconds."""
    with open(stat_path or f"/proc/{pid}/stat") as fh:
        fields = fh.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / CLK_TCK


@dataclass
class Server:
    name: str
    cmd: list[str]
    port: int
    health_path: str = "/health"
    cpus: str | None = None
    env: dict[str, str] = field(default_factory=dict)
    proc: subprocess.Popen[bytes] | None = None
    log_path: Path | None = None

    @property
    def base(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self, log_dir: Path) -> None:
        cmd = list(self.cmd)
        if self.cpus is not None and shutil.which("taskset"):
            cmd = ["taskset", "-c", self.cpus, *cmd]
        self.log_path = log_dir / f"{self.name}.log"
        env = {**os.environ, "PYTHONUNBUFFERED": "1", **self.env}
        env["PYTHONPATH"] = os.pathsep.join(
            p for p in (str(APP_ROOT), env.get("PYTHONPATH", "")) if p
        )
        with open(self.log_path, "wb") as log:
            self.proc = subprocess.Popen(
                cmd, cwd=APP_ROOT, stdout=log, stderr=subprocess.STDOUT, env=env
            )

    def wait_ready(self, timeout: float = 30.0) -> None:
        deadline = time.monotonic() + timeout
        url = self.base + self.health_path
        while True:
            assert self.proc is not None
            if self.proc.poll() is not None:
                raise RuntimeError(f"{self.name} exited early:\n{self.tail()}")
            try:
                with urllib.request.urlopen(url, timeout=1) as resp:
                    if resp.status < 500:
                        return
            except OSError:
                pass
            if time.monotonic() > deadline:
                raise RuntimeError(f"{self.name} not ready after {timeout} s:\n{self.tail()}")
            time.sleep(0.1)

    def pin(self, cpus: str | None) -> None:
        """Move every thread of the running server to ``cpus`` (None: all CPUs)."""
        assert self.proc is not None
        allowed = (
            set(range(os.cpu_count() or 1)) if cpus is None else {int(c) for c in cpus.split(",")}
        )
        for tid in os.listdir(f"/proc/{self.proc.pid}/task"):
            with contextlib.suppress(OSError):
                os.sched_setaffinity(int(tid), allowed)
        self.cpus = cpus

    def pids(self) -> list[int]:
        """The server's process and its children (``respgate serve --workers N``)."""
        assert self.proc is not None
        pid = self.proc.pid
        try:
            with open(f"/proc/{pid}/task/{pid}/children") as fh:
                return [pid, *(int(child) for child in fh.read().split())]
        except OSError:
            return [pid]

    def cpu(self) -> float:
        return sum(cpu_seconds(pid) for pid in self.pids())

    def main_thread_cpu(self) -> float:
        """CPU of the main threads alone (the event loops); the rest is worker threads."""
        return sum(cpu_seconds(pid, f"/proc/{pid}/task/{pid}/stat") for pid in self.pids())

    def tail(self, n: int = 30) -> str:
        if self.log_path is None or not self.log_path.exists():
            return ""
        return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-n:])

    def stop(self) -> None:
        if self.proc is None or self.proc.poll() is not None:
            return
        # SIGTERM: uvicorn shuts down gracefully on it; the raw mock ignores SIGINT.
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


@contextlib.contextmanager
def running(servers: Sequence[Server]) -> Iterator[Path]:
    log_dir = Path(tempfile.mkdtemp(prefix="respgate-bench-"))
    try:
        for server in servers:
            server.start(log_dir)
        for server in servers:
            server.wait_ready()
        yield log_dir
    finally:
        for server in reversed(servers):
            server.stop()


def mock_server(
    shared_bench: Path, port: int, cpus: str | None, extra: Sequence[str] = ()
) -> Server:
    """The shared mock upstream; ``extra``: more of its options (``--delay-ms 20``...)."""
    script = shared_bench / "mock_upstream.py"
    if not script.is_file():
        raise SystemExit(f"mock upstream not found: {script} (use --shared-bench DIR)")
    cmd = [sys.executable, str(script), "--port", str(port), *extra]
    return Server("mock", cmd, port, cpus=cpus)


def rss_kb(pid: int, key: str = "VmRSS") -> int:
    """One line of /proc/PID/status in kB (VmRSS now, VmHWM the peak since start); 0 if gone."""
    try:
        with open(f"/proc/{pid}/status") as fh:
            for line in fh:
                if line.startswith(key + ":"):
                    return int(line.split()[1])
    except OSError:
        pass
    return 0


class ProcSampler:
    """Samples a server's processes every ``interval`` s in a thread: the peak of their summed
    VmRSS, and (monotonic time, CPU seconds) pairs for the CPU used in a part of the run."""

    def __init__(self, server: Server, interval: float = 0.05) -> None:
        self.server = server
        self.interval = interval
        self.peak_kb = 0
        self.cpu: list[tuple[float, float]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while True:
            pids = self.server.pids()
            self.peak_kb = max(self.peak_kb, sum(rss_kb(p) for p in pids))
            with contextlib.suppress(OSError):
                self.cpu.append((time.monotonic(), sum(cpu_seconds(p) for p in pids)))
            if self._stop.wait(self.interval):
                return

    def cpu_pct(self, start: float, end: float) -> float | None:
        """CPU used between two monotonic times (the nearest samples inside), % of one core."""
        inside = [(t, c) for t, c in self.cpu if start <= t <= end]
        if len(inside) < 2 or inside[-1][0] <= inside[0][0]:
            return None
        (t0, c0), (t1, c1) = inside[0], inside[-1]
        return (c1 - c0) / (t1 - t0) * 100

    def __enter__(self) -> ProcSampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()


@dataclass
class MeasuredRun:
    """A client subprocess run by :func:`_run_measured` and what the machine did meanwhile."""

    result: dict[str, Any]  # the client's last stdout line, parsed
    wall: float  # seconds
    ended: float  # monotonic time the client exited
    used: list[float]  # CPU seconds of each watched server
    bg_cpu_pct: float  # CPU of everything else on the machine, % of one core


def _run_measured(
    cmd: list[str], watched: Sequence[Server], timeout: float, what: str
) -> MeasuredRun:
    """Run the client ``cmd`` and account the CPU used meanwhile: by each server in
    ``watched``, by the client (this process's children), and by everything else on the
    machine (the noise indicator)."""
    before = [s.cpu() for s in watched]
    kids0 = os.times()
    sys0 = system_busy_seconds()
    wall0 = time.monotonic()
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    ended = time.monotonic()
    sys1 = system_busy_seconds()
    kids1 = os.times()
    used = [s.cpu() - b for s, b in zip(watched, before, strict=True)]
    client_cpu = (kids1.children_user - kids0.children_user) + (
        kids1.children_system - kids0.children_system
    )
    if out.returncode != 0:
        raise RuntimeError(f"{what} failed ({out.returncode}): {out.stderr[-2000:]}")
    wall = ended - wall0
    background = max((sys1 - sys0) - sum(used) - client_cpu, 0.0)
    return MeasuredRun(
        result=json.loads(out.stdout.strip().splitlines()[-1]),
        wall=wall,
        ended=ended,
        used=used,
        bg_cpu_pct=round(background / wall * 100, 1),
    )


def run_load(
    shared_bench: Path,
    url: str,
    *,
    concurrency: int,
    duration: float,
    stream: bool,
    server: Server | None,
    warmup: int = 20,
    cpus: str | None = None,
    others: Sequence[Server] = (),
    body: dict[str, Any] | None = None,
    headers: Sequence[str] = (),
) -> dict[str, Any]:
    """One load.py run; adds the server's CPU seconds used during it (``server_cpu_s``).
    ``headers``: "Name: value" lines every request carries (an API key).

    ``bg_cpu_pct`` is the CPU that processes other than ours (load.py, ``server`` and
    ``others``) used on the machine during the run, in % of one core: the noise indicator.
    """
    cmd = [
        sys.executable,
        str(shared_bench / "load.py"),
        "--url",
        url,
        "--body",
        json.dumps(BODY if body is None else body, separators=(",", ":")),
        "-c",
        str(concurrency),
        "-d",
        str(duration),
        "--warmup",
        str(warmup),
    ]
    if stream:
        cmd += ["--stream", "--expect", "response.completed"]
    for header in headers:
        cmd += ["-H", header]
    if cpus is not None and shutil.which("taskset"):
        cmd = ["taskset", "-c", cpus, *cmd]
    watched = [s for s in (server, *others) if s is not None]
    main0 = server.main_thread_cpu() if server else None
    run = _run_measured(cmd, watched, duration + 120, "load.py")
    main1 = server.main_thread_cpu() if server else None
    result = run.result
    result["bg_cpu_pct"] = run.bg_cpu_pct
    if server is not None:
        # The CPU window also covers load.py's start-up and warm-up requests; the warm-up is
        # added to the request count so the per-request figure stays honest.
        cpu = run.used[0]
        result["server_cpu_s"] = round(cpu, 3)
        result["server_wall_s"] = round(run.wall, 3)
        served = result["requests"] + warmup * concurrency
        result["server_cpu_us_per_req"] = round(cpu / max(served, 1) * 1e6, 1)
        if main0 is not None and main1 is not None:
            main = main1 - main0
            result["server_main_thread_cpu_us_per_req"] = round(main / max(served, 1) * 1e6, 1)
            result["server_other_threads_cpu_us_per_req"] = round(
                max(cpu - main, 0.0) / max(served, 1) * 1e6, 1
            )
    if result.get("errors"):
        print(
            f"  !! {result['errors']} errors on {url}: {result.get('first_error')}", file=sys.stderr
        )
    return result


def run_paced_load(
    url: str,
    *,
    streams: int,
    pace_ms: float,
    duration: float,
    body: dict[str, Any],
    server: Server,
    others: Sequence[Server] = (),
    cpus: str | None = None,
    warmup_s: float = 1.0,
    expected_events: int | None = None,
    headers: Sequence[str] = (),
) -> dict[str, Any]:
    """One bench/paced.py run (a subprocess) against ``url``; adds what ``server`` (the one
    the client talks to) used during it: ``server_cpu_s``, ``server_cpu_us_per_event`` (over
    every event the client received), ``server_cpu_pct`` (of one core; ``_window``: in the
    client's measuring window alone, from samples every 50 ms), ``server_rss_peak_mb``
    (VmRSS sampled every 50 ms) and ``server_hwm_mb`` (VmHWM: the peak since it started);
    ``others_cpu_pct`` per other server, and ``bg_cpu_pct`` as in :func:`run_load`."""
    cmd = [
        sys.executable,
        str(BENCH_DIR / "paced.py"),
        "--url",
        url,
        "--streams",
        str(streams),
        "--pace-ms",
        f"{pace_ms:g}",
        "--duration",
        f"{duration:g}",
        "--warmup-s",
        f"{warmup_s:g}",
        "--body",
        json.dumps(body, separators=(",", ":")),
    ]
    if expected_events is not None:
        cmd += ["--expect-events", str(expected_events)]
    for header in headers:
        cmd += ["-H", header]
    if cpus is not None and shutil.which("taskset"):
        cmd = ["taskset", "-c", cpus, *cmd]
    with ProcSampler(server) as sampler:
        run = _run_measured(cmd, [server, *others], duration + 600, "paced.py")
    wall, ended, used = run.wall, run.ended, run.used
    result = run.result
    result["bg_cpu_pct"] = run.bg_cpu_pct
    result["server"] = server.name
    result["server_cpu_s"] = round(used[0], 3)
    result["server_cpu_pct"] = round(used[0] / wall * 100, 1)
    result["server_cpu_us_per_event"] = round(used[0] / max(result["events"], 1) * 1e6, 1)
    # The client's measuring window, placed from its end: it started wall_s before it ended.
    started = ended - float(result["wall_s"])
    window_pct = sampler.cpu_pct(started + float(result["window_start_s"]), started + duration)
    result["server_cpu_pct_window"] = None if window_pct is None else round(window_pct, 1)
    result["server_rss_peak_mb"] = round(sampler.peak_kb / 1024, 1)
    result["server_hwm_mb"] = round(sum(rss_kb(p, "VmHWM") for p in server.pids()) / 1024, 1)
    result["others_cpu_pct"] = {
        s.name: round(u / wall * 100, 1) for s, u in zip(others, used[1:], strict=True)
    }
    if result.get("errors"):
        print(
            f"  !! {result['errors']} errors on {url}: {result.get('first_error')}", file=sys.stderr
        )
    return result


def median_of(runs: list[dict[str, Any]], *path: str) -> float | None:
    values = []
    for run in runs:
        value: Any = run
        for key in path:
            value = value.get(key) if isinstance(value, dict) else None
        if isinstance(value, int | float):
            values.append(float(value))
    return statistics.median(values) if values else None


def spread_of(runs: list[dict[str, Any]], *path: str) -> tuple[float, float] | None:
    values = []
    for run in runs:
        value: Any = run
        for key in path:
            value = value.get(key) if isinstance(value, dict) else None
        if isinstance(value, int | float):
            values.append(float(value))
    return (min(values), max(values)) if values else None


def summarize(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """Median over rounds of the figures the tables use, plus min/max of the main ones."""
    return {
        "rounds": len(runs),
        "rps": median_of(runs, "rps"),
        "rps_range": spread_of(runs, "rps"),
        "p50_ms": median_of(runs, "latency_ms", "p50"),
        "p50_ms_range": spread_of(runs, "latency_ms", "p50"),
        "p99_ms": median_of(runs, "latency_ms", "p99"),
        "ttfb_p50_ms": median_of(runs, "ttfb_ms", "p50"),
        "ttfb_p50_ms_range": spread_of(runs, "ttfb_ms", "p50"),
        "ttfb_p99_ms": median_of(runs, "ttfb_ms", "p99"),
        "server_cpu_us_per_req": median_of(runs, "server_cpu_us_per_req"),
        "server_other_threads_cpu_us_per_req": median_of(
            runs, "server_other_threads_cpu_us_per_req"
        ),
        "bg_cpu_pct_max": max((float(r.get("bg_cpu_pct") or 0.0) for r in runs), default=None),
        "errors": sum(int(r.get("errors") or 0) for r in runs),
    }


def machine_info() -> dict[str, Any]:
    info: dict[str, Any] = {
        "cpus": os.cpu_count(),
        "python": platform.python_version(),
        "platform": platform.platform(),
    }
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                info["cpu_model"] = line.split(":", 1)[1].strip()
                break
    with contextlib.suppress(OSError):
        info["loadavg"] = Path("/proc/loadavg").read_text().split()[:3]
    versions = {}
    for dist in (
        "uvicorn",
        "uvloop",
        "httptools",
        "fastapi",
        "starlette",
        "sse-starlette",
        "pydantic",
        "aiohttp",
        "httpx",
        "orjson",
    ):
        with contextlib.suppress(Exception):
            from importlib.metadata import version

            versions[dist] = version(dist)
    info["packages"] = versions
    return info


def fmt(value: float | None, digits: int = 3) -> str:
    if value is None:
        return "-"
    if abs(value) >= 100:
        return f"{value:,.0f}"
    return f"{value:.{digits}f}"
