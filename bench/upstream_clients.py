"""httpx.AsyncClient vs aiohttp ClientSession as the gateway's upstream client, in one run.

    python bench/upstream_clients.py            # ~3.5 min
    python bench/upstream_clients.py --quick    # ~100 s
    python bench/upstream_clients.py --no-floor # without the bare proxies

One mock upstream (shared/bench/mock_upstream.py) and, side by side on free ports:

  gateway+aiohttp  bench/gateway_launcher.py --client aiohttp  (the gateway's ResponsesUpstream)
  gateway+httpx    bench/gateway_launcher.py --client httpx    (bench/httpx_upstream.HttpxUpstream)
  proxy+aiohttp    bench/minimal_proxy.py --client aiohttp     (bare Starlette pass-through)
  proxy+httpx      bench/minimal_proxy.py --client httpx
  respgate serve   python -m app.cli serve (the product as started by users; aiohttp)

Both gateways are the same ``create_app(settings, upstream=...)`` under the same uvicorn options;
only the object behind ``core.ports.Upstream`` differs. For each scenario (JSON/SSE, c=1/c=32)
and round, load.py hits the mock directly and then every target back to back; medians over the
rounds are reported with the added latency against the direct call of the same run.
Results go to ``--out`` (default /tmp/respgate-upstream-clients.json).
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _harness import (
    BODY,
    DEFAULT_SHARED_BENCH,
    Server,
    fmt,
    free_port,
    machine_info,
    mock_server,
    run_load,
    running,
    serve_command,
    summarize,
    use_ref,
)

BENCH = Path(__file__).resolve().parent
SCENARIOS = (("json", 1), ("json", 32), ("sse", 1), ("sse", 32))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--shared-bench", type=Path, default=DEFAULT_SHARED_BENCH)
    ap.add_argument("--duration", type=float, help="seconds per load run (default 3, quick 2)")
    ap.add_argument("--rounds", type=int, help="rounds (default 2, quick 1)")
    ap.add_argument("--no-floor", action="store_true", help="skip the bare Starlette proxies")
    ap.add_argument(
        "--no-cli", action="store_true", help="skip the 'respgate serve' (CLI) gateway row"
    )
    ap.add_argument("--out", type=Path, default=Path("/tmp/respgate-upstream-clients.json"))
    ap.add_argument(
        "--body",
        default=json.dumps(BODY, separators=(",", ":")),
        help='JSON request body (default %(default)s; e.g. add "store": false to leave the '
        "response store out)",
    )
    ap.add_argument(
        "--ref",
        help="measure this git commit (exported with git archive to a temp dir) instead of "
        "the work tree",
    )
    args = ap.parse_args()
    provenance = use_ref(args.ref)
    body = json.loads(args.body)
    print(
        f"# app from {provenance['source']} (HEAD {provenance['head']}, "
        f"app/ dirty: {provenance['app_dirty']}, app/ digest {provenance['app_sha256']})"
    )
    duration = args.duration or (2.0 if args.quick else 3.0)
    rounds = args.rounds or (1 if args.quick else 2)
    shared = args.shared_bench.resolve()

    mock = mock_server(shared, free_port(), None)
    targets: list[Server] = []
    for client in ("aiohttp", "httpx"):
        port = free_port()
        targets.append(
            Server(
                f"gateway+{client}",
                [
                    sys.executable,
                    str(BENCH / "gateway_launcher.py"),
                    "--upstream-url",
                    mock.base,
                    "--port",
                    str(port),
                    "--client",
                    client,
                ],
                port,
            )
        )
    if not args.no_cli:
        # The product as users start it: shows that the launcher above is representative.
        port = free_port()
        targets.append(
            Server(
                "respgate serve",
                serve_command(port, mock.base, tempfile.mkdtemp(prefix="respgate-bench-data-")),
                port,
            )
        )
    if not args.no_floor:
        for client in ("aiohttp", "httpx"):
            port = free_port()
            targets.append(
                Server(
                    f"proxy+{client}",
                    [
                        sys.executable,
                        str(BENCH / "minimal_proxy.py"),
                        "--upstream-url",
                        mock.base,
                        "--port",
                        str(port),
                        "--client",
                        client,
                    ],
                    port,
                )
            )
    info = machine_info()
    print(
        f"# upstream clients: {info.get('cpus')} CPUs, "
        f"loadavg {' '.join(info.get('loadavg', []))}, {rounds} round(s) x {duration:g} s",
        flush=True,
    )

    raw: dict[str, list[dict[str, Any]]] = {}
    started = time.monotonic()
    with running([mock, *targets]):
        for server in [mock, *targets]:
            for stream in (False, True):
                run_load(
                    shared,
                    server.base + "/v1/responses",
                    concurrency=32,
                    duration=1.0,
                    stream=stream,
                    server=server,
                    body=body,
                )
        for rnd in range(rounds):
            for mode, conc in SCENARIOS:
                for server in [mock, *targets]:
                    name = "direct" if server is mock else server.name
                    res = run_load(
                        shared,
                        server.base + "/v1/responses",
                        concurrency=conc,
                        duration=duration,
                        stream=(mode == "sse"),
                        server=server,
                        others=[s for s in (mock, *targets) if s is not server],
                        body=body,
                    )
                    raw.setdefault(f"{name}|{mode}|{conc}", []).append(res)
                    print(
                        f"  round {rnd + 1}/{rounds} {mode.upper():4s} c={conc:<2d} {name:16s} "
                        f"{res['rps']:>9,.0f} req/s  p50 {res['latency_ms']['p50']:7.3f} ms  "
                        f"ttfb p50 {res['ttfb_ms']['p50']:7.3f} ms  "
                        f"server CPU {res.get('server_cpu_us_per_req', 0):6.0f} µs/req  "
                        f"bg CPU {res['bg_cpu_pct']:5.1f}%",
                        flush=True,
                    )

    names = ["direct", *[t.name for t in targets]]
    summary: dict[str, dict[str, Any]] = {}
    lines = [
        "| scenario | c | path | req/s | x direct | p50 ms | added p50 ms | TTFB p50 ms "
        "| added TTFB ms | p99 ms | server CPU µs/req | bg CPU % (max) |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for mode, conc in SCENARIOS:
        direct = summarize(raw[f"direct|{mode}|{conc}"])
        for name in names:
            s = summarize(raw[f"{name}|{mode}|{conc}"])
            added = None if name == "direct" else s["p50_ms"] - direct["p50_ms"]
            added_ttfb = None if name == "direct" else s["ttfb_p50_ms"] - direct["ttfb_p50_ms"]
            ratio = s["rps"] / direct["rps"] if direct["rps"] else None
            summary[f"{name}|{mode}|{conc}"] = {
                **s,
                "added_p50_ms": added,
                "added_ttfb_p50_ms": added_ttfb,
                "rps_ratio": ratio,
            }
            lines.append(
                f"| {mode.upper()} | {conc} | {name} | {fmt(s['rps'])} | {fmt(ratio, 3)} "
                f"| {fmt(s['p50_ms'])} | {fmt(added)} | {fmt(s['ttfb_p50_ms'])} "
                f"| {fmt(added_ttfb)} "
                f"| {fmt(s['p99_ms'])} | {fmt(s['server_cpu_us_per_req'], 0)} "
                f"| {fmt(s['bg_cpu_pct_max'], 0)} |"
            )
    elapsed = time.monotonic() - started
    print()
    print("\n".join(lines))
    ga = {k: summary[f"gateway+aiohttp|{k}"] for k in ("json|1", "json|32", "sse|1", "sse|32")}
    gh = {k: summary[f"gateway+httpx|{k}"] for k in ("json|1", "json|32", "sse|1", "sse|32")}
    print()
    print("gateway, httpx relative to aiohttp (same run):")
    for key in ga:
        a, h = ga[key], gh[key]
        print(
            f"  {key:8s} req/s {fmt(h['rps'])} vs {fmt(a['rps'])} ({h['rps'] / a['rps']:.2f}x)  "
            f"added p50 {fmt(h['added_p50_ms'])} vs {fmt(a['added_p50_ms'])} ms  "
            f"CPU {fmt(h['server_cpu_us_per_req'], 0)} vs "
            f"{fmt(a['server_cpu_us_per_req'], 0)} µs/req"
        )
    print(
        f"\nmedians over {rounds} round(s) of {duration:g} s; wall time {elapsed:.0f} s; "
        f"raw in {args.out}"
    )
    args.out.write_text(
        json.dumps(
            {
                "machine": info,
                "app": provenance,
                "body": body,
                "rounds": rounds,
                "duration_s": duration,
                "summary": summary,
                "raw": raw,
            },
            indent=2,
            default=str,
        )
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
