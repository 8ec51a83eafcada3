"""Issue 18's fault trials against a real ``respgate serve``: figures before and after.

    python bench/fault_trials.py                  # the work tree, all trials, 4-5 min
    python bench/fault_trials.py --ref 2752c01    # a commit (git archive to /tmp)
    python bench/fault_trials.py --only 2,4       # some trials

Each trial starts its own fault-injecting upstream (``bench/_faults.FaultUpstream``, in this
process) and its own gateway subprocess (``python -m app.cli serve``, SQLite store in a fresh
temporary data dir), and prints plain figures; nothing is asserted. The "good" column says
what an operable gateway shows. Trials:

1. hung upstream, clients gone: an upstream that never answers, a small upstream pool; clients
   send JSON requests and streams and leave after 1 s. Upstream connections still open after
   they left, then (with the upstream answering again) whether a new request and /health
   answer. 1c: JSON requests whose client left while a slow upstream was answering: did the
   generation run to the end, was it stored.
2. SIGTERM with open streams (paced upstream): short streams that fit in the drain and long
   ones that do not; how each ended, what was stored.
3. slowloris: connections that send nothing or one byte a second, then normal requests and
   /health: how many answered and how fast, what the log said.
4. storage failure: writes fail (SQLite: RLIMIT_FSIZE on the gateway, i.e. "file too large",
   what a full disk looks like to SQLite, and it works as root). One ``openai`` SDK call with
   default retries, then one stream: upstream generations used, what the client got, /ready.
5. upstream flapping: 503 for the first two requests of each burst; then the upstream down.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import itertools
import os
import statistics
import sys
import time
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import _harness
import httpx
from _fault_more import trial_flapping, trial_storage
from _faults import (
    BODY,
    QUICK,
    FaultUpstream,
    Gateway,
    Plan,
    Row,
    ending,
    error_codes,
    hold,
    http_post,
    ms,
    sse_types,
    status_of,
    temp_dir,
    timed,
)


# 1 ------------------------------------------------------------------------------------------
async def trial_hung(opts: argparse.Namespace) -> list[Row]:
    plans = {"slow": Plan(delay=2.0), "hang": Plan(hang=True), "ok": Plan()}
    mode = {"now": "slow"}
    env = {"RESPGATE_UPSTREAM_MAX_CONNECTIONS": str(opts.pool)}
    env["RESPGATE_UPSTREAM_CONNECT_TIMEOUT"] = str(opts.connect_timeout)
    n, k = opts.clients, opts.slow_clients
    with (
        FaultUpstream(lambda i, r: plans[mode["now"]]) as up,
        Gateway(up.url, temp_dir("hung"), *QUICK, env=env) as gw,
    ):
        json_req = http_post("/v1/responses", BODY)
        sse_req = http_post("/v1/responses", BODY | {"stream": True})
        # 1c first (the hung part may leave the pool unusable): JSON clients leave at 0.5 s
        # while the upstream takes 2 s to answer.
        await asyncio.gather(*(hold(gw.port, json_req, 0.5) for _ in range(k)))
        await asyncio.sleep(3.0)
        slow_answered, slow_cut, stored = up.answered, up.cut, gw.stored()
        mode["now"] = "hang"
        leaving = [hold(gw.port, json_req, 1.0) for _ in range(n)]
        leaving += [hold(gw.port, sse_req, 1.0) for _ in range(n)]
        await asyncio.gather(*leaving)
        held = up.open
        await asyncio.sleep(2.0)
        still = up.open
        mode["now"] = "ok"  # the upstream answers again: is the gateway usable?
        async with httpx.AsyncClient(base_url=gw.base, timeout=60) as client:
            health, t_health = await timed(status_of(client, "GET", "/health"))
            fresh, t_fresh = await timed(status_of(client, "POST", "/v1/responses", json=BODY))
    return [
        (f"upstream conns open when {2 * n} clients left (pool {opts.pool})", str(held), "≤ pool"),
        ("upstream conns still open 2 s after they left", str(still), "0"),
        ("new request once the upstream answers again", f"{fresh} in {ms(t_fresh)}", "200, fast"),
        ("/health meanwhile", f"{health} in {ms(t_health)}", "200"),
        (f"1c: {k} JSON clients left at 0.5 s, upstream answers at 2 s: generations run to "
         "the end / cancelled", f"{slow_answered} / {slow_cut}", f"0 / {k}"),
        ("1c: of those, responses stored", str(stored), "0"),
    ]  # fmt: skip


# 2 ------------------------------------------------------------------------------------------
async def trial_sigterm(opts: argparse.Namespace) -> list[Row]:
    pace = opts.pace
    with (
        FaultUpstream(lambda i, r: Plan(events=int(r["input"][2:]), pace=pace)) as up,
        Gateway(up.url, temp_dir("drain"), "--drain-timeout", str(opts.drain)) as gw,
    ):
        half = opts.streams // 2
        short, long = max(1, int(1.0 / pace)), opts.events
        limits = httpx.Limits(max_connections=opts.streams + 4)
        async with httpx.AsyncClient(base_url=gw.base, timeout=120, limits=limits) as client:

            async def stream(events: int) -> tuple[str, float, list[str]]:
                body = {"model": "mock", "input": f"n={events}", "stream": True}
                text = ""
                try:
                    async with client.stream("POST", "/v1/responses", json=body) as resp:
                        async for chunk in resp.aiter_text():
                            text += chunk
                except httpx.HTTPError:
                    pass
                return ending(sse_types(text)), time.monotonic(), error_codes(text)

            tasks = [asyncio.ensure_future(stream(short)) for _ in range(half)]
            tasks += [asyncio.ensure_future(stream(long)) for _ in range(opts.streams - half)]
            await asyncio.sleep(1.0)
            gw.signal()
            t_term = time.monotonic()
            ends = await asyncio.gather(*tasks)
        exit_code = await asyncio.to_thread(gw.wait, opts.drain + 30)
        t_exit = time.monotonic() - t_term
    stored = gw.stored()

    def tally(part: list[tuple[str, float, list[str]]]) -> str:
        kinds = [kind for kind, _, _ in part]
        last = max(t for _, t, _ in part) - t_term
        counts = " / ".join(str(kinds.count(k)) for k in ("completed", "failed", "cut"))
        codes = sorted({code for _, _, seen in part for code in seen})
        said = f", error codes {', '.join(codes)}" if codes else ""
        return f"{counts} (last ended {last:.1f} s after SIGTERM{said})"

    long_s = long * pace
    return [
        (f"{half} short streams ({short * pace:.1f} s): completed / error+failed / cut",
         tally(ends[:half]), f"{half} / 0 / 0"),
        (f"{opts.streams - half} long streams ({long_s:.0f} s, drain {opts.drain:g} s): "
         "completed / error+failed / cut", tally(ends[half:]),
         f"0 / {opts.streams - half} / 0, at the drain"),
        ("responses stored", str(stored), f"≥ {half} (the completed ones)"),
        ("gateway exit after SIGTERM", f"{t_exit:.1f} s, status {exit_code}", "≈ drain, 0"),
    ]  # fmt: skip


# 3 ------------------------------------------------------------------------------------------
async def trial_slowloris(opts: argparse.Namespace) -> list[Row]:
    with (
        FaultUpstream(lambda i, r: Plan()) as up,
        Gateway(up.url, temp_dir("loris"), *QUICK, nofile=opts.nofile or None) as gw,
    ):
        await asyncio.sleep(1.0)  # the start-up lines are in
        gw_mark = len(gw.lines)
        closed = {"n": 0}
        head = b"POST /v1/responses HTTP/1.1\r\nhost: x\r\ncontent-length: 100\r\n\r\n"

        async def slow_client(trickle: bool) -> bool:
            try:
                reader, writer = await asyncio.open_connection("127.0.0.1", gw.port)
            except OSError:
                return False
            with contextlib.suppress(TimeoutError, OSError):
                async with asyncio.timeout(opts.slow_seconds):
                    for i in itertools.count():
                        if trickle:
                            writer.write(head[i % len(head) : i % len(head) + 1])
                        if await _eof_within(reader, 1.0):
                            closed["n"] += 1
                            break
            writer.close()
            return True

        slow = [asyncio.ensure_future(slow_client(i % 2 == 1)) for i in range(opts.slow)]
        await asyncio.sleep(opts.slow_open)
        limits = httpx.Limits(max_connections=32, max_keepalive_connections=0)
        timeout = httpx.Timeout(opts.client_timeout)
        async with httpx.AsyncClient(base_url=gw.base, timeout=timeout, limits=limits) as client:
            health, t_health = await timed(status_of(client, "GET", "/health"))
            normal = (
                timed(status_of(client, "POST", "/v1/responses", json=BODY))
                for _ in range(opts.normal)
            )
            results = await asyncio.gather(*normal)
        opened = sum(await asyncio.gather(*slow))
        log = gw.log_since(gw_mark)
    ok = [t for status, t in results if status == "200"]
    times = f"p50 {ms(statistics.median(ok))}, max {ms(max(ok))}" if ok else "-"
    errors = sorted({s for s, _ in results if s != "200"})
    sample = "; ".join(line[-90:] for line in log[:2]) or "nothing"
    return [
        (f"slow connections opened (of {opts.slow}; half idle, half 1 byte/s; gateway "
         f"open-file limit {opts.nofile or 'inherited'})", str(opened), "-"),
        (f"normal requests answered 200 (of {opts.normal})",
         f"{len(ok)}" + (f" (others: {', '.join(errors)})" if errors else ""), f"{opts.normal}"),
        ("their time to answer", times, "as without the slow clients"),
        ("/health", f"{health} in {ms(t_health)}", "200"),
        (f"slow connections closed by the gateway within {opts.slow_seconds:g} s",
         str(closed["n"]), "most (header/idle timeouts)"),
        (f"gateway log lines meanwhile ({len(log)})", sample, "a line per timeout/refusal"),
    ]  # fmt: skip


async def _eof_within(reader: asyncio.StreamReader, seconds: float) -> bool:
    """True when the peer closed (or answered and closed) within ``seconds``."""
    with contextlib.suppress(TimeoutError):
        async with asyncio.timeout(seconds):
            while await reader.read(65536):
                pass
            return True
    return False


TRIALS: dict[int, tuple[str, Callable[[argparse.Namespace], Coroutine[Any, Any, list[Row]]]]] = {
    1: ("hung upstream, clients gone", trial_hung),
    2: ("SIGTERM with open streams", trial_sigterm),
    3: ("slowloris", trial_slowloris),
    4: ("storage fails", trial_storage),
    5: ("upstream flapping, then down", trial_flapping),
}


def table(results: dict[int, list[Row]]) -> str:
    lines = ["| # | trial | figure | this run | good |", "|---|---|---|---|---|"]
    for number, rows in results.items():
        for figure, value, good in rows:
            value = value.replace("|", "\\|")
            lines.append(f"| {number} | {TRIALS[number][0]} | {figure} | {value} | {good} |")
    return "\n".join(lines)


PG = "postgresql://postgres@127.0.0.1:5432/postgres"


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--ref", help="git ref to measure (git archive); default: the work tree")
    ap.add_argument("--only", default="", help="comma list of trial numbers (default: all)")
    add = ap.add_argument
    add("--pool", type=int, default=16, help="1: upstream_max_connections")
    add("--connect-timeout", type=float, default=5.0, help="1: upstream_connect_timeout (s)")
    add("--clients", type=int, default=64, help="1: JSON clients, and as many stream clients")
    add("--slow-clients", type=int, default=5, help="1c: clients leaving a slow generation")
    add("--streams", type=int, default=32, help="2: open streams at SIGTERM (half short)")
    add("--events", type=int, default=200, help="2: deltas of a long stream")
    add("--pace", type=float, default=0.05, help="2: seconds between stream events")
    add("--drain", type=float, default=5.0, help="2: the gateway's --drain-timeout (s)")
    add("--slow", type=int, default=1100, help="3: slowloris connections")
    add("--slow-open", type=float, default=2.0, help="3: s to open them before normal traffic")
    add("--slow-seconds", type=float, default=15.0, help="3: how long they stay")
    add("--normal", type=int, default=20, help="3: normal requests among them")
    add("--client-timeout", type=float, default=10.0, help="3: normal requests' timeout (s)")
    add(
        "--nofile",
        type=int,
        default=1024,
        help="3: the gateway's soft open-file limit "
        "(1024: the usual default, e.g. systemd's; 0: this shell's)",
    )
    add(
        "--postgres",
        default=os.environ.get("RESPGATE_FAULT_POSTGRES", PG),
        help="4: admin URL "
        "of a PostgreSQL server where the trial may create a database ('none': SQLite only)",
    )
    add("--bursts", type=int, default=5, help="5: bursts of 10 requests (5 JSON, 5 streams)")
    return ap.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    opts = parse_args(argv)
    wanted = [int(n) for n in opts.only.split(",") if n.strip()] or sorted(TRIALS)
    source = _harness.use_ref(opts.ref)
    print(f"# fault trials: {source['source']} at {source['head']}", file=sys.stderr)
    results: dict[int, list[Row]] = {}
    for number in wanted:
        name, trial = TRIALS[number]
        print(f"trial {number}: {name} ...", file=sys.stderr, flush=True)
        t0 = time.monotonic()
        try:
            results[number] = asyncio.run(trial(opts))
        except Exception as exc:  # one broken trial must not hide the others' figures
            results[number] = [("trial failed", f"{type(exc).__name__}: {exc}"[:200], "-")]
        print(f"  done in {time.monotonic() - t0:.0f} s", file=sys.stderr, flush=True)
    print(f"\nfault trials at `{source['head']}` ({source['source']})\n")
    print(table(results))
    return 0


if __name__ == "__main__":
    sys.exit(main())
