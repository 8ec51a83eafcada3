"""REST engine overhead: ``RestEngine.execute`` vs. a direct ``aiohttp`` call to the same server.

    python bench/rest_engine_bench.py              # 2,000 single calls + 300 rounds of 8, ~30 s
    python bench/rest_engine_bench.py --quick      # 500 + 100
    python bench/rest_engine_bench.py --serve PORT # (internal) the HTTP server alone

Starts a small aiohttp server in a subprocess on 127.0.0.1 (``GET /items/{id}`` answers a
100-byte JSON object), then, in this one process and on one event loop (uvloop, as under
``respgate serve``), measures two clients interleaved call by call (the order alternates):

  direct   one long-lived ``aiohttp.ClientSession``: ``session.get(url)`` and ``resp.read()``:
           the floor
  engine   ``RestEngine.execute(session, [call])`` with a tool whose binding is
           ``GET {base}/items/{id}``: argument parsing and JSON-schema check, the binding
           (cached), the request, the bounded read, the JSON re-serialisation, the history

Single calls: p50/p99 wall time per client, the ratio of the p50s, and the added time per call
as paired differences (engine - direct of the same iteration): p50 and p99. Then rounds of 8
parallel calls: ``asyncio.gather`` of 8 direct calls vs. one ``execute`` of 8 calls. CPU per
call (``time.process_time``) is this process's own. Nothing asserts; figures go to ``--out``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

BENCH_DIR = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH_DIR))
sys.path.insert(0, str(BENCH_DIR.parent))

from _harness import Server, free_port, machine_info, running  # noqa: E402

Timed = Callable[[], Awaitable[Any]]
PARALLEL = 8


def serve(port: int) -> None:
    """The bench's HTTP server: ``GET /items/{id}`` and ``GET /health``."""
    from aiohttp import web

    body = json.dumps({"id": "0", "name": "widget", "price": 9.5, "tags": ["a", "b"]}).encode()

    async def item(request: web.Request) -> web.Response:
        return web.Response(body=body, content_type="application/json")

    async def health(request: web.Request) -> web.Response:
        return web.Response(text="ok")

    app = web.Application()
    app.router.add_get("/items/{id}", item)
    app.router.add_get("/health", health)
    try:
        import uvloop

        uvloop.install()
    except ImportError:
        pass
    web.run_app(app, host="127.0.0.1", port=port, access_log=None, print=None)


def pct(values: list[float], p: float) -> float:
    ordered = sorted(values)
    k = (len(ordered) - 1) * p / 100.0
    lo = int(k)
    hi = min(lo + 1, len(ordered) - 1)
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (k - lo)


def describe(wall_ms: list[float], cpu_ms: list[float], per: int = 1) -> dict[str, float]:
    return {
        "n": len(wall_ms),
        "p50_ms": pct(wall_ms, 50),
        "p99_ms": pct(wall_ms, 99),
        "mean_ms": statistics.fmean(wall_ms),
        "cpu_us_per_call": statistics.fmean(cpu_ms) * 1000 / per,
    }


async def interleave(clients: dict[str, Timed], iterations: int) -> dict[str, list[float]]:
    """Wall and CPU ms of each client, one of each per iteration, the order alternating."""
    names = list(clients)
    out: dict[str, list[float]] = {f"{n}_{kind}": [] for n in names for kind in ("wall", "cpu")}
    perf, ptime = time.perf_counter_ns, time.process_time_ns
    for i in range(iterations):
        for name in names if i % 2 == 0 else names[::-1]:
            c0, t0 = ptime(), perf()
            await clients[name]()
            t1, c1 = perf(), ptime()
            out[f"{name}_wall"].append((t1 - t0) / 1e6)
            out[f"{name}_cpu"].append((c1 - c0) / 1e6)
    return out


def summary(raw: dict[str, list[float]], per: int) -> dict[str, Any]:
    direct = describe(raw["direct_wall"], raw["direct_cpu"], per)
    engine = describe(raw["engine_wall"], raw["engine_cpu"], per)
    added = [e - d for e, d in zip(raw["engine_wall"], raw["direct_wall"], strict=True)]
    return {
        "direct": direct,
        "engine": engine,
        "p50_ratio": engine["p50_ms"] / direct["p50_ms"],
        "added_p50_ms": pct(added, 50),
        "added_p99_ms": pct(added, 99),
        "added_cpu_us_per_call": engine["cpu_us_per_call"] - direct["cpu_us_per_call"],
    }


async def measure(base: str, calls: int, rounds: int, warmup: int) -> dict[str, Any]:
    import aiohttp

    from app.core.engines import EngineCall, ToolSpec
    from app.tools.engines.rest import RestEngine

    spec = ToolSpec(
        namespace="bench",
        name="get_item",
        parameters={"type": "object", "properties": {"id": {"type": "string"}}, "required": ["id"]},
        binding={"method": "GET", "url": base + "/items/{id}"},
    )
    engine = RestEngine(environ={})
    await engine.setup("bench")
    counter = iter(range(1 << 62))
    async with aiohttp.ClientSession() as session:

        async def direct_one() -> bytes:
            async with session.get(f"{base}/items/{next(counter)}") as resp:
                assert resp.status == 200
                return await resp.read()

        def engine_call(n: int) -> EngineCall:
            return EngineCall(call_id=f"c{n}", tool=spec, arguments=f'{{"id":"{n}"}}')

        async def engine_one() -> None:
            [result] = await engine.execute("bench", [engine_call(next(counter))])
            assert result.ok, result.error

        async def direct_round() -> None:
            await asyncio.gather(*(direct_one() for _ in range(PARALLEL)))

        async def engine_round() -> None:
            results = await engine.execute(
                "bench", [engine_call(next(counter)) for _ in range(PARALLEL)]
            )
            assert all(r.ok for r in results)

        singles = {"direct": direct_one, "engine": engine_one}
        parallel = {"direct": direct_round, "engine": engine_round}
        await interleave(singles, warmup)
        await interleave(parallel, warmup // 8)
        single = summary(await interleave(singles, calls), 1)
        rounds_8 = summary(await interleave(parallel, rounds), PARALLEL)
    await engine.aclose()
    return {"single": single, "parallel_8": rounds_8}


def table(title: str, figures: dict[str, Any], unit: str) -> str:
    d, e = figures["direct"], figures["engine"]
    return "\n".join(
        [
            f"{title}",
            f"| client | n | p50 ms | p99 ms | mean ms | CPU µs/{unit} |",
            "|---|---|---|---|---|---|",
            f"| direct aiohttp | {d['n']} | {d['p50_ms']:.3f} | {d['p99_ms']:.3f} "
            f"| {d['mean_ms']:.3f} | {d['cpu_us_per_call']:.0f} |",
            f"| RestEngine.execute | {e['n']} | {e['p50_ms']:.3f} | {e['p99_ms']:.3f} "
            f"| {e['mean_ms']:.3f} | {e['cpu_us_per_call']:.0f} |",
            f"p50 ratio {figures['p50_ratio']:.2f}; added (paired) p50 "
            f"{figures['added_p50_ms']:+.3f} ms, p99 {figures['added_p99_ms']:+.3f} ms; "
            f"added CPU {figures['added_cpu_us_per_call']:+.0f} µs/{unit}",
        ]
    )


def run(coro: Awaitable[Any], loop: str) -> Any:
    if loop == "uvloop":
        import uvloop

        with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
            return runner.run(coro)  # type: ignore[arg-type]
    return asyncio.run(coro)  # type: ignore[arg-type]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="500 single calls, 100 rounds")
    ap.add_argument("--calls", type=int, help="timed single calls per client (2000; quick 500)")
    ap.add_argument("--rounds", type=int, help="timed rounds of 8 per client (300; quick 100)")
    ap.add_argument("--warmup", type=int, default=200, help="untimed single calls per client")
    ap.add_argument("--loop", choices=("uvloop", "asyncio"), default="uvloop")
    ap.add_argument("--out", type=Path, default=Path("/tmp/respgate-rest-engine-bench.json"))
    ap.add_argument("--serve", type=int, metavar="PORT", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.serve:
        serve(args.serve)
        return 0
    calls = args.calls or (500 if args.quick else 2000)
    rounds = args.rounds or (100 if args.quick else 300)
    info = machine_info()
    print(
        f"# rest_engine_bench: {info.get('cpus')} CPUs, loadavg "
        f"{' '.join(info.get('loadavg', []))}; {calls} single calls and {rounds} rounds of "
        f"{PARALLEL} per client, loop {args.loop}",
        flush=True,
    )
    port = free_port()
    server = Server(
        "rest-server", [sys.executable, str(Path(__file__).resolve()), "--serve", str(port)], port
    )
    with running([server]):
        figures = run(measure(server.base, calls, rounds, args.warmup), args.loop)
    print(table("\n## one call", figures["single"], "call"))
    print(
        table(
            f"\n## rounds of {PARALLEL} parallel calls (times per round)",
            figures["parallel_8"],
            "call",
        )
    )
    args.out.write_text(
        json.dumps({"machine": info, "calls": calls, "rounds": rounds, **figures}, indent=2)
    )
    print(f"\nwritten to {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
