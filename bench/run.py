"""Benchmark the gateway against the mock upstream called directly, in one run.

    python bench/run.py                 # full run, ~2.5 min
    python bench/run.py --quick         # ~30 s
    python bench/run.py --pin           # c=1 all on CPU 0; c=32 gateway on CPU 1, the rest on 0

Starts ``shared/bench/mock_upstream.py`` (by path, not copied) and the gateway
(``python -m app.cli serve``, i.e. ``respgate serve`` with uvicorn's defaults) on free ports,
warms both up, then runs ``shared/bench/load.py`` for each scenario, direct then through the
gateway, back to back, for ``--rounds`` rounds:

    JSON c=1, JSON c=32, SSE c=1, SSE c=32   (SSE: --stream --expect response.completed)

and reports medians over the rounds: req/s, p50/p99 latency, p50 time to first byte, the
gateway's CPU time per request (from /proc), ratios to direct and the latency the gateway adds
(gateway p50 - direct p50; for SSE the TTFB difference). Prints a markdown table and writes
every raw load.py result to ``--out`` (JSON, default /tmp/respgate-bench.json).
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
    PIN_CLIENT_CPU,
    PIN_SERVER_CPU,
    Server,
    fmt,
    free_port,
    machine_info,
    mock_server,
    pin_layout,
    run_load,
    running,
    summarize,
    use_ref,
)

SCENARIOS = (("json", 1), ("json", 32), ("sse", 1), ("sse", 32))
# The one client key of --auth (a configured [[auth.keys]] entry; the gateway keeps its hash).
BENCH_KEY = "sk-rg-bench-0123456789abcdefghijklmnopqrstuvwxyz"

TARGETS = {
    ("json", 1): ("added p50 ≤ 0.3 ms", "added_p50_ms", 0.3, "max"),
    ("json", 32): ("≥ 3,000 req/s", "gateway_rps", 3000.0, "min"),
    ("sse", 1): ("added TTFB p50 ≤ 0.5 ms", "added_ttfb_p50_ms", 0.5, "max"),
}


def compare(direct: dict[str, Any], gateway: dict[str, Any]) -> dict[str, Any]:
    def sub(a: float | None, b: float | None) -> float | None:
        return None if a is None or b is None else a - b

    def div(a: float | None, b: float | None) -> float | None:
        return None if a is None or not b else a / b

    return {
        "direct_rps": direct["rps"],
        "gateway_rps": gateway["rps"],
        "rps_ratio": div(gateway["rps"], direct["rps"]),
        "direct_p50_ms": direct["p50_ms"],
        "gateway_p50_ms": gateway["p50_ms"],
        "added_p50_ms": sub(gateway["p50_ms"], direct["p50_ms"]),
        "direct_ttfb_p50_ms": direct["ttfb_p50_ms"],
        "gateway_ttfb_p50_ms": gateway["ttfb_p50_ms"],
        "added_ttfb_p50_ms": sub(gateway["ttfb_p50_ms"], direct["ttfb_p50_ms"]),
        "gateway_p99_ms": gateway["p99_ms"],
        "gateway_cpu_us_per_req": gateway["server_cpu_us_per_req"],
        "gateway_threads_cpu_us_per_req": gateway["server_other_threads_cpu_us_per_req"],
        "direct_mock_cpu_us_per_req": direct["server_cpu_us_per_req"],
        "bg_cpu_pct_max": max(direct["bg_cpu_pct_max"] or 0.0, gateway["bg_cpu_pct_max"] or 0.0),
    }


def verdict(key: tuple[str, int], row: dict[str, Any]) -> str:
    target = TARGETS.get(key)
    if target is None:
        return "-"
    label, field, limit, kind = target
    value = row.get(field)
    if value is None:
        return f"{label}: no data"
    ok = value <= limit if kind == "max" else value >= limit
    return f"{'MET' if ok else 'NOT MET'} ({label})"


def table(rows: dict[tuple[str, int], dict[str, Any]]) -> str:
    head = (
        "| scenario | c | direct req/s | gateway req/s | gw/direct | direct p50 ms "
        "| gateway p50 ms | added p50 ms | direct TTFB p50 | gateway TTFB p50 | added TTFB ms "
        "| gateway p99 ms "
        "| gateway CPU µs/req (in worker threads) | bg CPU % (max) | target |\n"
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"
    )
    lines = [head]
    for (mode, conc), row in rows.items():
        lines.append(
            f"| {mode.upper()} | {conc} | {fmt(row['direct_rps'])} | {fmt(row['gateway_rps'])} "
            f"| {fmt(row['rps_ratio'], 3)} | {fmt(row['direct_p50_ms'])} "
            f"| {fmt(row['gateway_p50_ms'])} "
            f"| **{fmt(row['added_p50_ms'])}** | {fmt(row['direct_ttfb_p50_ms'])} "
            f"| {fmt(row['gateway_ttfb_p50_ms'])} | **{fmt(row['added_ttfb_p50_ms'])}** "
            f"| {fmt(row['gateway_p99_ms'])} | {fmt(row['gateway_cpu_us_per_req'], 0)} "
            f"({fmt(row['gateway_threads_cpu_us_per_req'], 0)}) "
            f"| {fmt(row['bg_cpu_pct_max'], 0)} | {verdict((mode, conc), row)} |"
        )
    return "\n".join(lines)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="1 round of 2 s per scenario (~30 s)")
    ap.add_argument(
        "--shared-bench",
        type=Path,
        default=DEFAULT_SHARED_BENCH,
        help=f"directory with mock_upstream.py and load.py (default {DEFAULT_SHARED_BENCH})",
    )
    ap.add_argument("--out", type=Path, default=Path("/tmp/respgate-bench.json"))
    ap.add_argument("--duration", type=float, help="seconds per load run (default 4, quick 2)")
    ap.add_argument(
        "--rounds", type=int, help="direct/gateway pairs per scenario (default 3, quick 1)"
    )
    ap.add_argument(
        "--whatif",
        default="",
        help="run the gateway through bench/gateway_launcher.py with these run-time "
        "patches (comma list, see its --help): measures a proposed change, "
        "not the product",
    )
    ap.add_argument(
        "--pin",
        action="store_true",
        help=f"c=1: all processes on CPU {PIN_CLIENT_CPU}; c=32: gateway on CPU {PIN_SERVER_CPU}, "
        f"mock + load.py on CPU {PIN_CLIENT_CPU}",
    )
    ap.add_argument(
        "--body",
        default=json.dumps(BODY, separators=(",", ":")),
        help='JSON request body (default %(default)s; e.g. add "store": false to leave the '
        "response store out)",
    )
    ap.add_argument(
        "--workers",
        type=int,
        default=1,
        help="respgate serve --workers N (N > 1 needs --database-url postgresql://...)",
    )
    ap.add_argument("--database-url", help="the gateway's store (default: SQLite in a temp dir)")
    ap.add_argument(
        "--auth",
        action="store_true",
        help="client authentication on ([auth] mode on, one configured key): every request "
        "to the gateway carries the key (the mock ignores it); without it the gateway bound "
        "to 127.0.0.1 has authentication off",
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

    duration = args.duration or (2.0 if args.quick else 4.0)
    rounds = args.rounds or (1 if args.quick else 3)
    shared = args.shared_bench.resolve()
    server_cpus, client_cpus = pin_layout(32) if args.pin else (None, None)

    mock = mock_server(shared, free_port(), client_cpus)
    gw_port = free_port()
    data_dir = tempfile.mkdtemp(prefix="respgate-bench-data-")
    if args.whatif:
        cmd = [
            sys.executable,
            str(Path(__file__).resolve().parent / "gateway_launcher.py"),
            "--port",
            str(gw_port),
            "--upstream-url",
            mock.base,
            "--whatif",
            args.whatif,
        ]
    else:
        cmd = [
            sys.executable,
            "-m",
            "app.cli",
            "serve",
            "--host",
            "127.0.0.1",
            "--port",
            str(gw_port),
            "--upstream-url",
            mock.base,
            "--log-level",
            "warning",
            "--data-dir",
            data_dir,
        ]
        if args.workers != 1:  # a ref from before --workers takes no such flag
            cmd += ["--workers", str(args.workers)]
        if args.database_url:
            cmd += ["--database-url", args.database_url]
    gateway = Server("gateway", cmd, gw_port, cpus=server_cpus)
    headers: list[str] = []
    if args.auth:
        gateway.env.update(
            RESPGATE_AUTH__MODE="on",
            RESPGATE_AUTH__KEYS=json.dumps([{"tenant": "bench", "key": BENCH_KEY}]),
        )
        headers.append(f"Authorization: Bearer {BENCH_KEY}")
    info = machine_info()
    print(
        f"# respgate bench: {info.get('cpus')} CPUs ({info.get('cpu_model', '?')}), "
        f"loadavg {' '.join(info.get('loadavg', []))}, {rounds} round(s) x {duration:g} s, "
        f"pin={'on' if args.pin else 'off'}, body {args.body}, workers {args.workers}, "
        f"store {args.database_url or 'SQLite'}, auth {'on' if args.auth else 'off'}"
        + (f", WHAT-IF patches: {args.whatif}" if args.whatif else ""),
        flush=True,
    )

    raw: dict[str, list[dict[str, Any]]] = {}
    started = time.monotonic()
    with running([mock, gateway]) as log_dir:
        # Warm-up: connection pools, imports done lazily on first use, allocator.
        for target, server in (("direct", mock), ("gateway", gateway)):
            url = (mock if target == "direct" else gateway).base + "/v1/responses"
            for stream in (False, True):
                run_load(
                    shared,
                    url,
                    concurrency=32,
                    duration=1.0,
                    stream=stream,
                    server=server,
                    body=body,
                    cpus=client_cpus,
                    headers=headers,
                )
        for rnd in range(rounds):
            for mode, conc in SCENARIOS:
                if args.pin:
                    server_cpus, client_cpus = pin_layout(conc)
                    gateway.pin(server_cpus)
                    mock.pin(client_cpus)
                for target, server in (("direct", mock), ("gateway", gateway)):
                    url = server.base + "/v1/responses"
                    other = gateway if server is mock else mock
                    res = run_load(
                        shared,
                        url,
                        concurrency=conc,
                        duration=duration,
                        stream=(mode == "sse"),
                        server=server,
                        cpus=client_cpus,
                        others=[other],
                        body=body,
                        headers=headers,
                    )
                    res["round"] = rnd
                    raw.setdefault(f"{target}-{mode}-c{conc}", []).append(res)
                    print(
                        f"  round {rnd + 1}/{rounds} {target:7s} {mode.upper():4s} c={conc:<2d} "
                        f"{res['rps']:>9,.0f} req/s  p50 {res['latency_ms']['p50']:7.3f} ms  "
                        f"ttfb p50 {res['ttfb_ms']['p50']:7.3f} ms  "
                        f"server CPU {res.get('server_cpu_us_per_req', 0):6.0f} µs/req  "
                        f"bg CPU {res['bg_cpu_pct']:5.1f}%",
                        flush=True,
                    )
        gateway_log = gateway.tail(50)
        del log_dir

    rows: dict[tuple[str, int], dict[str, Any]] = {}
    for mode, conc in SCENARIOS:
        direct = summarize(raw[f"direct-{mode}-c{conc}"])
        gw = summarize(raw[f"gateway-{mode}-c{conc}"])
        row = compare(direct, gw)
        row["direct"] = direct
        row["gateway"] = gw
        row["verdict"] = verdict((mode, conc), row)
        rows[(mode, conc)] = row

    elapsed = time.monotonic() - started
    print()
    print(table(rows))
    print()
    print(
        f"medians over {rounds} round(s) of {duration:g} s; wall time {elapsed:.0f} s; "
        f"raw results in {args.out}"
    )
    result = {
        "when": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "machine": info,
        "app": provenance,
        "config": {
            "duration_s": duration,
            "rounds": rounds,
            "pin": args.pin,
            "whatif": args.whatif or None,
            "shared_bench": str(shared),
            "body": body,
            "gateway_cmd": gateway.cmd,
        },
        "summary": {f"{m}-c{c}": row for (m, c), row in rows.items()},
        "raw": raw,
        "gateway_log_tail": gateway_log,
        "elapsed_s": round(elapsed, 1),
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
