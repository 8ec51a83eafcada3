"""WebSocket mode vs SSE: the per-turn cost of a multi-turn, Codex-like session.

    python bench/ws_bench.py                  # 20 turns x 15 sessions per client, ~2 min
    python bench/ws_bench.py --quick          # 10 turns x 4 sessions
    python bench/ws_bench.py --tool-bytes 4000 --turns 30

One ``shared/bench/mock_upstream.py`` process (text answers, 20 deltas) and one gateway
(``python -m app.cli serve``, i.e. ``respgate serve``, SQLite in a temporary data directory).
A session is ``--turns`` turns with ``store: false`` (but ``sse-stored``); each turn adds one
user message holding a ``--tool-bytes`` "tool output" (what a coding agent sends back), so the
history grows as it does in a Codex session. Sessions of the four clients alternate:

    sse-full      POST /v1/responses (stream) with the whole history every turn (what a
                  ``store: false`` client does over HTTP), one keep-alive aiohttp session
    ws-cache      one WebSocket; each turn sends ``previous_response_id`` and the new message
                  only, the gateway continues from the connection's memory
    sse-stored    POST /v1/responses (stream) with ``store: true`` and ``previous_response_id``:
                  the history comes from the database (SQLite) every turn
    mock-full     the mock's POST /v1/responses with the whole history (the upstream alone)

A turn's time runs from sending the request to receiving ``response.completed``. Reported:
the median turn time per transport (all turns, and the first and last five turns), the
gateway's overhead per turn (transport - mock), the WS/SSE ratios, and the bytes a client sent
per session. Nothing here asserts: the script prints figures.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import aiohttp
import orjson
import websockets

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _harness import (
    DEFAULT_SHARED_BENCH,
    Server,
    free_port,
    mock_server,
    running,
    serve_command,
)

MODEL = "m"


def tool_output(turn: int, size: int) -> dict[str, Any]:
    text = f"tool output {turn}: " + ("x" * max(0, size))
    return {"type": "message", "role": "user", "content": text}


async def sse_turn(
    session: aiohttp.ClientSession, url: str, body: dict[str, Any]
) -> tuple[dict[str, Any], int]:
    payload = orjson.dumps(body)
    async with session.post(url, data=payload, headers={"content-type": "application/json"}) as r:
        final: dict[str, Any] | None = None
        async for raw in r.content:
            line = raw.strip()
            if line.startswith(b"data: {") and b'"response.completed"' in line:
                final = orjson.loads(line[6:])["response"]
        if final is None:
            raise RuntimeError(f"no response.completed from {url} ({r.status})")
        return final, len(payload)


async def sse_session(base: str, turns: int, size: int) -> tuple[list[float], int]:
    history: list[dict[str, Any]] = []
    times: list[float] = []
    sent = 0
    async with aiohttp.ClientSession() as session:
        for turn in range(turns):
            history.append(tool_output(turn, size))
            body = {"model": MODEL, "input": history, "store": False, "stream": True}
            start = time.perf_counter()
            final, size_sent = await sse_turn(session, f"{base}/v1/responses", body)
            times.append(time.perf_counter() - start)
            sent += size_sent
            history.extend({k: v for k, v in item.items() if k != "id"} for item in final["output"])
    return times, sent


async def sse_chained_session(base: str, turns: int, size: int) -> tuple[list[float], int]:
    times: list[float] = []
    sent = 0
    previous: str | None = None
    async with aiohttp.ClientSession() as session:
        for turn in range(turns):
            body: dict[str, Any] = {"model": MODEL, "input": [tool_output(turn, size)]}
            body["stream"] = True
            if previous is not None:
                body["previous_response_id"] = previous
            start = time.perf_counter()
            final, size_sent = await sse_turn(session, f"{base}/v1/responses", body)
            times.append(time.perf_counter() - start)
            sent += size_sent
            previous = final["id"]
    return times, sent


async def ws_session(base: str, turns: int, size: int) -> tuple[list[float], int]:
    times: list[float] = []
    sent = 0
    previous: str | None = None
    async with websockets.connect(base.replace("http://", "ws://") + "/v1/responses") as ws:
        for turn in range(turns):
            frame: dict[str, Any] = {
                "type": "response.create",
                "model": MODEL,
                "input": [tool_output(turn, size)],
                "store": False,
            }
            if previous is not None:
                frame["previous_response_id"] = previous
            payload = json.dumps(frame)
            start = time.perf_counter()
            await ws.send(payload)
            while True:
                event = orjson.loads(await ws.recv())
                if event["type"] == "response.completed":
                    previous = event["response"]["id"]
                    break
                if event["type"] in ("error", "response.failed"):
                    raise RuntimeError(f"turn {turn} failed: {event}")
            times.append(time.perf_counter() - start)
            sent += len(payload)
    return times, sent


def summary(name: str, runs: list[list[float]], sent: list[int]) -> dict[str, Any]:
    every = [t for run in runs for t in run]
    first = [t for run in runs for t in run[:5]]
    last = [t for run in runs for t in run[-5:]]
    return {
        "name": name,
        "median_ms": statistics.median(every) * 1000,
        "first5_ms": statistics.median(first) * 1000,
        "last5_ms": statistics.median(last) * 1000,
        "sent_kb": statistics.median(sent) / 1024,
    }


async def measure(gateway: str, mock: str, args: argparse.Namespace) -> list[dict[str, Any]]:
    clients = {
        "sse-full": lambda: sse_session(gateway, args.turns, args.tool_bytes),
        "ws-cache": lambda: ws_session(gateway, args.turns, args.tool_bytes),
        "sse-stored": lambda: sse_chained_session(gateway, args.turns, args.tool_bytes),
        "mock-full": lambda: sse_session(mock, args.turns, args.tool_bytes),
    }
    for run in clients.values():  # warm-up: imports, connections, the database
        await run()
    times: dict[str, list[list[float]]] = {name: [] for name in clients}
    sent: dict[str, list[int]] = {name: [] for name in clients}
    order = list(clients)
    for index in range(args.sessions):
        for name in order if index % 2 == 0 else reversed(order):
            turn_times, size = await clients[name]()
            times[name].append(turn_times)
            sent[name].append(size)
    return [summary(name, times[name], sent[name]) for name in clients]


def report(rows: list[dict[str, Any]], args: argparse.Namespace) -> None:
    print(
        f"\n{args.turns} turns x {args.sessions} sessions per client, tool output "
        f"{args.tool_bytes} B per turn, store false\n"
    )
    print(f"{'client':<10} {'turn p50 ms':>12} {'first 5':>9} {'last 5':>9} {'sent KB':>9}")
    for row in rows:
        print(
            f"{row['name']:<10} {row['median_ms']:>12.2f} {row['first5_ms']:>9.2f} "
            f"{row['last5_ms']:>9.2f} {row['sent_kb']:>9.1f}"
        )
    by = {row["name"]: row for row in rows}
    mock = by["mock-full"]
    print()
    stored = by["sse-stored"]["median_ms"] - mock["median_ms"]
    print(f"sse-stored gateway overhead per turn (all turns): {stored:.2f} ms")
    for key, label in (("median_ms", "all turns"), ("last5_ms", "last 5 turns")):
        sse = by["sse-full"][key] - mock[key]
        ws = by["ws-cache"][key] - mock[key]
        print(
            f"{label:<13} gateway overhead per turn: sse-full {sse:.2f} ms, ws-cache {ws:.2f} ms"
            f"; turn time ws/sse {by['ws-cache'][key] / by['sse-full'][key]:.2f}"
            f", overhead ws/sse {ws / sse if sse > 0 else float('nan'):.2f}"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--turns", type=int, default=20)
    parser.add_argument("--sessions", type=int, default=15)
    parser.add_argument("--tool-bytes", type=int, default=2000)
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--shared-bench", type=Path, default=DEFAULT_SHARED_BENCH)
    args = parser.parse_args()
    if args.quick:
        args.turns, args.sessions = 10, 4
    mock = mock_server(args.shared_bench, free_port(), None)
    port = free_port()
    data_dir = tempfile.mkdtemp(prefix="respgate-ws-bench-")
    cmd = serve_command(port, mock.base, data_dir)
    gateway = Server("gateway", cmd, port)
    with running([mock, gateway]):
        rows = asyncio.run(measure(gateway.base, mock.base, args))
    report(rows, args)


if __name__ == "__main__":
    main()
