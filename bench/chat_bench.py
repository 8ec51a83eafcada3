"""What the ``chat`` upstream kind costs over the ``responses`` kind, on the same mock, in one run.

    python bench/chat_bench.py                # full run: 3 rounds x 3 s per cell, ~4 min
    python bench/chat_bench.py --quick        # 1 round x 1.5 s, ~1 min
    python bench/chat_bench.py --ref HEAD     # measure a commit (git archive), not the work tree
    python bench/chat_bench.py --part micro   # the in-process translation timings alone, ~20 s
    python bench/chat_bench.py --part inproc  # both kinds' apps in-process, paired A/B, ~30 s
    python bench/chat_bench.py --part profile # cProfile of both kinds in-process, ~30 s

One ``shared/bench/mock_upstream.py`` process serves both ``/v1/responses`` and
``/v1/chat/completions``. Two gateways (``python -m app.cli serve``, i.e. ``respgate serve``) run
against it: one with ``--upstream-kind responses``, one with ``--upstream-kind chat``. For each
scenario (JSON and SSE, c=1 and c=32) and each round, ``shared/bench/load.py`` hits, back to back
(the order is reversed every other round):

    direct-responses     the mock's POST /v1/responses
    gw-responses-kind    gateway (kind responses): POST /v1/responses -> mock /v1/responses
    gw-chat-kind         gateway (kind chat):      POST /v1/responses -> mock /v1/chat/completions
    direct-chat          the mock's POST /v1/chat/completions
    gw-chat-passthrough  gateway (kind chat):      POST /v1/chat/completions, forwarded unchanged

Reported (medians over the rounds): req/s, p50/p99, TTFB p50 (SSE), the gateway's CPU per
request from /proc (and the mock's), the machine's background CPU, and the key figure: the chat
kind minus the responses kind (added p50 / TTFB in µs, ratio, CPU µs/req), as the median of the
per-round paired differences. ``--part micro`` (also part of the default ``all``) times the pure
translation functions in-process with timeit on the mock's own payloads: ``to_chat_request``,
``to_response``, ``ChatStreamTranslator.feed`` over the whole chunk stream, and the SSE parsing
chain of each kind, so the README can say how much of the difference is translation.

Request bodies: ``{"model":"m","input":"hi"}`` (store defaults to true: every response is written
to the gateway's SQLite store, in both kinds) and, for the direct and passthrough chat calls,
``{"model":"m","messages":[{"role":"user","content":"hi"}]}``; the streaming chat body also asks
for ``stream_options.include_usage`` as the chat kind does upstream, so ``direct-chat`` SSE is
exactly the upstream leg of ``gw-chat-kind`` SSE. Raw results go to ``--out`` (JSON).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import timeit
import urllib.request
from collections.abc import AsyncIterator, Callable, Sequence
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import _harness
from _harness import (
    DEFAULT_SHARED_BENCH,
    Server,
    fmt,
    free_port,
    machine_info,
    median_of,
    mock_server,
    pin_layout,
    running,
    serve_command,
    summarize,
    system_busy_seconds,
    use_ref,
)

RESPONSES_BODY: dict[str, Any] = {"model": "m", "input": "hi"}
CHAT_BODY: dict[str, Any] = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}
# What the chat kind sends upstream when streaming (ChatOptions.stream_usage defaults to true).
CHAT_STREAM_BODY: dict[str, Any] = {**CHAT_BODY, "stream_options": {"include_usage": True}}

# (name, server key, path, api); api picks the body and what a good answer must contain.
TARGETS: tuple[tuple[str, str, str, str], ...] = (
    ("direct-responses", "mock", "/v1/responses", "responses"),
    ("gw-responses-kind", "gw_responses", "/v1/responses", "responses"),
    ("gw-chat-kind", "gw_chat", "/v1/responses", "responses"),
    ("direct-chat", "mock", "/v1/chat/completions", "chat"),
    ("gw-chat-passthrough", "gw_chat", "/v1/chat/completions", "chat"),
)
EXPECT = {
    ("responses", "json"): '"status":"completed"',
    ("responses", "sse"): "response.completed",
    ("chat", "json"): '"finish_reason":"stop"',
    ("chat", "sse"): "[DONE]",
}
SCENARIOS = (("json", 1), ("json", 32), ("sse", 1), ("sse", 32))


def body_for(api: str, mode: str) -> dict[str, Any]:
    if api == "responses":
        return RESPONSES_BODY
    return CHAT_STREAM_BODY if mode == "sse" else CHAT_BODY


# --------------------------------------------------------------------------- load runs


def load_run(
    shared: Path,
    url: str,
    body: dict[str, Any],
    *,
    concurrency: int,
    duration: float,
    stream: bool,
    expect: str,
    measured: Server,
    servers: dict[str, Server],
    cpus: str | None = None,
    warmup: int | None = None,
) -> dict[str, Any]:
    """One load.py run. Like ``_harness.run_load`` (same accounting), but with the ``--expect``
    string chosen per API (chat streams end in ``[DONE]``, not ``response.completed``) and the
    CPU of every server of ours recorded, so a gateway run also shows the mock's CPU."""
    if warmup is None:
        # load.py's warm-up requests per connection: 20 as in _harness at c=1, 5 at c=32 (640
        # warm-up streams through a gateway would take seconds per run).
        warmup = 20 if concurrency == 1 else 5
    cmd = [
        sys.executable,
        str(shared / "load.py"),
        "--url",
        url,
        "--body",
        json.dumps(body, separators=(",", ":")),
        "-c",
        str(concurrency),
        "-d",
        str(duration),
        "--warmup",
        str(warmup),
        "--expect",
        expect,
    ]
    if stream:
        cmd.append("--stream")
    if cpus is not None and shutil.which("taskset"):
        cmd = ["taskset", "-c", cpus, *cmd]
    cpu0 = {name: s.cpu() for name, s in servers.items()}
    main0 = measured.main_thread_cpu()
    kids0 = os.times()
    sys0 = system_busy_seconds()
    wall0 = time.monotonic()
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=duration + 120)
    wall = time.monotonic() - wall0
    sys1 = system_busy_seconds()
    kids1 = os.times()
    main1 = measured.main_thread_cpu()
    cpu1 = {name: s.cpu() for name, s in servers.items()}
    if out.returncode != 0:
        raise RuntimeError(f"load.py failed ({out.returncode}): {out.stderr[-2000:]}")
    result: dict[str, Any] = json.loads(out.stdout.strip().splitlines()[-1])
    loadgen = (kids1.children_user - kids0.children_user) + (
        kids1.children_system - kids0.children_system
    )
    ours = sum(cpu1[n] - cpu0[n] for n in servers)
    result["bg_cpu_pct"] = round(max((sys1 - sys0) - ours - loadgen, 0.0) / wall * 100, 1)
    served = max(result["requests"] + warmup * concurrency, 1)
    per_req = {n: round((cpu1[n] - cpu0[n]) / served * 1e6, 1) for n in servers}
    result["cpu_us_per_req"] = per_req
    measured_name = next(n for n, s in servers.items() if s is measured)
    total = cpu1[measured_name] - cpu0[measured_name]
    result["server_cpu_us_per_req"] = per_req[measured_name]
    result["server_other_threads_cpu_us_per_req"] = round(
        max(total - (main1 - main0), 0.0) / served * 1e6, 1
    )
    result["mock_cpu_us_per_req"] = per_req["mock"]
    result["loadgen_cpu_us_per_req"] = round(loadgen / served * 1e6, 1)
    if result.get("errors"):
        print(
            f"  !! {result['errors']} errors on {url}: {result.get('first_error')}",
            file=sys.stderr,
        )
    return result


def paired(
    runs_a: list[dict[str, Any]], runs_b: list[dict[str, Any]], get: Callable[[dict], Any]
) -> dict[str, Any] | None:
    """Per-round a - b and a / b (rounds were run back to back): median, min, max."""
    diffs, ratios = [], []
    for a, b in zip(runs_a, runs_b, strict=False):
        va, vb = get(a), get(b)
        if isinstance(va, int | float) and isinstance(vb, int | float):
            diffs.append(va - vb)
            if vb:
                ratios.append(va / vb)
    if not diffs:
        return None
    return {
        "diff": statistics.median(diffs),
        "diff_range": (min(diffs), max(diffs)),
        "ratio": statistics.median(ratios) if ratios else None,
    }


def p50(run: dict[str, Any]) -> Any:
    return run["latency_ms"]["p50"]


def ttfb50(run: dict[str, Any]) -> Any:
    return run["ttfb_ms"]["p50"]


def summarize_cell(raw: dict[str, list[dict[str, Any]]], mode: str, conc: int) -> dict[str, Any]:
    """One scenario: each target's medians, then the chat kind against the responses kind."""

    def runs_of(name: str) -> list[dict[str, Any]]:
        return raw[f"{name}-{mode}-c{conc}"]

    def added(gw: str, direct: str, get: Callable[[dict], Any]) -> dict[str, Any] | None:
        """Per round: a gateway minus its own direct endpoint."""
        diffs = [get(a) - get(b) for a, b in zip(runs_of(gw), runs_of(direct), strict=False)]
        if not diffs:
            return None
        return {"diff": statistics.median(diffs), "diff_range": (min(diffs), max(diffs))}

    cell: dict[str, Any] = {}
    for name, *_ in TARGETS:
        runs = runs_of(name)
        cell[name] = {
            **summarize(runs),
            "mock_cpu_us_per_req": median_of(runs, "mock_cpu_us_per_req"),
        }
    chat, resp = runs_of("gw-chat-kind"), runs_of("gw-responses-kind")
    cell["chat_vs_responses"] = {
        "p50_ms": paired(chat, resp, p50),
        "ttfb_p50_ms": paired(chat, resp, ttfb50),
        "rps": paired(chat, resp, lambda r: r["rps"]),
        "cpu_us_per_req": paired(chat, resp, lambda r: r["server_cpu_us_per_req"]),
        "mock_cpu_us_per_req": paired(chat, resp, lambda r: r["mock_cpu_us_per_req"]),
        "added_p50_ms_responses_kind": added("gw-responses-kind", "direct-responses", p50),
        "added_p50_ms_chat_kind": added("gw-chat-kind", "direct-chat", p50),
        "added_ttfb_ms_responses_kind": added("gw-responses-kind", "direct-responses", ttfb50),
        "added_ttfb_ms_chat_kind": added("gw-chat-kind", "direct-chat", ttfb50),
        "added_p50_ms_passthrough": added("gw-chat-passthrough", "direct-chat", p50),
        "direct_chat_vs_direct_responses_p50_ms": paired(
            runs_of("direct-chat"), runs_of("direct-responses"), p50
        ),
    }
    return cell


def run_load_part(args: argparse.Namespace, shared: Path) -> dict[str, Any]:
    duration = args.duration or (1.5 if args.quick else 3.0)
    rounds = args.rounds or (1 if args.quick else 3)
    warm = 0.5 if args.quick else 1.0
    data_root = Path(tempfile.mkdtemp(prefix="respgate-chat-bench-"))
    mock = mock_server(shared, free_port(), None)
    if args.deltas is not None:
        mock.cmd += ["--deltas", str(args.deltas)]

    def gateway(name: str, kind: str) -> Server:
        port = free_port()
        cmd = serve_command(port, mock.base, str(data_root / name), "--upstream-kind", kind)
        return Server(name, cmd, port)

    servers = {
        "mock": mock,
        "gw_responses": gateway("gw_responses", "responses"),
        "gw_chat": gateway("gw_chat", "chat"),
    }
    info = machine_info()
    print(
        f"# chat bench: {info.get('cpus')} CPUs ({info.get('cpu_model', '?')}), loadavg "
        f"{' '.join(info.get('loadavg', []))}, {rounds} round(s) x {duration:g} s, "
        f"pin={'on' if args.pin else 'off'}, mock deltas "
        f"{args.deltas if args.deltas is not None else 'default (20)'}",
        flush=True,
    )
    raw: dict[str, list[dict[str, Any]]] = {}
    payloads: dict[str, bytes] = {}
    started = time.monotonic()
    try:
        with running(list(servers.values())):
            payloads = fetch_payloads(mock.base)
            for _name, key, path, api in TARGETS:
                for mode in ("json", "sse"):
                    load_run(
                        shared,
                        servers[key].base + path,
                        body_for(api, mode),
                        concurrency=32,
                        duration=warm,
                        stream=mode == "sse",
                        expect=EXPECT[(api, mode)],
                        measured=servers[key],
                        servers=servers,
                    )
            for rnd in range(rounds):
                for mode, conc in SCENARIOS:
                    client_cpus = None
                    if args.pin:
                        server_cpus, client_cpus = pin_layout(conc)
                        servers["gw_responses"].pin(server_cpus)
                        servers["gw_chat"].pin(server_cpus)
                        mock.pin(client_cpus)
                    order = TARGETS if rnd % 2 == 0 else tuple(reversed(TARGETS))
                    for name, key, path, api in order:
                        res = load_run(
                            shared,
                            servers[key].base + path,
                            body_for(api, mode),
                            concurrency=conc,
                            duration=duration,
                            stream=mode == "sse",
                            expect=EXPECT[(api, mode)],
                            measured=servers[key],
                            servers=servers,
                            cpus=client_cpus,
                        )
                        res["round"] = rnd
                        raw.setdefault(f"{name}-{mode}-c{conc}", []).append(res)
                        print(
                            f"  round {rnd + 1}/{rounds} {mode.upper():4s} c={conc:<2d} "
                            f"{name:20s} {res['rps']:>8,.0f} req/s  "
                            f"p50 {res['latency_ms']['p50']:7.3f} ms  "
                            f"ttfb {res['ttfb_ms']['p50']:7.3f} ms  "
                            f"CPU {res['server_cpu_us_per_req']:6.0f} µs/req "
                            f"(mock {res['mock_cpu_us_per_req']:4.0f})  "
                            f"bg {res['bg_cpu_pct']:5.1f}%",
                            flush=True,
                        )
            logs = {name: s.tail(20) for name, s in servers.items()}
    finally:
        shutil.rmtree(data_root, ignore_errors=True)
    elapsed = time.monotonic() - started

    summary = {f"{mode}-c{conc}": summarize_cell(raw, mode, conc) for mode, conc in SCENARIOS}
    return {
        "machine": info,
        "loadavg_end": machine_info().get("loadavg"),
        "config": {
            "duration_s": duration,
            "rounds": rounds,
            "pin": args.pin,
            "deltas": args.deltas,
            "bodies": {
                "responses": RESPONSES_BODY,
                "chat": CHAT_BODY,
                "chat_sse": CHAT_STREAM_BODY,
            },
            "commands": {name: s.cmd for name, s in servers.items()},
        },
        "summary": summary,
        "raw": raw,
        "logs": logs,
        "payload_sizes": {k: len(v) for k, v in payloads.items()},
        "payloads": {k: v.decode() for k, v in payloads.items()},
        "elapsed_s": round(elapsed, 1),
    }


def load_tables(result: dict[str, Any]) -> str:
    lines = [
        "| scenario | target | req/s | req/s vs its direct | p50 ms | p99 ms | TTFB p50 ms "
        "| gateway CPU µs/req (threads) | mock CPU µs/req | bg CPU % (max) |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    direct_of = {
        "direct-responses": "direct-responses",
        "gw-responses-kind": "direct-responses",
        "gw-chat-kind": "direct-chat",
        "direct-chat": "direct-chat",
        "gw-chat-passthrough": "direct-chat",
    }
    for key, cell in result["summary"].items():
        mode, conc = key.split("-c")
        for name, *_ in TARGETS:
            s = cell[name]
            d = cell[direct_of[name]]
            ratio = s["rps"] / d["rps"] if s["rps"] and d["rps"] else None
            gw_cpu = (
                "-"
                if name.startswith("direct")
                else f"{fmt(s['server_cpu_us_per_req'], 0)} "
                f"({fmt(s['server_other_threads_cpu_us_per_req'], 0)})"
            )
            lines.append(
                f"| {mode.upper()} c={conc} | {name} | {fmt(s['rps'])} | {fmt(ratio)} "
                f"| {fmt(s['p50_ms'])} | {fmt(s['p99_ms'])} "
                f"| {fmt(s['ttfb_p50_ms']) if mode == 'sse' else '-'} | {gw_cpu} "
                f"| {fmt(s['mock_cpu_us_per_req'], 0)} | {fmt(s['bg_cpu_pct_max'], 0)} |"
            )
    lines += [
        "",
        "Chat kind vs responses kind (median of per-round paired differences; range in brackets):",
        "",
        "| scenario | Δ p50 µs | p50 ratio | Δ TTFB p50 µs | req/s ratio | Δ gateway CPU µs/req "
        "| CPU ratio | added p50 µs over its direct: responses kind / chat kind / passthrough "
        "| direct chat - direct responses p50 µs |",
        "|---|---|---|---|---|---|---|---|---|",
    ]

    def us(entry: dict[str, Any] | None, rng: bool = True) -> str:
        if entry is None:
            return "-"
        text = f"{entry['diff'] * 1000:+.0f}"
        if rng:
            lo, hi = entry["diff_range"]
            text += f" ({lo * 1000:+.0f}..{hi * 1000:+.0f})"
        return text

    for key, cell in result["summary"].items():
        mode, conc = key.split("-c")
        k = cell["chat_vs_responses"]
        cpu = k["cpu_us_per_req"]
        cpu_text = "-"
        if cpu is not None:
            lo, hi = cpu["diff_range"]
            cpu_text = f"{cpu['diff']:+.0f} ({lo:+.0f}..{hi:+.0f})"
        lines.append(
            f"| {mode.upper()} c={conc} | {us(k['p50_ms'])} | {fmt(k['p50_ms']['ratio'])} "
            f"| {us(k['ttfb_p50_ms']) if mode == 'sse' else '-'} | {fmt(k['rps']['ratio'])} "
            f"| {cpu_text} | {fmt(cpu['ratio'] if cpu else None)} "
            f"| {us(k['added_p50_ms_responses_kind'], False)} / "
            f"{us(k['added_p50_ms_chat_kind'], False)} / "
            f"{us(k['added_p50_ms_passthrough'], False)} "
            f"| {us(k['direct_chat_vs_direct_responses_p50_ms'], False)} |"
        )
    return "\n".join(lines)


# --------------------------------------------------------------------------- payloads


def _post(base: str, path: str, body: dict[str, Any]) -> bytes:
    req = urllib.request.Request(
        base + path,
        data=json.dumps(body).encode(),
        headers={"content-type": "application/json"},
        method="POST",
    )
    with urllib.request.urlopen(req, timeout=10) as resp:
        data: bytes = resp.read()
        return data


def fetch_payloads(base: str) -> dict[str, bytes]:
    """The mock's answers, byte for byte, for the in-process timings: the chat requests are
    the ones the chat kind itself builds from the Responses body."""
    from app.upstream.chat_request import ChatOptions, to_chat_request

    options = ChatOptions()
    return {
        "responses_json": _post(base, "/v1/responses", RESPONSES_BODY),
        "responses_sse": _post(base, "/v1/responses", {**RESPONSES_BODY, "stream": True}),
        "chat_json": _post(
            base, "/v1/chat/completions", to_chat_request(RESPONSES_BODY, options, stream=False)
        ),
        "chat_sse": _post(
            base, "/v1/chat/completions", to_chat_request(RESPONSES_BODY, options, stream=True)
        ),
    }


def start_mock_for_payloads(shared: Path, deltas: int | None) -> dict[str, bytes]:
    mock = mock_server(shared, free_port(), None)
    if deltas is not None:
        mock.cmd += ["--deltas", str(deltas)]
    with running([mock]):
        return fetch_payloads(mock.base)


# --------------------------------------------------------------------------- micro


def sse_data(stream: bytes) -> list[bytes]:
    return [line[6:] for line in stream.split(b"\n") if line.startswith(b"data: ")]


def time_us(fn: Callable[[], Any], *, number: int, repeat: int) -> dict[str, float]:
    """µs per call: best and median of ``repeat`` timeit runs of ``number`` calls."""
    times = timeit.Timer(fn).repeat(repeat=repeat, number=number)
    per = [t / number * 1e6 for t in times]
    return {"best_us": round(min(per), 2), "median_us": round(statistics.median(per), 2)}


def time_async_us(make: Callable[[], Any], *, number: int, repeat: int) -> dict[str, float]:
    """Like ``time_us`` for a coroutine factory, all inside one event loop."""

    async def measure() -> list[float]:
        out = []
        for _ in range(repeat):
            t0 = timeit.default_timer()
            for _ in range(number):
                await make()
            out.append((timeit.default_timer() - t0) / number * 1e6)
        return out

    per = asyncio.run(measure())
    return {"best_us": round(min(per), 2), "median_us": round(statistics.median(per), 2)}


def run_micro(payloads: dict[str, bytes], quick: bool) -> dict[str, Any]:
    import orjson

    from app.protocol.events import STREAM_DONE
    from app.upstream import sse
    from app.upstream.chat_request import ChatOptions, to_chat_request
    from app.upstream.chat_response import ChatStreamTranslator, to_response
    from app.upstream.sse import parse_sse_lines

    def split_lines(chunks: AsyncIterator[bytes]) -> AsyncIterator[bytes]:
        """Lines for a ``--ref`` from before issue 19 (its parse_sse_lines took lines); since,
        parse_sse_lines takes the network chunks themselves."""
        split = getattr(sse, "split_lines", None)
        return split(chunks) if split is not None else chunks

    number, repeat = (2000, 5) if quick else (5000, 7)
    options = ChatOptions()
    body = dict(RESPONSES_BODY)
    completion = orjson.loads(payloads["chat_json"])
    chat_frames = [f for f in sse_data(payloads["chat_sse"]) if f.strip() != b"[DONE]"]
    chunks = [orjson.loads(f) for f in chat_frames]
    responses_frames = sse_data(payloads["responses_sse"])

    def translate_stream() -> list[dict[str, Any]]:
        translator = ChatStreamTranslator(body)
        events: list[dict[str, Any]] = []
        for chunk in chunks:
            events.extend(translator.feed(chunk))
        events.extend(translator.finish())
        return events

    translated = translate_stream()

    async def one_chunk(data: bytes) -> AsyncIterator[bytes]:
        yield data

    async def parse_responses() -> int:
        n = 0
        async for _ in parse_sse_lines(split_lines(one_chunk(payloads["responses_sse"]))):
            n += 1
        return n

    async def parse_chat(translate: bool) -> int:
        lines = split_lines(one_chunk(payloads["chat_sse"]))
        translator = ChatStreamTranslator(body)
        n = 0
        async for chunk in parse_sse_lines(lines):
            if not translate:
                n += 1
                continue
            if chunk.get("type") == STREAM_DONE or translator.done:
                break
            n += len(translator.feed(chunk))
        if translate:
            n += len(translator.finish())
        return n

    rows: dict[str, Any] = {
        "to_chat_request (stream=false)": time_us(
            lambda: to_chat_request(body, options, stream=False), number=number, repeat=repeat
        ),
        "to_chat_request (stream=true)": time_us(
            lambda: to_chat_request(body, options, stream=True), number=number, repeat=repeat
        ),
        "to_response (chat.completion -> Response)": time_us(
            lambda: to_response(completion, body), number=number, repeat=repeat
        ),
        f"ChatStreamTranslator: new + feed x{len(chunks)} + finish": time_us(
            translate_stream, number=number // 5, repeat=repeat
        ),
        "orjson.loads, chat.completion JSON": time_us(
            lambda: orjson.loads(payloads["chat_json"]), number=number, repeat=repeat
        ),
        "orjson.loads, Responses JSON (responses kind)": time_us(
            lambda: orjson.loads(payloads["responses_json"]), number=number, repeat=repeat
        ),
        f"orjson.loads x{len(chat_frames)} chat chunks": time_us(
            lambda: [orjson.loads(f) for f in chat_frames], number=number // 5, repeat=repeat
        ),
        f"orjson.loads x{len(responses_frames)} Responses events": time_us(
            lambda: [orjson.loads(f) for f in responses_frames],
            number=number // 5,
            repeat=repeat,
        ),
        "SSE chain, responses kind: parse_sse_lines": time_async_us(
            parse_responses, number=number // 10, repeat=repeat
        ),
        "SSE chain, chat kind, parse only: parse_sse_lines": time_async_us(
            lambda: parse_chat(False), number=number // 10, repeat=repeat
        ),
        "SSE chain, chat kind, parse + translate (as UpstreamEvents does)": time_async_us(
            lambda: parse_chat(True), number=number // 10, repeat=repeat
        ),
    }
    return {
        "number": number,
        "repeat": repeat,
        "chat_chunks": len(chunks),
        "responses_events": len(responses_frames),
        "translated_events": len(translated),
        "translated_event_types": [e["type"] for e in translated],
        "rows": rows,
    }


def micro_table(micro: dict[str, Any]) -> str:
    lines = [
        f"In-process, µs per call (timeit, best / median of {micro['repeat']}); "
        f"the chat stream has {micro['chat_chunks']} chunks and translates to "
        f"{micro['translated_events']} events (the responses mock sends "
        f"{micro['responses_events']}):",
        "",
        "| what | best µs | median µs |",
        "|---|---|---|",
    ]
    for name, row in micro["rows"].items():
        lines.append(f"| {name} | {row['best_us']:.1f} | {row['median_us']:.1f} |")
    return "\n".join(lines)


# --------------------------------------------------------------------------- in-process A/B


def run_inproc(shared: Path, deltas: int | None, quick: bool, profile: int = 0) -> dict[str, Any]:
    """Both kinds' real apps (``create_app``, lifespan, SQLite store, aiohttp upstream) in this
    process, called as ASGI callables one request at a time against the same mock process, in
    alternating batches: CPU (``time.process_time``: every thread of this process, so the
    store's writer thread too, but not the mock) and wall time per request. No uvicorn and no
    load generator in the way, so the paired difference is much steadier than over HTTP.

    ``profile`` > 0 (``--part profile``): no A/B; instead ``profile`` requests per kind and mode
    under cProfile, and the difference in own time per module and per function (µs/request
    under the profiler, which inflates call-heavy Python code several times: read the shares,
    not the absolute figures)."""
    mock = mock_server(shared, free_port(), None)
    if deltas is not None:
        mock.cmd += ["--deltas", str(deltas)]
    # SSE: more, smaller batches (a stream costs ~4x a JSON answer and is noisier).
    shape = {"json": (6, 40), "sse": (8, 15)} if quick else {"json": (20, 100), "sse": (40, 25)}
    if profile:
        shape = {"json": (0, 100), "sse": (0, 100)}
    with running([mock]):
        try:
            import uvloop

            runner = asyncio.Runner(loop_factory=uvloop.new_event_loop)
            loop_name = "uvloop"
        except ImportError:
            runner = asyncio.Runner()
            loop_name = "asyncio"
        with runner:
            result = runner.run(_inproc(mock.base, shape, profile))
    result["loop"] = loop_name
    return result


async def _inproc(
    mock_base: str, shape: dict[str, tuple[int, int]], profile: int
) -> dict[str, Any]:
    import contextlib

    import orjson
    from profile_gateway import call_asgi

    from app.main import create_app
    from app.settings import Settings
    from app.store.migrate import prepare_database

    data_root = Path(tempfile.mkdtemp(prefix="respgate-chat-inproc-"))
    apps: dict[str, Any] = {}
    out: dict[str, Any] = {"shape": shape, "modes": {}}
    try:
        async with contextlib.AsyncExitStack() as stack:
            for kind in ("responses", "chat"):
                settings = Settings(
                    upstream_url=mock_base,
                    upstream_kind=kind,
                    data_dir=data_root / kind,
                    log_level="warning",
                )
                settings.data_dir.mkdir(parents=True, exist_ok=True)
                await prepare_database(settings.resolved_database_url(), auto_migrate=True)
                app = create_app(settings)
                await stack.enter_async_context(app.router.lifespan_context(app))
                apps[kind] = app
            for mode in ("json", "sse"):
                batches, per_batch = shape[mode]
                body = orjson.dumps(
                    {**RESPONSES_BODY, "stream": True} if mode == "sse" else RESPONSES_BODY
                )
                expect = EXPECT[("responses", mode)].encode()
                for kind, app in apps.items():  # warm-up, and a check of the answer
                    for _ in range(per_batch):
                        status, answer = await call_asgi(app, "/v1/responses", body)
                    if status != 200 or expect not in answer:
                        raise RuntimeError(f"{kind} {mode}: HTTP {status}: {answer[-300:]!r}")
                if profile:
                    out["modes"][mode] = await _profile_kinds(apps, body, profile, call_asgi)
                    continue
                per: dict[str, dict[str, list[float]]] = {
                    k: {"cpu_us": [], "wall_us": []} for k in apps
                }
                for batch in range(batches):
                    kinds = list(apps) if batch % 2 == 0 else list(reversed(apps))
                    for kind in kinds:
                        app = apps[kind]
                        cpu0, wall0 = time.process_time(), time.perf_counter()
                        for _ in range(per_batch):
                            await call_asgi(app, "/v1/responses", body)
                        cpu1, wall1 = time.process_time(), time.perf_counter()
                        per[kind]["cpu_us"].append((cpu1 - cpu0) / per_batch * 1e6)
                        per[kind]["wall_us"].append((wall1 - wall0) / per_batch * 1e6)
                row: dict[str, Any] = {}
                for metric in ("cpu_us", "wall_us"):
                    chat, resp = per["chat"][metric], per["responses"][metric]
                    diffs = [c - r for c, r in zip(chat, resp, strict=True)]
                    row[metric] = {
                        "responses": statistics.median(resp),
                        "chat": statistics.median(chat),
                        "diff": statistics.median(diffs),
                        "diff_q1_q3": tuple(statistics.quantiles(diffs, n=4)[::2])
                        if len(diffs) > 1
                        else (diffs[0], diffs[0]),
                        "ratio": statistics.median(c / r for c, r in zip(chat, resp, strict=True)),
                    }
                row["raw"] = per
                out["modes"][mode] = row
    finally:
        shutil.rmtree(data_root, ignore_errors=True)
    return out


async def _profile_kinds(
    apps: dict[str, Any], body: bytes, n: int, call_asgi: Callable[..., Any]
) -> dict[str, Any]:
    import cProfile
    import pstats

    # Alternating slices, one profiler per kind (it accumulates across enable/disable), so that
    # a burst of load from elsewhere on the machine hits both kinds alike.
    profilers = {kind: cProfile.Profile() for kind in apps}
    slices = 10
    for part in range(slices):
        kinds = list(apps) if part % 2 == 0 else list(reversed(apps))
        for kind in kinds:
            app, prof = apps[kind], profilers[kind]
            prof.enable()
            for _ in range(n // slices):
                await call_asgi(app, "/v1/responses", body)
            prof.disable()
    n = n // slices * slices
    stats: dict[str, dict[str, tuple[float, float]]] = {}
    for kind, prof in profilers.items():
        raw = pstats.Stats(prof).stats  # type: ignore[attr-defined]
        stats[kind] = {
            _where(path, line, func): (calls / n, own / n * 1e6)
            for (path, line, func), (_, calls, own, _, _) in raw.items()
        }
    resp, chat = stats["responses"], stats["chat"]
    modules: dict[str, list[float]] = {}
    for key in set(resp) | set(chat):
        module = key.split(":", 1)[0]
        pair = modules.setdefault(module, [0.0, 0.0])
        pair[0] += resp.get(key, (0.0, 0.0))[1]
        pair[1] += chat.get(key, (0.0, 0.0))[1]
    functions = {
        key: (resp.get(key, (0.0, 0.0)), chat.get(key, (0.0, 0.0))) for key in set(resp) | set(chat)
    }
    top_functions = sorted(functions.items(), key=lambda kv: -abs(kv[1][1][1] - kv[1][0][1]))
    return {
        "requests": n,
        "own_us_total": {
            "responses": sum(v[1] for v in resp.values()),
            "chat": sum(v[1] for v in chat.values()),
        },
        "modules": sorted(modules.items(), key=lambda kv: -abs(kv[1][1] - kv[1][0]))[:15],
        "functions": [
            {"where": key, "calls": (r[0], c[0]), "own_us": (r[1], c[1])}
            for key, (r, c) in top_functions[:15]
        ],
    }


def _where(path: str, line: int, func: str) -> str:
    """``module:function``: app/... and site-packages/<package>/... shortened, stdlib by file."""
    text = path.replace(os.sep, "/")
    if "/site-packages/" in text:
        text = text.split("/site-packages/", 1)[1]
    elif "/app/" in text:
        text = "app/" + text.split("/app/", 1)[1]
    elif text.startswith("~") or text.startswith("<"):
        text = "builtins"
    else:
        text = "stdlib/" + text.rsplit("/", 1)[-1]
    return f"{text}:{func}:{line}"


def profile_table(inproc: dict[str, Any]) -> str:
    lines = []
    for mode, row in inproc["modes"].items():
        total = row["own_us_total"]
        lines += [
            f"cProfile, {mode.upper()}, {row['requests']} requests per kind: own time µs/request "
            f"under the profiler, responses kind {total['responses']:.0f}, chat kind "
            f"{total['chat']:.0f}",
            "",
            "| module | responses kind | chat kind | chat - responses |",
            "|---|---|---|---|",
        ]
        for module, (r, c) in row["modules"]:
            lines.append(f"| {module} | {r:.1f} | {c:.1f} | {c - r:+.1f} |")
        lines += [
            "",
            "| function | calls/req (resp -> chat) | own µs/req (resp -> chat) |",
            "|---|---|---|",
        ]
        for entry in row["functions"]:
            (rc, cc), (ro, co) = entry["calls"], entry["own_us"]
            lines.append(f"| {entry['where']} | {rc:.1f} -> {cc:.1f} | {ro:.1f} -> {co:.1f} |")
        lines.append("")
    return "\n".join(lines)


def inproc_table(inproc: dict[str, Any]) -> str:
    lines = [
        f"In-process A/B ({inproc['loop']}; alternating batches of serial requests, "
        f"JSON {inproc['shape']['json'][0]} x {inproc['shape']['json'][1]}, "
        f"SSE {inproc['shape']['sse'][0]} x {inproc['shape']['sse'][1]} per kind; median per "
        "request, paired difference with its interquartile range):",
        "",
        "| mode | CPU µs/req: responses kind | chat kind | chat - responses (IQR) | ratio "
        "| wall µs/req: responses kind | chat kind | chat - responses (IQR) |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for mode, row in inproc["modes"].items():
        c, w = row["cpu_us"], row["wall_us"]
        lines.append(
            f"| {mode.upper()} | {c['responses']:.0f} | {c['chat']:.0f} | {c['diff']:+.0f} "
            f"({c['diff_q1_q3'][0]:+.0f}..{c['diff_q1_q3'][1]:+.0f}) | {c['ratio']:.3f} "
            f"| {w['responses']:.0f} | {w['chat']:.0f} | {w['diff']:+.0f} "
            f"({w['diff_q1_q3'][0]:+.0f}..{w['diff_q1_q3'][1]:+.0f}) |"
        )
    return "\n".join(lines)


# --------------------------------------------------------------------------- main


def main(argv: Sequence[str] | None = None) -> int:
    global RESPONSES_BODY
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="1 round of 1.5 s per cell (~1 min)")
    ap.add_argument("--part", choices=("all", "load", "micro", "inproc", "profile"), default="all")
    ap.add_argument(
        "--shared-bench",
        type=Path,
        default=DEFAULT_SHARED_BENCH,
        help=f"directory with mock_upstream.py and load.py (default {DEFAULT_SHARED_BENCH})",
    )
    ap.add_argument("--out", type=Path, default=Path("/tmp/respgate-chat-bench.json"))
    ap.add_argument("--duration", type=float, help="seconds per load run (default 3, quick 1.5)")
    ap.add_argument("--rounds", type=int, help="rounds (default 3, quick 1)")
    ap.add_argument("--deltas", type=int, help="the mock's --deltas (default: its own, 20)")
    ap.add_argument(
        "--pin",
        action="store_true",
        help="c=1: every process on CPU 0; c=32: both gateways on CPU 1, mock + load.py on 0",
    )
    ap.add_argument(
        "--body",
        default=json.dumps(RESPONSES_BODY, separators=(",", ":")),
        help='the /v1/responses body (default %(default)s; add "store": false to leave the '
        "response store out)",
    )
    ap.add_argument(
        "--ref", help="measure this git commit (git archive to a temp dir), not the work tree"
    )
    args = ap.parse_args(argv)
    RESPONSES_BODY = json.loads(args.body)
    provenance = use_ref(args.ref)
    # The in-process part imports ``app`` from the same place the servers run it from.
    sys.path.insert(0, str(_harness.APP_ROOT))
    print(
        f"# app from {provenance['source']} (HEAD {provenance['head']}, "
        f"app/ dirty: {provenance['app_dirty']}, app/ digest {provenance['app_sha256']})",
        flush=True,
    )
    shared = args.shared_bench.resolve()
    result: dict[str, Any] = {
        "when": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "app": provenance,
        "argv": sys.argv,
    }
    payloads: dict[str, bytes] | None = None
    if args.part in ("all", "load"):
        load = run_load_part(args, shared)
        result["load"] = load
        payloads = {k: v.encode() for k, v in load["payloads"].items()}
        print()
        print(load_tables(load))
        print()
        print(
            f"medians over {load['config']['rounds']} round(s) of {load['config']['duration_s']:g}"
            f" s; load took {load['elapsed_s']:.0f} s; loadavg start "
            f"{' '.join(load['machine'].get('loadavg', []))}, end "
            f"{' '.join(load['loadavg_end'] or [])}"
        )
    if args.part in ("all", "micro"):
        if payloads is None:
            payloads = start_mock_for_payloads(shared, args.deltas)
        micro = run_micro(payloads, args.quick)
        result["micro"] = micro
        print()
        print(micro_table(micro), flush=True)
    if args.part in ("all", "inproc"):
        inproc = run_inproc(shared, args.deltas, args.quick)
        result["inproc"] = inproc
        print()
        print(inproc_table(inproc))
    if args.part == "profile":
        profiled = run_inproc(shared, args.deltas, args.quick, profile=150 if args.quick else 400)
        result["profile"] = profiled
        print()
        print(profile_table(profiled))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2, default=str))
    print(f"\nraw results in {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
