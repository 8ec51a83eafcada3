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
    median_of,
    mock_server,
    pin_layout,
    rss_kb,
    run_load,
    run_paced_load,
    running,
    serve_command,
    summarize,
    use_ref,
)
from paced import raise_open_files

SCENARIOS = (("json", 1), ("json", 32), ("sse", 1), ("sse", 32))
DEFAULT_OUT = Path("/tmp/respgate-bench.json")
PACED_BODY = {"model": "mock", "input": "hi", "stream": True, "store": False}
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


# Issue 19's targets for 512 streams at 50 tokens/s (pace 20 ms) and for every run.
PACED_TARGET_KEY = (20.0, 512)
PACED_CPU_TARGET_US = 20.0


def paced_row(direct_runs: list[dict[str, Any]], gw_runs: list[dict[str, Any]]) -> dict[str, Any]:
    """Medians over rounds (max for the worst-case figures), added = gateway - direct."""

    med = median_of

    def worst(runs: list[dict[str, Any]], key: str) -> float | None:
        values = [float(r[key]) for r in runs if isinstance(r.get(key), int | float)]
        return max(values) if values else None

    def sub(a: float | None, b: float | None) -> float | None:
        return None if a is None or b is None else a - b

    row: dict[str, Any] = {
        "nominal_eps": med(direct_runs, "nominal_events_per_s"),
        "direct_eps": med(direct_runs, "events_per_s"),
        "gateway_eps": med(gw_runs, "events_per_s"),
        "direct_first_p50_ms": med(direct_runs, "first_event_ms", "p50"),
        "gateway_first_p50_ms": med(gw_runs, "first_event_ms", "p50"),
        "direct_first_p99_ms": med(direct_runs, "first_event_ms", "p99"),
        "gateway_first_p99_ms": med(gw_runs, "first_event_ms", "p99"),
        "direct_gap_p50_ms": med(direct_runs, "gap_ms", "p50"),
        "gateway_gap_p50_ms": med(gw_runs, "gap_ms", "p50"),
        "direct_gap_p99_ms": med(direct_runs, "gap_ms", "p99"),
        "gateway_gap_p99_ms": med(gw_runs, "gap_ms", "p99"),
        "direct_gap_max_ms": med(direct_runs, "gap_ms", "max"),
        "gateway_gap_max_ms": med(gw_runs, "gap_ms", "max"),
        "gateway_cpu_us_per_event": med(gw_runs, "server_cpu_us_per_event"),
        "gateway_cpu_pct": med(gw_runs, "server_cpu_pct"),
        "gateway_cpu_pct_window": med(gw_runs, "server_cpu_pct_window"),
        "gateway_rss_peak_mb": worst(gw_runs, "server_rss_peak_mb"),
        "mock_cpu_pct_direct": med(direct_runs, "server_cpu_pct"),
        # The gateway's own CPU while the direct run goes on: its periodic work when idle.
        "gateway_idle_cpu_pct": med(direct_runs, "others_cpu_pct", "gateway"),
        "client_cpu_pct_max": worst([*direct_runs, *gw_runs], "client_cpu_pct"),
        "direct_streams_completed": med(direct_runs, "streams_completed"),
        "gateway_streams_completed": med(gw_runs, "streams_completed"),
        "errors": sum(int(r.get("errors") or 0) for r in (*direct_runs, *gw_runs)),
        "bg_cpu_pct_max": worst([*direct_runs, *gw_runs], "bg_cpu_pct"),
    }
    direct_eps, gateway_eps = row["direct_eps"], row["gateway_eps"]
    row["eps_ratio"] = gateway_eps / direct_eps if direct_eps and gateway_eps is not None else None
    row["added_first_p50_ms"] = sub(row["gateway_first_p50_ms"], row["direct_first_p50_ms"])
    row["added_gap_p99_ms"] = sub(row["gateway_gap_p99_ms"], row["direct_gap_p99_ms"])
    row["added_stall_ms"] = sub(row["gateway_gap_max_ms"], row["direct_gap_max_ms"])
    return row


def paced_verdict(key: tuple[float, int], row: dict[str, Any]) -> str:
    checks: list[tuple[str, bool | None]] = []
    cpu = row["gateway_cpu_us_per_event"]
    within = None if cpu is None else cpu <= PACED_CPU_TARGET_US
    checks.append((f"CPU ≤ {PACED_CPU_TARGET_US:g} µs/ev", within))
    if key == PACED_TARGET_KEY:
        ratio, gap, stall = row["eps_ratio"], row["added_gap_p99_ms"], row["added_stall_ms"]
        rss = row["gateway_rss_peak_mb"]
        checks += [
            ("ev/s ≥ 0.99 x direct", None if ratio is None else ratio >= 0.99),
            ("added gap p99 ≤ 2 ms", None if gap is None else gap <= 2.0),
            ("added stall ≤ 20 ms", None if stall is None else stall <= 20.0),
            ("RSS ≤ 200 MB", None if rss is None else rss <= 200.0),
        ]
    return "; ".join(
        f"{'no data' if ok is None else 'MET' if ok else 'NOT MET'} ({label})"
        for label, ok in checks
    )


def paced_table(rows: dict[tuple[float, int], dict[str, Any]]) -> str:
    head = (
        "| pace ms | streams | nominal ev/s | direct ev/s | gateway ev/s | gw/direct "
        "| first event p50 ms direct / gw | first event p99 ms direct / gw "
        "| gap p99 ms direct / gw | **added gap p99 ms** | max gap ms direct / gw "
        "| **added stall ms** | gw CPU µs/event | gw CPU % in window (idle) | gw peak RSS MB "
        "| mock CPU % (direct) | client CPU % (max) | streams done direct / gw | errors "
        "| bg CPU % (max) | target |\n" + "|---" * 21 + "|"
    )
    lines = [head]
    for (pace, n), row in rows.items():
        lines.append(
            f"| {pace:g} | {n} | {fmt(row['nominal_eps'])} | {fmt(row['direct_eps'])} "
            f"| {fmt(row['gateway_eps'])} | {fmt(row['eps_ratio'], 3)} "
            f"| {fmt(row['direct_first_p50_ms'], 2)} / {fmt(row['gateway_first_p50_ms'], 2)} "
            f"| {fmt(row['direct_first_p99_ms'], 1)} / {fmt(row['gateway_first_p99_ms'], 1)} "
            f"| {fmt(row['direct_gap_p99_ms'], 2)} / {fmt(row['gateway_gap_p99_ms'], 2)} "
            f"| **{fmt(row['added_gap_p99_ms'], 2)}** "
            f"| {fmt(row['direct_gap_max_ms'], 1)} / {fmt(row['gateway_gap_max_ms'], 1)} "
            f"| **{fmt(row['added_stall_ms'], 1)}** | {fmt(row['gateway_cpu_us_per_event'], 1)} "
            f"| {fmt(row['gateway_cpu_pct_window'], 0)} ({fmt(row['gateway_idle_cpu_pct'], 1)}) "
            f"| {fmt(row['gateway_rss_peak_mb'], 0)} "
            f"| {fmt(row['mock_cpu_pct_direct'], 0)} | {fmt(row['client_cpu_pct_max'], 0)} "
            f"| {fmt(row['direct_streams_completed'], 0)} / "
            f"{fmt(row['gateway_streams_completed'], 0)} | {row['errors']} "
            f"| {fmt(row['bg_cpu_pct_max'], 0)} | {paced_verdict((pace, n), row)} |"
        )
    return "\n".join(lines)


def paced_line(res: dict[str, Any]) -> str:
    first, gap = res["first_event_ms"], res["gap_ms"]
    return (
        f"{res['events_per_s']:>9,.0f} ev/s (nominal {res['nominal_events_per_s']:,.0f})  "
        f"first p50/p99 {first['p50']}/{first['p99']} ms  "
        f"gap p50/p99/max {gap['p50']}/{gap['p99']}/{gap['max']} ms  "
        f"{res['server']} CPU {res['server_cpu_us_per_event']} µs/ev, "
        f"{res['server_cpu_pct_window']}% in window  RSS {res['server_rss_peak_mb']} MB  "
        f"client CPU {res['client_cpu_pct']}%  done "
        f"{res['streams_completed']}/{res['streams_started']}  errors {res['errors']}  "
        f"bg CPU {res['bg_cpu_pct']}%"
    )


def paced_main(args: argparse.Namespace, provenance: dict[str, Any]) -> int:
    """The paced-streams scenario (``--paced``): for each pacing, one mock (``--delay-ms``) and
    one gateway; for each stream count, bench/paced.py direct then through the gateway."""
    streams = [int(v) for v in args.streams.split(",") if v.strip()]
    paces = [float(v) for v in args.pace_ms.split(",") if v.strip()]
    duration = args.duration or (6.0 if args.quick else 15.0)
    rounds = args.rounds or 1
    body = json.loads(args.body) if args.body else dict(PACED_BODY)
    body["stream"] = True
    expected = args.deltas + 8  # created, in_progress, item/part added, deltas, 4 done/completed
    max_conns = args.upstream_max_connections or max(streams) + 64
    # The servers inherit it: the gateway holds two sockets per stream.
    nofile = raise_open_files(2 * max(streams) + 512)
    shared = args.shared_bench.resolve()
    server_cpus, client_cpus = pin_layout(max(streams)) if args.pin else (None, None)
    out = args.out if args.out != DEFAULT_OUT else Path("/tmp/respgate-bench-paced.json")
    print(
        f"# app from {provenance['source']} (HEAD {provenance['head']}, "
        f"app/ dirty: {provenance['app_dirty']}, app/ digest {provenance['app_sha256']})"
    )
    info = machine_info()
    print(
        f"# respgate bench --paced: {info.get('cpus')} CPUs ({info.get('cpu_model', '?')}), "
        f"loadavg {' '.join(info.get('loadavg', []))}; streams {streams}, pace {paces} ms, "
        f"{args.deltas + 8} events a stream, {rounds} round(s) x {duration:g} s "
        f"(+ the streams running at the deadline read to their end), warm-up {args.warmup_s:g} s; "
        f"RESPGATE_UPSTREAM_MAX_CONNECTIONS={max_conns}; open files {nofile}; "
        f"pin={'on' if args.pin else 'off'}; body {json.dumps(body)}; workers {args.workers}"
        + (f", WHAT-IF patches: {args.whatif}" if args.whatif else ""),
        flush=True,
    )
    raw: dict[str, list[dict[str, Any]]] = {}
    idle_rss: dict[str, float] = {}
    gateway_logs: dict[str, str] = {}
    started = time.monotonic()
    for pace in paces:
        mock_extra = ["--deltas", str(args.deltas), "--delay-ms", f"{pace:g}"]
        mock = mock_server(shared, free_port(), client_cpus, mock_extra)
        gateway, headers = gateway_server(args, free_port(), mock.base, server_cpus)
        gateway.env["RESPGATE_UPSTREAM_MAX_CONNECTIONS"] = str(max_conns)
        with running([mock, gateway]):
            # Warm-up: lazy imports, the upstream pool, the allocator (one stream per slot).
            run_paced_load(
                gateway.base + "/v1/responses",
                streams=min(32, max(streams)),
                pace_ms=pace,
                duration=0.5,
                body=body,
                server=gateway,
                others=[mock],
                cpus=client_cpus,
                headers=headers,
            )
            idle_rss[f"{pace:g}"] = round(sum(rss_kb(p) for p in gateway.pids()) / 1024, 1)
            for rnd in range(rounds):
                for n in streams:
                    for target, server in (("direct", mock), ("gateway", gateway)):
                        other = gateway if server is mock else mock
                        res = run_paced_load(
                            server.base + "/v1/responses",
                            streams=n,
                            pace_ms=pace,
                            duration=duration,
                            body=body,
                            server=server,
                            others=[other],
                            cpus=client_cpus,
                            warmup_s=args.warmup_s,
                            expected_events=expected,
                            headers=headers,
                        )
                        res["round"] = rnd
                        raw.setdefault(f"{target}-p{pace:g}-n{n}", []).append(res)
                        print(
                            f"  round {rnd + 1}/{rounds} pace {pace:g} ms n={n:<4d} {target:7s} "
                            + paced_line(res),
                            flush=True,
                        )
                        time.sleep(0.5)  # let the closed streams' work finish
            gateway_logs[f"{pace:g}"] = gateway.tail(50)

    rows: dict[tuple[float, int], dict[str, Any]] = {}
    for pace in paces:
        for n in streams:
            row = paced_row(raw[f"direct-p{pace:g}-n{n}"], raw[f"gateway-p{pace:g}-n{n}"])
            row["verdict"] = paced_verdict((pace, n), row)
            rows[(pace, n)] = row
    elapsed = time.monotonic() - started
    print()
    print(paced_table(rows))
    print()
    print(
        f"gateway RSS after the warm-up (MB, per pacing): {idle_rss}; medians over {rounds} "
        f"round(s) of {duration:g} s; wall time {elapsed:.0f} s; raw results in {out}"
    )
    result = {
        "when": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "machine": info,
        "app": provenance,
        "config": {
            "scenario": "paced",
            "streams": streams,
            "pace_ms": paces,
            "deltas": args.deltas,
            "events_per_stream": expected,
            "duration_s": duration,
            "warmup_s": args.warmup_s,
            "rounds": rounds,
            "upstream_max_connections": max_conns,
            "pin": args.pin,
            "whatif": args.whatif or None,
            "shared_bench": str(shared),
            "body": body,
        },
        "summary": {f"p{p:g}-n{n}": row for (p, n), row in rows.items()},
        "gateway_idle_rss_mb": idle_rss,
        "raw": raw,
        "gateway_log_tail": gateway_logs,
        "elapsed_s": round(elapsed, 1),
    }
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=2, default=str))
    return 0


def gateway_server(
    args: argparse.Namespace, port: int, upstream: str, cpus: str | None
) -> tuple[Server, list[str]]:
    """The gateway as the options ask (``--whatif``, ``--workers``, ``--database-url``,
    ``--auth``), and the headers every request to it carries."""
    data_dir = tempfile.mkdtemp(prefix="respgate-bench-data-")
    if args.whatif:
        cmd = [
            sys.executable,
            str(Path(__file__).resolve().parent / "gateway_launcher.py"),
            "--port",
            str(port),
            "--upstream-url",
            upstream,
            "--whatif",
            args.whatif,
        ]
    else:
        cmd = serve_command(port, upstream, data_dir)
        if args.workers != 1:  # a ref from before --workers takes no such flag
            cmd += ["--workers", str(args.workers)]
        if args.database_url:
            cmd += ["--database-url", args.database_url]
    gateway = Server("gateway", cmd, port, cpus=cpus)
    headers: list[str] = []
    if args.auth:
        gateway.env.update(
            RESPGATE_AUTH__MODE="on",
            RESPGATE_AUTH__KEYS=json.dumps([{"tenant": "bench", "key": BENCH_KEY}]),
        )
        headers.append(f"Authorization: Bearer {BENCH_KEY}")
    return gateway, headers


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="1 round of 2 s per scenario (~30 s)")
    ap.add_argument(
        "--shared-bench",
        type=Path,
        default=DEFAULT_SHARED_BENCH,
        help=f"directory with mock_upstream.py and load.py (default {DEFAULT_SHARED_BENCH})",
    )
    ap.add_argument(
        "--out", type=Path, default=DEFAULT_OUT, help="(--paced: /tmp/respgate-bench-paced.json)"
    )
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
        help=f"JSON request body (default {json.dumps(BODY, separators=(',', ':'))}; with "
        f'--paced {json.dumps(PACED_BODY, separators=(",", ":"))}, and "stream": true is '
        'forced; e.g. add "store": false to leave the response store out)',
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
    paced = ap.add_argument_group(
        "paced streams (--paced, issue 19)",
        "N concurrent SSE streams from a mock that paces its events (bench/paced.py records "
        "every event's arrival), direct then through the gateway, for each pacing and N",
    )
    paced.add_argument(
        "--paced",
        action="store_true",
        help="run the paced-streams scenario instead of JSON/SSE c=1/c=32 "
        "(quick: 6 s per run, ~2.5 min; full: 15 s per run)",
    )
    paced.add_argument(
        "--streams", default="64,256,512", help="concurrent streams, comma list (%(default)s)"
    )
    paced.add_argument(
        "--pace-ms",
        default="20,10",
        help="the mock's --delay-ms between events, comma list (%(default)s); one mock and "
        "one gateway per pacing",
    )
    paced.add_argument(
        "--deltas",
        type=int,
        default=200,
        help="the mock's text deltas per stream (%(default)s: 208 events a stream)",
    )
    paced.add_argument(
        "--warmup-s",
        type=float,
        default=1.0,
        help="start of each run left out of events/s and gaps (%(default)s)",
    )
    paced.add_argument(
        "--upstream-max-connections",
        type=int,
        help="the gateway's pool limit, set with RESPGATE_UPSTREAM_MAX_CONNECTIONS "
        "(default: the largest --streams + 64, so no stream waits for a connection)",
    )
    args = ap.parse_args()
    provenance = use_ref(args.ref)
    if args.paced:
        return paced_main(args, provenance)
    body = json.loads(args.body) if args.body else dict(BODY)
    print(
        f"# app from {provenance['source']} (HEAD {provenance['head']}, "
        f"app/ dirty: {provenance['app_dirty']}, app/ digest {provenance['app_sha256']})"
    )

    duration = args.duration or (2.0 if args.quick else 4.0)
    rounds = args.rounds or (1 if args.quick else 3)
    shared = args.shared_bench.resolve()
    server_cpus, client_cpus = pin_layout(32) if args.pin else (None, None)

    mock = mock_server(shared, free_port(), client_cpus)
    gateway, headers = gateway_server(args, free_port(), mock.base, server_cpus)
    info = machine_info()
    print(
        f"# respgate bench: {info.get('cpus')} CPUs ({info.get('cpu_model', '?')}), "
        f"loadavg {' '.join(info.get('loadavg', []))}, {rounds} round(s) x {duration:g} s, "
        f"pin={'on' if args.pin else 'off'}, body {json.dumps(body)}, workers {args.workers}, "
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
