"""MCP call overhead: the gateway's MCP client vs. the ``mcp`` SDK called directly.

    python bench/mcp_bench.py               # 3 repeats x 2,000 calls per client, ~1 min
    python bench/mcp_bench.py --quick       # 2 repeats x 500 calls per client, ~15 s
    python bench/mcp_bench.py --profile 300  # then cProfile 300 calls per client
    python bench/mcp_bench.py --serve-counter PORT   # (internal) the counter server alone

Starts the tests' real MCP server (``tests/mcp_servers/counter.py``: ``MCPServer("counter")``
over streamable HTTP, served by uvicorn with its defaults) in a subprocess on 127.0.0.1, then,
in this one process and on one event loop (uvloop, as under ``respgate serve``), calls its
``sum`` tool through three clients, interleaved call by call (the order rotates every
iteration), each on one long-lived session opened before the measurement:

  sdk       ``mcp.Client(url, mode="legacy")``, entered once, ``client.call_tool("sum", ...)``:
            the floor, the SDK with nothing around it
  session   ``app.tools.mcp.client.McpSession.call_tool`` (the gateway's session: the SDK
            client owned by a background task, each call in its own task, raced against that
            task, under ``asyncio.timeout``, with the HTTP status box)
  executor  ``app.tools.mcp.executor.McpToolExecutor.run`` as the tool loop calls it, built by
            ``McpToolProvider.prepare`` from a request tool ``{"type": "mcp", "server_url": ...}``
            (argument parsing, session lookup, the ``mcp_call`` item and the model's text)

For each client it reports p50/p90/p99/mean wall time per call and the CPU this process spent
per call (``time.process_time`` around the call: the client's own cost; the server runs in
another process and its CPU per call is reported separately from /proc). Added = client -
sdk, both from the same run. Each repeat is a full interleaved pass; the best repeat (lowest
sdk p50) and every repeat's figures are printed, and everything is written to ``--out``.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import cProfile
import json
import pstats
import statistics
import sys
import time
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _harness import (
    Server,
    free_port,
    machine_info,
    running,
    use_ref,
)

ARGS = {"a": 2, "b": 3}
CallFn = Callable[[], Awaitable[Any]]


# ----------------------------------------------------------------------------- the server


def serve_counter(port: int) -> None:
    """The counter MCP server of the tests on 127.0.0.1:PORT, plus ``GET /health``."""
    import uvicorn
    from starlette.requests import Request
    from starlette.responses import JSONResponse, Response

    from tests.mcp_servers.counter import build_counter_server

    server = build_counter_server()

    @server.custom_route("/health", methods=["GET"])  # type: ignore[untyped-decorator]
    async def health(request: Request) -> Response:
        return JSONResponse({"ok": True})

    uvicorn.run(
        server.streamable_http_app(),
        host="127.0.0.1",
        port=port,
        log_level="warning",
        access_log=False,
    )


def counter_server(port: int, cpus: str | None = None) -> Server:
    """A harness ``Server`` running ``serve_counter`` (``/mcp`` is the MCP endpoint)."""
    return Server(
        "mcp-counter",
        [sys.executable, str(Path(__file__).resolve()), "--serve-counter", str(port)],
        port,
        cpus=cpus,
    )


def mcp_url(server: Server) -> str:
    return f"{server.base}/mcp"


# ----------------------------------------------------------------------------- statistics


def pct(values: list[float], p: float) -> float:
    ordered = sorted(values)
    k = (len(ordered) - 1) * p / 100.0
    lo = int(k)
    hi = min(lo + 1, len(ordered) - 1)
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (k - lo)


def describe(wall_ms: list[float], cpu_ms: list[float]) -> dict[str, float]:
    return {
        "n": len(wall_ms),
        "p50_ms": pct(wall_ms, 50),
        "p90_ms": pct(wall_ms, 90),
        "p99_ms": pct(wall_ms, 99),
        "mean_ms": statistics.fmean(wall_ms),
        "cpu_us_mean": statistics.fmean(cpu_ms) * 1000,
        "cpu_us_p50": pct(cpu_ms, 50) * 1000,
    }


async def interleave(
    clients: dict[str, CallFn], calls: int, warmup: int
) -> dict[str, dict[str, float]]:
    """``calls`` timed calls per client, one of each per iteration, order rotating."""
    names = list(clients)
    for _ in range(warmup):
        for name in names:
            await clients[name]()
    wall: dict[str, list[float]] = {n: [] for n in names}
    cpu: dict[str, list[float]] = {n: [] for n in names}
    perf, ptime = time.perf_counter_ns, time.process_time_ns
    for i in range(calls):
        shift = i % len(names)
        for name in names[shift:] + names[:shift]:
            call = clients[name]
            c0 = ptime()
            t0 = perf()
            await call()
            t1 = perf()
            c1 = ptime()
            wall[name].append((t1 - t0) / 1e6)
            cpu[name].append((c1 - c0) / 1e6)
    return {n: describe(wall[n], cpu[n]) for n in names}


# ----------------------------------------------------------------------------- clients


def executor_client(executor: Any) -> CallFn:
    """A zero-argument coroutine running one ``sum`` call through a gateway executor, as the
    tool loop calls it (a new call id each time)."""
    from app.core.tools import GatewayCall

    arguments = json.dumps(ARGS)
    counter = iter(range(1 << 62))

    async def executor_call() -> Any:
        n = next(counter)
        call = GatewayCall(
            item_id=f"mcp_bench{n}",
            call_id=f"call_bench{n}",
            name="mcp__counter__sum",
            arguments=arguments,
            output_index=0,
        )
        result = await executor.run(call, timeout=60.0)
        assert result.ok, result
        return result

    return executor_call


@contextlib.asynccontextmanager
async def open_clients(url: str, which: list[str]) -> Any:
    """The selected clients, each connected once; yields name -> zero-argument coroutine."""
    from mcp import Client

    from app.core.engines import Namespace
    from app.core.tool_sessions import ToolSessions
    from app.core.tools import ToolContext, ToolRequest
    from app.net.egress import EgressPolicy
    from app.tools.engines.multi import MultiEngine, Route
    from app.tools.mcp.client import McpSession
    from app.tools.mcp.engine import McpEngine, McpToolSet
    from app.tools.mcp.pool import McpSessionPool
    from app.tools.mcp.provider import McpToolProvider
    from app.tools.mcp.servers import McpPolicy
    from app.tools.mcp.spec import McpServerSpec
    from app.tools.toolkit import NameTable

    # The bench's server is on this machine: the egress policy allows loopback for it.
    local = EgressPolicy.of(allow_networks=["127.0.0.0/8", "::1/128"])

    clients: dict[str, CallFn] = {}
    async with contextlib.AsyncExitStack() as stack:
        if "sdk" in which:
            sdk = await stack.enter_async_context(Client(url, mode="legacy"))

            async def sdk_call() -> Any:
                result = await sdk.call_tool("sum", ARGS)
                assert not result.is_error, result
                return result

            clients["sdk"] = sdk_call
        if "session" in which:
            spec = McpServerSpec(label="counter", url=url, transport="streamable_http")
            session = await McpSession.open(spec, connect_timeout=10.0, egress=local)
            stack.push_async_callback(session.aclose)

            async def session_call() -> Any:
                outcome = await session.call_tool("sum", ARGS, timeout=60.0)
                assert outcome.error is None, outcome.error
                return outcome

            clients["session"] = session_call
        if "executor" in which:
            provider = McpToolProvider(policy=McpPolicy(egress=local))
            tool = {
                "type": "mcp",
                "server_label": "counter",
                "server_url": url,
                "require_approval": "never",
                "allowed_tools": ["sum"],
            }
            request = ToolRequest({}, NameTable(), ToolContext("bench", "resp_bench"))
            prepared = await provider.prepare([(0, tool)], [], [], request)
            for closer in prepared.closers:
                stack.push_async_callback(closer)
            clients["executor"] = executor_client(prepared.executors["mcp__counter__sum"])
        if "engine" in which:
            # The same server configured by the operator: a namespace run by the mcp engine,
            # through the session runner (sessions in memory) and the multi engine.
            pool = McpSessionPool(
                {"counter": McpServerSpec("counter", url)}, connect_timeout=20, egress=local
            )
            stack.push_async_callback(pool.aclose)
            namespace = Namespace(
                "counter", "mcp", McpToolSet(pool, "counter", "counter", list_timeout=30)
            )
            sessions = ToolSessions(MultiEngine({"counter": Route("mcp", McpEngine(pool))}))
            configured = McpToolProvider(namespaces={"counter": namespace}, sessions=sessions)
            tool = {"type": "mcp", "server_label": "counter", "allowed_tools": ["sum"]}
            request = ToolRequest({}, NameTable(), ToolContext("bench", "resp_bench"))
            engine_prepared = await configured.prepare([(0, tool)], [], [], request)
            clients["engine"] = executor_client(engine_prepared.executors["mcp__counter__sum"])
        # Same answer from every client before anything is timed.
        for name, call in clients.items():
            answer = await call()
            text = getattr(answer, "model_output", None) or getattr(answer, "output", None)
            if text is None:
                text = answer.content[0].text
            assert str(text).strip() == "5", (name, text)
        yield {name: clients[name] for name in which if name in clients}


def package_of(filename: str) -> str:
    """A profiled function's package: ``app/tools/mcp``, ``mcp``, ``httpx2``, ``asyncio``."""
    root = str(app_root())
    if "site-packages/" in filename:
        return filename.split("site-packages/", 1)[1].split("/")[0].removesuffix(".py")
    if filename.startswith(root):
        return filename[len(root) + 1 :].removesuffix(".py")
    if filename == "~":
        return "builtins (C)"
    if "/lib/python3" in filename:
        parts = filename.split("/lib/python3", 1)[1].split("/")
        return parts[1].removesuffix(".py") if len(parts) > 1 else filename
    return filename


async def profile_clients(clients: dict[str, CallFn], calls: int) -> dict[str, Any]:
    """cProfile over ``calls`` calls of each client: own time per call grouped by package."""
    out: dict[str, Any] = {}
    for name, call in clients.items():
        prof = cProfile.Profile()
        prof.enable()
        for _ in range(calls):
            await call()
        prof.disable()
        raw = pstats.Stats(prof).stats  # type: ignore[attr-defined]
        groups: dict[str, float] = {}
        for (filename, _line, _fn), (_cc, _nc, tt, _ct, _callers) in raw.items():
            key = package_of(filename)
            groups[key] = groups.get(key, 0.0) + tt
        total = sum(groups.values())
        out[name] = {
            "us_per_call": total / calls * 1e6,
            "by_package": [
                {"package": k, "us_per_call": v / calls * 1e6, "share": v / total}
                for k, v in sorted(groups.items(), key=lambda kv: kv[1], reverse=True)[:14]
            ],
        }
    print(f"\ncProfile, {calls} calls per client, own time per call by package:\n")
    names = list(out)
    packages: list[str] = []
    for name in names:
        for row in out[name]["by_package"]:
            if row["package"] not in packages:
                packages.append(row["package"])
    print("| package | " + " | ".join(f"{n} µs/call" for n in names) + " |")
    print("|---|" + "---|" * len(names))
    for package in packages:
        cells = []
        for name in names:
            hit = next((r for r in out[name]["by_package"] if r["package"] == package), None)
            cells.append(f"{hit['us_per_call']:.0f} ({hit['share']:.0%})" if hit else "-")
        print(f"| {package} | " + " | ".join(cells) + " |")
    totals = " | ".join(f"{out[n]['us_per_call']:.0f}" for n in names)
    print(f"| **total under the profiler** | {totals} |")
    return out


async def measure(
    url: str,
    which: list[str],
    calls: int,
    warmup: int,
    repeats: int,
    server: Server,
    profile_calls: int = 0,
) -> tuple[list[dict[str, Any]], dict[str, Any] | None]:
    out = []
    profile = None
    async with open_clients(url, which) as clients:
        for rep in range(repeats):
            cpu0 = server.cpu()
            sys0 = _busy()
            t0 = time.monotonic()
            figures = await interleave(clients, calls, warmup if rep == 0 else warmup // 4)
            wall = time.monotonic() - t0
            total_calls = sum(f["n"] for f in figures.values())
            server_cpu = server.cpu() - cpu0
            own = figures_cpu_s(figures)
            background = max((_busy() - sys0) - server_cpu - own, 0.0)
            out.append(
                {
                    "repeat": rep,
                    "clients": figures,
                    "server_cpu_us_per_call": server_cpu / max(total_calls, 1) * 1e6,
                    "bg_cpu_pct": background / wall * 100,
                    "wall_s": wall,
                }
            )
            line = "  ".join(
                f"{name} p50 {f['p50_ms']:.3f} p99 {f['p99_ms']:.3f} cpu {f['cpu_us_mean']:.0f}µs"
                for name, f in figures.items()
            )
            print(
                f"  repeat {rep + 1}/{repeats}: {line}  | server CPU "
                f"{out[-1]['server_cpu_us_per_call']:.0f} µs/call, bg CPU "
                f"{out[-1]['bg_cpu_pct']:.0f} %",
                flush=True,
            )
        if profile_calls:
            profile = await profile_clients(clients, profile_calls)
    return out, profile


def figures_cpu_s(figures: dict[str, dict[str, float]]) -> float:
    return sum(f["cpu_us_mean"] * f["n"] for f in figures.values()) / 1e6


def _busy() -> float:
    from _harness import system_busy_seconds

    return system_busy_seconds()


def table(run: dict[str, Any]) -> str:
    clients = run["clients"]
    base = clients.get("sdk")
    lines = [
        "| client | calls | p50 ms | p90 ms | p99 ms | mean ms | added p50 ms | added p99 ms "
        "| p50 ratio | client CPU µs/call (mean) | added CPU µs/call |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for name, f in clients.items():
        if base is not None and name != "sdk":
            added = f"{f['p50_ms'] - base['p50_ms']:+.3f}"
            added99 = f"{f['p99_ms'] - base['p99_ms']:+.3f}"
            ratio = f"{f['p50_ms'] / base['p50_ms']:.2f}"
            added_cpu = f"{f['cpu_us_mean'] - base['cpu_us_mean']:+.0f}"
        else:
            added = added99 = ratio = added_cpu = "-"
        lines.append(
            f"| {LABELS.get(name, name)} | {f['n']} | {f['p50_ms']:.3f} | {f['p90_ms']:.3f} "
            f"| {f['p99_ms']:.3f} | {f['mean_ms']:.3f} | {added} | {added99} | {ratio} "
            f"| {f['cpu_us_mean']:.0f} | {added_cpu} |"
        )
    return "\n".join(lines)


LABELS = {
    "sdk": "`mcp.Client.call_tool` (SDK, direct)",
    "session": "`McpSession.call_tool` (gateway)",
    "executor": "`McpToolExecutor.run` (gateway, as the loop calls it)",
    "engine": "configured server: `EngineToolExecutor.run` (ToolSessions, MultiEngine, McpEngine)",
}


def run_loop(coro: Awaitable[Any], loop: str) -> Any:
    if loop == "uvloop":
        import uvloop

        with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
            return runner.run(coro)  # type: ignore[arg-type]
    return asyncio.run(coro)  # type: ignore[arg-type]


@contextlib.contextmanager
def counter_running(cpus: str | None = None) -> Iterator[Server]:
    server = counter_server(free_port(), cpus)
    with running([server]):
        yield server


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="2 repeats x 500 calls per client")
    ap.add_argument("--calls", type=int, help="timed calls per client per repeat (2000; quick 500)")
    ap.add_argument("--repeats", type=int, help="interleaved passes (default 3; quick 2)")
    ap.add_argument("--warmup", type=int, default=100, help="untimed calls per client first")
    ap.add_argument("--clients", default="sdk,session,executor,engine")
    ap.add_argument("--loop", choices=("uvloop", "asyncio"), default="uvloop")
    ap.add_argument(
        "--profile",
        type=int,
        default=0,
        metavar="N",
        help="after the timing, cProfile N more calls per client (own time by package)",
    )
    ap.add_argument("--out", type=Path, default=Path("/tmp/respgate-mcp-bench.json"))
    ap.add_argument("--ref", help="measure this git commit's app/ (see bench/README.md)")
    ap.add_argument("--serve-counter", type=int, metavar="PORT", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.serve_counter:
        serve_counter(args.serve_counter)
        return 0
    provenance = use_ref(args.ref)
    sys.path.insert(0, str(app_root()))
    calls = args.calls or (500 if args.quick else 2000)
    repeats = args.repeats or (2 if args.quick else 3)
    which = [c.strip() for c in args.clients.split(",") if c.strip()]
    info = machine_info()
    print(
        f"# mcp_bench: app from {provenance['source']} (HEAD {provenance['head']}, app/ dirty: "
        f"{provenance['app_dirty']}, digest {provenance['app_sha256']}); {info.get('cpus')} CPUs, "
        f"loadavg {' '.join(info.get('loadavg', []))}; {repeats} x {calls} calls per client, "
        f"loop {args.loop}",
        flush=True,
    )
    started = time.monotonic()
    with counter_running() as server:
        url = mcp_url(server)
        runs, profile = run_loop(
            measure(url, which, calls, args.warmup, repeats, server, args.profile), args.loop
        )
    best = min(runs, key=lambda r: r["clients"][which[0]]["p50_ms"])
    print()
    print(
        f"best repeat ({best['repeat'] + 1} of {len(runs)}, lowest {which[0]} p50; server CPU "
        f"{best['server_cpu_us_per_call']:.0f} µs/call, bg CPU {best['bg_cpu_pct']:.0f} %):"
    )
    print()
    print(table(best))
    print()
    print(f"wall time {time.monotonic() - started:.0f} s; raw results in {args.out}")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(
        json.dumps(
            {
                "when": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
                "machine": info,
                "app": provenance,
                "config": {"calls": calls, "repeats": repeats, "loop": args.loop, "args": ARGS},
                "runs": runs,
                "best_repeat": best["repeat"],
                "profile": profile,
            },
            indent=2,
        )
    )
    return 0


def app_root() -> Path:
    """Where ``app`` is imported from: the work tree, or the ``--ref`` export."""
    import _harness

    return Path(_harness.APP_ROOT)


if __name__ == "__main__":
    sys.exit(main())
