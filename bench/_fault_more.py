"""Trials 4 (storage fails) and 5 (upstream flapping, then down) of bench/fault_trials.py.

Storage failures without root tricks that root ignores (file modes): on SQLite the gateway's
RLIMIT_FSIZE is set to 1 byte once it runs, so every write that grows a file fails with EFBIG
(SQLite reports a disk I/O error), which is what a full disk looks like to a writer; on
PostgreSQL the trial's own database refuses connections (``ALLOW_CONNECTIONS false``) and its
sessions are terminated: the database is gone. Both are undone afterwards, to see the gateway
recover without a restart.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import re
import resource
import statistics
import time
from collections.abc import Awaitable, Callable
from typing import Any

import httpx
import openai
from _faults import (
    BODY,
    INTERNAL,
    QUICK,
    FaultUpstream,
    Gateway,
    Plan,
    Row,
    ending,
    ms,
    run_cli,
    status_of,
    temp_dir,
    timed,
)

ERROR_LINE = re.compile(r' ERROR |"level": ?"(?i:error)"')  # a text or a JSON log line
Switch = Callable[[bool], Awaitable[None]]  # break (True) or mend (False) the store


def _internal(message: str) -> str:
    return f"yes: {message[:60]!r}" if INTERNAL.search(message) else "no"


async def _sdk_call(base: str, stream: bool) -> tuple[str, str]:
    """One ``openai`` SDK call with its default retries: (outcome, internal text in it?)."""
    client = openai.AsyncOpenAI(base_url=base + "/v1", api_key="sk-fault-trial")
    try:
        if not stream:
            await client.responses.create(model="mock", input="hi")
            return "200", "no"
        types: list[str] = []
        code, message = None, ""
        async for event in await client.responses.create(model="mock", input="hi", stream=True):
            types.append(event.type)
            if event.type == "error":
                code, message = getattr(event, "code", None), getattr(event, "message", "")
        deltas = types.count("response.output_text.delta")
        return f"{deltas} deltas, then {ending(types)} (code={code})", _internal(message)
    except openai.APIStatusError as exc:
        error = exc.body.get("error", exc.body) if isinstance(exc.body, dict) else {}
        code = error.get("code") if isinstance(error, dict) else None
        return f"{exc.status_code} code={code}", _internal(str(exc.message))
    except openai.APIError as exc:
        return type(exc).__name__, _internal(str(exc))
    finally:
        await client.close()


async def _storage_case(name: str, gw: Gateway, up: FaultUpstream, switch: Switch) -> list[Row]:
    async with httpx.AsyncClient(base_url=gw.base, timeout=60) as client:
        warm = await status_of(client, "POST", "/v1/responses", json=BODY)
        await switch(True)
        mark = len(gw.lines)
        gens = up.generations
        outcome, internal = await _sdk_call(gw.base, stream=False)
        json_gens = up.generations - gens
        gens = up.generations
        streamed, stream_internal = await _sdk_call(gw.base, stream=True)
        stream_gens = up.generations - gens
        ready = await status_of(client, "GET", "/ready")
        health = await status_of(client, "GET", "/health")
        await switch(False)
        await asyncio.sleep(1.0)
        again = await status_of(client, "POST", "/v1/responses", json=BODY)
    log = gw.log_since(mark)
    errors = sum(bool(ERROR_LINE.search(line)) for line in log)
    traces = "yes" if any(line.startswith("Traceback") for line in log) else "no"
    return [
        (f"{name}: SDK call (default retries): upstream generations", str(json_gens), "1"),
        (f"{name}: what the SDK got; internal text in it", f"{outcome}; {internal}",
         "a distinct status/code, not retried; no"),
        (f"{name}: SDK stream (upstream generations {stream_gens}); internal text",
         f"{streamed}; {stream_internal}", "error + response.failed with a clear code; no"),
        (f"{name}: /ready, /health while it fails", f"{ready}, {health}",
         "/ready 503, names store"),
        (f"{name}: log lines meanwhile (ERROR lines, tracebacks)",
         f"{len(log)} ({errors}, {traces})",
         "one line per failure with its request id"),
        (f"{name}: a request before / after the store is back", f"{warm} / {again}", "200 / 200"),
    ]  # fmt: skip


async def trial_storage(opts: argparse.Namespace) -> list[Row]:
    with FaultUpstream(lambda i, r: Plan()) as up, Gateway(up.url, temp_dir("disk"), *QUICK) as gw:
        pid = gw.proc.pid if gw.proc else 0

        hard = resource.prlimit(pid, resource.RLIMIT_FSIZE)[1]

        async def disk(full: bool) -> None:  # the soft limit: no privilege needed to undo it
            resource.prlimit(pid, resource.RLIMIT_FSIZE, (1 if full else hard, hard))

        rows = await _storage_case("SQLite disk full", gw, up, disk)
    if opts.postgres in ("", "none"):
        return rows
    try:
        import asyncpg

        admin = await asyncpg.connect(opts.postgres, timeout=5)
    except Exception as exc:
        return [*rows, ("PostgreSQL", f"not reachable ({type(exc).__name__})", "-")]
    db = f"respgate_fault_{os.getpid()}"
    url = opts.postgres.split("://", 1)[1].rsplit("/", 1)[0]
    database = f"postgresql+asyncpg://{url}/{db}"

    async def gone(down: bool) -> None:
        await admin.execute(f"ALTER DATABASE {db} WITH ALLOW_CONNECTIONS {not down}")
        if down:
            await admin.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = $1", db
            )

    try:
        await admin.execute(f"CREATE DATABASE {db}")
        await asyncio.to_thread(run_cli, "migrate", "--database-url", database)
        with (
            FaultUpstream(lambda i, r: Plan()) as up,
            Gateway(up.url, temp_dir("pg"), *QUICK, "--database-url", database) as gw,
        ):
            rows += await _storage_case("PostgreSQL gone", gw, up, gone)
    except Exception as exc:  # keep the SQLite figures
        rows.append(("PostgreSQL: trial failed", f"{type(exc).__name__}: {exc}"[:200], "-"))
    finally:
        with contextlib.suppress(Exception):
            await admin.execute(f"DROP DATABASE IF EXISTS {db} WITH (FORCE)")
        await admin.close()
    return rows


async def trial_flapping(opts: argparse.Namespace) -> list[Row]:
    burst = {"last": 0.0, "n": 0}

    def planner(i: int, request: dict[str, Any]) -> Plan:
        now = time.monotonic()
        if now - burst["last"] > 0.5:  # a new burst: 503 for its first two requests
            burst["n"] = 0
        burst["last"] = now
        burst["n"] += 1
        return Plan(status=503) if burst["n"] <= 2 else Plan()

    with FaultUpstream(planner) as up, Gateway(up.url, temp_dir("flap"), *QUICK) as gw:
        async with httpx.AsyncClient(base_url=gw.base, timeout=60) as client:

            async def stream() -> str:
                body = BODY | {"stream": True}
                try:
                    async with client.stream("POST", "/v1/responses", json=body) as resp:
                        text = (await resp.aread()).decode()
                except httpx.HTTPError as exc:
                    return type(exc).__name__
                types = [ln[6:].strip() for ln in text.splitlines() if ln.startswith("event:")]
                return (
                    "200" if ending(types) == "completed" else f"{resp.status_code} {ending(types)}"
                )

            failed_json = failed_sse = 0
            for _ in range(opts.bursts):
                got = await asyncio.gather(
                    *(status_of(client, "POST", "/v1/responses", json=BODY) for _ in range(5)),
                    *(stream() for _ in range(5)),
                )
                failed_json += sum(s != "200" for s in got[:5])
                failed_sse += sum(s != "200" for s in got[5:])
                await asyncio.sleep(1.5)
            attempts = up.generations
            up.refuse()
            down = [await timed(status_of(client, "POST", "/v1/responses", json=BODY))]
            down += await asyncio.gather(
                *(timed(status_of(client, "POST", "/v1/responses", json=BODY)) for _ in range(9))
            )
            ready = await status_of(client, "GET", "/ready")
    n = opts.bursts * 5
    statuses = sorted({s for s, _ in down})
    median = statistics.median(t for _, t in down)
    return [
        (f"{opts.bursts} bursts, 503 for the first 2 of each: JSON failed (of {n})",
         str(failed_json), "0 (retried before the first byte)"),
        (f"streams failed (of {n})", str(failed_sse), "0"),
        ("upstream attempts", f"{attempts} for {2 * n} requests", f"{2 * n + 2 * opts.bursts}"),
        ("upstream down (refused): 10 requests got", f"{', '.join(statuses)}, median {ms(median)}",
         "fast 502/503 with a clear code"),
        ("/ready while it is down", ready, "503 naming the upstream"),
    ]  # fmt: skip
