"""The server-side tool loop: what one more round costs, in process and over HTTP.

    python bench/loop_bench.py                   # both parts, ~8 min
    python bench/loop_bench.py --quick           # both parts, ~40 s
    python bench/loop_bench.py --part inproc     # (a) only;  --part http: (b) only
    python bench/loop_bench.py --no-profile      # (a) without the cProfile pass

A response with K rounds is K-1 rounds that each end in a call to a gateway tool, then a round
that ends in a message. The cost of one round is the slope in K: (T(K) - T(1)) / (K - 1), from
medians over interleaved runs (every K once per iteration, order rotating), all in one run.

(a) in process (``--part inproc``): ``ResponsesService(upstream, store, toolkit=...,
    limits=LoopLimits(...))`` with
    - an instant in-memory upstream (``InstantUpstream``): no I/O, answers with the events (or
      the body) of a Responses server, parsed from pre-serialized JSON with orjson as the real
      adapter does; a request for model ``loop-K`` gets a function call to the first function
      tool while its input holds fewer than K-1 ``function_call_output`` items, else a message;
    - an instant gateway tool (``InstantTool``/``InstantToolKit``, shaped like the tests'
      FakeTool/FakeToolKit: an ``mcp_call`` item on server ``fake``);
    - ``tests.fakes.MemoryResponseStore`` (and ``"store": false`` unless ``--store``).
    Streaming consumes ``open_stream`` and encodes every event with ``app.api.sse.encode_event``
    (the API layer's per-frame work); non-streaming awaits ``create`` and dumps the response
    with orjson. Reported per mode: T(K) for each K, the per-round slope (last K vs K=1 and a
    least-squares fit), CPU per round, and the same mock called directly (one function-call
    round of the upstream alone), so loop overhead = per-round - mock round. Then a cProfile
    pass over K=max responses: the top functions by own time, and own time grouped by module,
    in µs per round.
    ``--mcp`` (default; ``--no-mcp`` skips it) adds the same measurement with the real MCP
    tool (tests' counter server in a subprocess, ``GatewayToolKit([McpToolProvider(configured
    counter, pooled session)])``) and the ``mcp`` SDK's own ``call_tool`` to the same server,
    interleaved, as its direct baseline.

(b) over HTTP (``--part http``): three subprocesses on 127.0.0.1,
    - the mock upstream: ``shared/bench/mock_upstream.py``'s raw server and ``MockCore``,
      imported by path, with the ``loop-K`` rule above (its ``--function-call`` mode, which
      answers exactly one tool round then a message, is the K=2 case);
    - the counter MCP server (``bench/mcp_bench.py --serve-counter``);
    - the gateway, as ``bench/gateway_launcher.py`` runs it (uvicorn defaults), configured with
      the counter server (``RESPGATE_MCP``; pooled session) and ``RESPGATE_TOOL_MAX_ROUNDS=20``;
    and ``shared/bench/load.py`` hits, back to back for each scenario (JSON/SSE x c=1/c=8):
    the mock directly; the gateway with no tools (model ``loop-1``); the gateway with the MCP
    tool ``{"type": "mcp", "server_label": "counter"}`` (configured server) for each K; and in
    a full run also the same tool given by ``server_url`` (a new MCP session per request).
    Reported: p50/p99 per K at c=1, added per round = (p(Kmax) - p(1)) / (Kmax - 1), the
    one-tool-round request against the same request with no tools, req/s (and rounds/s) at
    c=8, and the gateway's and the MCP server's CPU µs per request.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import cProfile
import importlib.util
import json
import pstats
import statistics
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from pathlib import Path
from typing import Any

import orjson

sys.path.insert(0, str(Path(__file__).resolve().parent))

import _harness
from _harness import (
    DEFAULT_SHARED_BENCH,
    Server,
    fmt,
    free_port,
    machine_info,
    run_load,
    running,
    summarize,
    use_ref,
)
from mcp_bench import counter_server, mcp_url, pct, run_loop

JsonObject = dict[str, Any]
INPUT = "add 2 and 3"
CALL_ARGUMENTS = '{"a":2,"b":3}'
SUM_SCHEMA = {
    "type": "object",
    "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}},
    "required": ["a", "b"],
}


def app_root() -> Path:
    return Path(_harness.APP_ROOT)


# ============================================================================= (a) in process


def rounds_wanted(body: Mapping[str, Any]) -> int:
    model = str(body.get("model") or "")
    return int(model[5:]) if model.startswith("loop-") else 1


def outputs_in(body: Mapping[str, Any]) -> int:
    items = body.get("input")
    if not isinstance(items, list):
        return 0
    return sum(1 for i in items if isinstance(i, dict) and i.get("type") == "function_call_output")


def first_function(body: Mapping[str, Any]) -> str | None:
    for tool in body.get("tools") or ():
        if isinstance(tool, dict) and tool.get("type") == "function" and tool.get("name"):
            return str(tool["name"])
    return None


class _Events:
    """An ``UpstreamEventStream`` over a list of already parsed events."""

    __slots__ = ("_events",)

    def __init__(self, events: list[JsonObject]) -> None:
        self._events = events

    def __aiter__(self) -> AsyncIterator[JsonObject]:
        return self._iter()

    async def _iter(self) -> AsyncIterator[JsonObject]:
        for event in self._events:
            yield event

    async def aclose(self) -> None:
        return None


class InstantUpstream:
    """``core.ports.Upstream`` without I/O; see the module docstring (``loop-K``)."""

    def __init__(self) -> None:
        from tests.fakes import USAGE, function_call, message, round_events

        self._n = 0
        call = function_call("@NAME@", CALL_ARGUMENTS, call_id="call_@N@") | {"id": "fc_@N@"}
        text = message("The sum of 2 and 3 is 5.") | {"id": "msg_@N@"}
        self._stream = {
            kind: b"\n".join(orjson.dumps(e) for e in round_events([item]))
            for kind, item in (("call", call), ("message", text))
        }
        self._body = {
            kind: orjson.dumps({"status": "completed", "output": [item], "usage": USAGE})
            for kind, item in (("call", call), ("message", text))
        }

    def _template(self, body: Mapping[str, Any], table: dict[str, bytes]) -> bytes:
        self._n += 1
        name = first_function(body)
        calls = name is not None and outputs_in(body) < rounds_wanted(body) - 1
        raw = table["call" if calls else "message"].replace(b"@N@", str(self._n).encode())
        return raw.replace(b"@NAME@", name.encode()) if calls and name else raw

    async def create_response(self, body: JsonObject, headers: Mapping[str, str]) -> JsonObject:
        data: JsonObject = orjson.loads(self._template(body, self._body))
        return data

    async def stream_response(self, body: JsonObject, headers: Mapping[str, str]) -> _Events:
        raw = self._template(body, self._stream)
        return _Events([orjson.loads(line) for line in raw.split(b"\n")])

    async def list_models(self, headers: Mapping[str, str]) -> Any:
        raise NotImplementedError

    async def check_ready(self) -> bool:
        return True

    async def aclose(self) -> None:
        return None


class InstantTool:
    """An instant gateway tool presented as an ``mcp_call`` on server ``fake`` (the tests'
    FakeTool without its bookkeeping)."""

    def __init__(self, tool: str = "add") -> None:
        from app.tools.mcp.executor import PRESENTATION

        self.tool = tool
        self.presentation = PRESENTATION

    def _item(self, call: Any, **fields: Any) -> JsonObject:
        base = {
            "id": call.item_id or f"mcp_{call.call_id}",
            "type": "mcp_call",
            "server_label": "fake",
            "name": self.tool,
            "arguments": call.arguments,
            "approval_request_id": call.approval_request_id,
            "output": None,
            "error": None,
            "status": "in_progress",
        }
        return base | fields

    def open_item(self, call: Any) -> JsonObject:
        return self._item(call, arguments="")

    def approval_item(self, call: Any) -> JsonObject | None:
        return None

    async def run(self, call: Any, *, timeout: float) -> Any:  # noqa: ASYNC109
        from app.core.tools import ToolResult

        args = orjson.loads(call.arguments or "{}")
        result = str(args.get("a", 0) + args.get("b", 0))
        return ToolResult(self._item(call, output=result, status="completed"), result, True)

    def error_result(self, call: Any, message: str, *, status: str) -> Any:
        from app.core.tools import ToolResult

        error = {"type": "mcp_tool_execution_error", "content": [{"type": "text", "text": message}]}
        return ToolResult(self._item(call, error=error, status=status), f"Error: {message}", False)


class InstantToolKit:
    """The tests' FakeToolKit: request tool ``{"type": "instant"}`` -> ``mcp__fake__add``."""

    include_values: frozenset[str] = frozenset()

    def __init__(self) -> None:
        self.tools = {"mcp__fake__add": InstantTool("add")}

    def secret_fields(self, tool_type: str) -> frozenset[str]:
        return frozenset()

    def involves_gateway(self, body: JsonObject, items: list[JsonObject]) -> bool:
        return any(t.get("type") == "instant" for t in body.get("tools") or []) or any(
            i.get("type") == "mcp_call" for i in items
        )

    async def prepare(
        self,
        body: JsonObject,
        history: list[JsonObject],
        new_input: list[JsonObject],
        context: Any = None,
    ) -> Any:
        from app.core.tools import PreparedTools
        from app.tools.mcp.lowering import lower_mcp_items
        from app.tools.toolkit import NameTable

        functions = [
            {"type": "function", "name": name, "parameters": SUM_SCHEMA} for name in self.tools
        ]
        return PreparedTools(
            executors=dict(self.tools),
            upstream_tools=functions,
            tool_choice=body.get("tool_choice"),
            upstream_input=lower_mcp_items([*history, *new_input], NameTable()),
            prelude=[],
            approved=[],
        )


def make_runner(service: Any, body: JsonObject, stream: bool) -> Callable[[], Awaitable[Any]]:
    """One full response through the service, as the API layer would consume it."""
    from app.api.sse import encode_event

    if stream:
        streaming = {**body, "stream": True}

        async def run_stream() -> Any:
            last = None
            async for event in await service.open_stream(parsed(streaming), {}):
                encode_event(event)
                last = event
            return last["response"] if last else None

        return run_stream

    async def run_json() -> Any:
        response = await service.create(parsed(body), {})
        orjson.dumps(response)
        return response

    return run_json


def parsed(body: JsonObject) -> Any:
    """What the route hands the service: the body validated once, for the default tenant."""
    from app.core.tenancy import DEFAULT_TENANT
    from app.protocol.requests import ParsedRequest

    return ParsedRequest.from_body(dict(body), DEFAULT_TENANT)


def make_direct(upstream: Any, body: JsonObject, stream: bool) -> Callable[[], Awaitable[Any]]:
    """The mock alone: one function-call round of the upstream, consumed."""

    async def run_stream() -> Any:
        events = await upstream.stream_response(body, {})
        async for _ in events:
            pass
        await events.aclose()

    async def run_json() -> Any:
        return await upstream.create_response(body, {})

    return run_stream if stream else run_json


def check_response(response: JsonObject | None, rounds: int, label: str) -> None:
    assert response is not None and response.get("status") == "completed", (label, response)
    output = response.get("output") or []
    calls = [i for i in output if i.get("type") == "mcp_call"]
    assert len(calls) == rounds - 1, (label, len(calls), rounds)
    assert all(c.get("status") == "completed" and c.get("output") == "5" for c in calls), calls
    assert output[-1].get("type") == "message", (label, output[-1])


async def interleaved(
    entries: dict[str, Callable[[], Awaitable[Any]]], iterations: int, warmup: int
) -> dict[str, dict[str, Any]]:
    names = list(entries)
    for _ in range(warmup):
        for name in names:
            await entries[name]()
    wall: dict[str, list[float]] = {n: [] for n in names}
    cpu: dict[str, list[float]] = {n: [] for n in names}
    perf, ptime = time.perf_counter_ns, time.process_time_ns
    for i in range(iterations):
        shift = i % len(names)
        for name in names[shift:] + names[:shift]:
            entry = entries[name]
            c0 = ptime()
            t0 = perf()
            await entry()
            t1 = perf()
            c1 = ptime()
            wall[name].append((t1 - t0) / 1e3)
            cpu[name].append((c1 - c0) / 1e3)
    return {
        n: {
            "n": len(wall[n]),
            "p50_us": pct(wall[n], 50),
            "p99_us": pct(wall[n], 99),
            "mean_us": statistics.fmean(wall[n]),
            "cpu_mean_us": statistics.fmean(cpu[n]),
        }
        for n in names
    }


def slope(points: dict[int, float]) -> float | None:
    """Least-squares slope of value against K."""
    if len(points) < 2:
        return None
    ks = list(points)
    mk = statistics.fmean(ks)
    mv = statistics.fmean(points.values())
    den = sum((k - mk) ** 2 for k in ks)
    return sum((k - mk) * (points[k] - mv) for k in ks) / den if den else None


def per_round(stats: dict[str, dict[str, Any]], ks: list[int], field: str) -> dict[str, Any]:
    values = {k: stats[f"K={k}"][field] for k in ks}
    kmax = max(ks)
    return {
        "endpoints": (values[kmax] - values[1]) / (kmax - 1),
        "fit": slope(values),
    }


async def inproc_instant(
    ks: list[int], iterations: int, warmup: int, store: bool
) -> dict[str, dict[str, Any]]:
    from app.core.loop import LoopLimits
    from app.core.service import ResponsesService
    from tests.fakes import MemoryResponseStore

    out: dict[str, dict[str, Any]] = {}
    for stream in (True, False):
        upstream = InstantUpstream()
        service = ResponsesService(
            upstream,
            MemoryResponseStore(),
            toolkit=InstantToolKit(),
            limits=LoopLimits(max_rounds=max(ks) + 1),
        )
        extra = {} if store else {"store": False}
        entries: dict[str, Callable[[], Awaitable[Any]]] = {}
        entries["no tools"] = make_runner(
            service, {"model": "loop-1", "input": INPUT, **extra}, stream
        )
        for k in ks:
            body = {"model": f"loop-{k}", "input": INPUT, "tools": [{"type": "instant"}], **extra}
            entries[f"K={k}"] = make_runner(service, body, stream)
            check_response(await entries[f"K={k}"](), k, f"instant K={k}")
        fc_body = {"model": "loop-2", "input": INPUT, "tools": [{"type": "function", "name": "f"}]}
        entries["mock round (direct)"] = make_direct(upstream, fc_body, stream)
        stats = await interleaved(entries, iterations, warmup)
        mode = "stream" if stream else "json"
        out[mode] = {
            "stats": stats,
            "per_round_us": per_round(stats, ks, "p50_us"),
            "per_round_cpu_us": per_round(stats, ks, "cpu_mean_us"),
            "mock_round_us": stats["mock round (direct)"]["p50_us"],
        }
        print_inproc(mode, "instant tool", out[mode], ks)
    return out


async def inproc_mcp(
    url: str, ks: list[int], iterations: int, warmup: int, store: bool
) -> dict[str, dict[str, Any]]:
    from mcp import Client

    from app.core.engines import Namespace
    from app.core.loop import LoopLimits
    from app.core.service import ResponsesService
    from app.core.tool_sessions import ToolSessions
    from app.net.egress import EgressPolicy
    from app.tools.engines.multi import MultiEngine, Route
    from app.tools.mcp.engine import McpEngine, McpToolSet
    from app.tools.mcp.pool import McpSessionPool
    from app.tools.mcp.provider import McpToolProvider
    from app.tools.mcp.spec import McpServerSpec
    from app.tools.toolkit import GatewayToolKit
    from tests.fakes import MemoryResponseStore

    # The operator configured the counter server (on this machine: loopback allowed for it); a
    # request names it by label and narrows it to ``sum``, run by the mcp engine.
    spec = McpServerSpec(label="counter", url=url, transport="streamable_http")
    local = EgressPolicy.of(allow_networks=["127.0.0.0/8", "::1/128"])
    out: dict[str, dict[str, Any]] = {}
    async with Client(url, mode="legacy") as sdk:

        async def sdk_call() -> Any:
            return await sdk.call_tool("sum", {"a": 2, "b": 3})

        for stream in (True, False):
            pool = McpSessionPool({"counter": spec}, connect_timeout=10.0, egress=local)
            namespace = Namespace(
                "counter", "mcp", McpToolSet(pool, "counter", "counter", list_timeout=30)
            )
            sessions = ToolSessions(MultiEngine({"counter": Route("mcp", McpEngine(pool))}))
            provider = McpToolProvider(namespaces={"counter": namespace}, sessions=sessions)
            upstream = InstantUpstream()
            service = ResponsesService(
                upstream,
                MemoryResponseStore(),
                toolkit=GatewayToolKit([provider]),
                limits=LoopLimits(max_rounds=max(ks) + 1),
            )
            extra = {} if store else {"store": False}
            entries: dict[str, Callable[[], Awaitable[Any]]] = {}
            for k in ks:
                body = {
                    "model": f"loop-{k}",
                    "input": INPUT,
                    "tools": [{"type": "mcp", "server_label": "counter", "allowed_tools": ["sum"]}],
                    **extra,
                }
                entries[f"K={k}"] = make_runner(service, body, stream)
                check_response(await entries[f"K={k}"](), k, f"mcp K={k}")
            entries["sdk call_tool (direct)"] = sdk_call
            fc_body = {
                "model": "loop-2",
                "input": INPUT,
                "tools": [{"type": "function", "name": "f"}],
            }
            entries["mock round (direct)"] = make_direct(upstream, fc_body, stream)
            stats = await interleaved(entries, iterations, warmup)
            await pool.aclose()
            mode = "stream" if stream else "json"
            out[mode] = {
                "stats": stats,
                "per_round_us": per_round(stats, ks, "p50_us"),
                "per_round_cpu_us": per_round(stats, ks, "cpu_mean_us"),
                "mock_round_us": stats["mock round (direct)"]["p50_us"],
                "sdk_call_us": stats["sdk call_tool (direct)"]["p50_us"],
                "sdk_call_cpu_us": stats["sdk call_tool (direct)"]["cpu_mean_us"],
            }
            print_inproc(mode, "MCP counter.sum (pooled session)", out[mode], ks)
    return out


def print_inproc(mode: str, what: str, res: dict[str, Any], ks: list[int]) -> None:
    stats = res["stats"]
    print(f"\n### (a) in process, {mode}, {what}\n")
    print("| entry | n | p50 µs | p99 µs | mean µs | CPU µs (mean) |")
    print("|---|---|---|---|---|---|")
    for name, s in stats.items():
        print(
            f"| {name} | {s['n']} | {s['p50_us']:.1f} | {s['p99_us']:.1f} | {s['mean_us']:.1f} "
            f"| {s['cpu_mean_us']:.1f} |"
        )
    pr, cpu = res["per_round_us"], res["per_round_cpu_us"]
    kmax = max(ks)
    line = (
        f"\nper round (p50): (T(K={kmax}) - T(K=1)) / {kmax - 1} = **{pr['endpoints']:.1f} µs**"
        f" (least-squares fit over K={ks}: {pr['fit']:.1f} µs); CPU per round "
        f"{cpu['endpoints']:.1f} µs (fit {cpu['fit']:.1f}); the mock's own function-call round "
        f"{res['mock_round_us']:.1f} µs"
    )
    if "sdk_call_us" in res:
        overhead = pr["endpoints"] - res["sdk_call_us"] - res["mock_round_us"]
        line += (
            f"; the SDK's direct call_tool {res['sdk_call_us']:.1f} µs "
            f"(CPU {res['sdk_call_cpu_us']:.1f}); loop + gateway MCP overhead per round "
            f"= per round - SDK call - mock round = **{overhead:.1f} µs**"
        )
    else:
        overhead = pr["endpoints"] - res["mock_round_us"]
        line += f"; loop overhead per round = per round - mock round = **{overhead:.1f} µs**"
    if "no tools" in stats:
        setup = stats["K=1"]["p50_us"] - stats["no tools"]["p50_us"]
        line += f"; fixed cost of the loop path (K=1 with the tool vs no tools): {setup:.1f} µs"
    print(line)


def category(filename: str) -> str:
    root = str(app_root())
    if filename.startswith(root) and "site-packages/" not in filename:
        rel = filename[len(root) + 1 :]
        return rel.removesuffix(".py")
    if filename == "~":
        return "builtins (C)"
    for marker in ("site-packages/", "lib/python3"):
        if marker in filename:
            tail = filename.split(marker, 1)[1].lstrip("/")
            parts = tail.split("/")
            if marker == "lib/python3":
                parts = parts[1:]  # "11/asyncio/..." -> "asyncio/..."
            return parts[0].removesuffix(".py") if parts else filename
    return filename


async def profile_inproc(kmax: int, responses: int, store: bool) -> dict[str, Any]:
    from app.core.loop import LoopLimits
    from app.core.service import ResponsesService
    from tests.fakes import MemoryResponseStore

    out: dict[str, Any] = {}
    for stream in (True, False):
        service = ResponsesService(
            InstantUpstream(),
            MemoryResponseStore(),
            toolkit=InstantToolKit(),
            limits=LoopLimits(max_rounds=kmax + 1),
        )
        extra = {} if store else {"store": False}
        body = {"model": f"loop-{kmax}", "input": INPUT, "tools": [{"type": "instant"}], **extra}
        run = make_runner(service, body, stream)
        for _ in range(20):
            await run()
        prof = cProfile.Profile()
        prof.enable()
        for _ in range(responses):
            await run()
        prof.disable()
        stats = pstats.Stats(prof)
        rounds = responses * kmax
        raw = stats.stats  # type: ignore[attr-defined]
        total = sum(v[2] for v in raw.values())
        rows = sorted(raw.items(), key=lambda kv: kv[1][2], reverse=True)
        top = []
        for (filename, line, name), (_cc, nc, tt, ct, _callers) in rows[:25]:
            top.append(
                {
                    "function": f"{category(filename)}:{line}({name})",
                    "calls_per_round": nc / rounds,
                    "own_us_per_round": tt / rounds * 1e6,
                    "cum_us_per_round": ct / rounds * 1e6,
                    "own_share": tt / total,
                }
            )
        groups: dict[str, float] = {}
        for (filename, _line, _name), (_cc, _nc, tt, _ct, _callers) in raw.items():
            key = category(filename)
            groups[key] = groups.get(key, 0.0) + tt
        grouped = sorted(groups.items(), key=lambda kv: kv[1], reverse=True)
        inclusive = sorted(
            (
                (f"{category(filename)}:{line}({name})", nc, ct)
                for (filename, line, name), (_cc, nc, _tt, ct, _callers) in raw.items()
                if category(filename).startswith("app/")
            ),
            key=lambda row: row[2],
            reverse=True,
        )
        mode = "stream" if stream else "json"
        out[mode] = {
            "responses": responses,
            "k": kmax,
            "profiled_us_per_round": total / rounds * 1e6,
            "top": top,
            "by_module": [
                {"module": m, "own_us_per_round": t / rounds * 1e6, "share": t / total}
                for m, t in grouped[:20]
            ],
            "app_inclusive": [
                {
                    "function": f,
                    "calls_per_round": nc / rounds,
                    "cum_us_per_round": ct / rounds * 1e6,
                    "cum_share": ct / total,
                }
                for f, nc, ct in inclusive[:30]
            ],
        }
        print(
            f"\n### (a) cProfile, {mode}: {responses} responses x K={kmax} rounds, instant tool; "
            f"{total / rounds * 1e6:.1f} µs per round under the profiler\n"
        )
        print("| own time by module | µs/round | share |")
        print("|---|---|---|")
        for row in out[mode]["by_module"][:14]:
            print(f"| {row['module']} | {row['own_us_per_round']:.1f} | {row['share']:.1%} |")
        print()
        print("| function (top own time) | calls/round | own µs/round | cum µs/round | share |")
        print("|---|---|---|---|---|")
        for row in top[:18]:
            print(
                f"| `{row['function']}` | {row['calls_per_round']:.1f} "
                f"| {row['own_us_per_round']:.1f} | {row['cum_us_per_round']:.1f} "
                f"| {row['own_share']:.1%} |"
            )
        print()
        print("| app function (inclusive, callees included) | calls/round | cum µs/round | share |")
        print("|---|---|---|---|")
        for row in out[mode]["app_inclusive"][:22]:
            print(
                f"| `{row['function']}` | {row['calls_per_round']:.1f} "
                f"| {row['cum_us_per_round']:.1f} | {row['cum_share']:.1%} |"
            )
    return out


# ============================================================================= (b) over HTTP


def serve_mock(port: int, shared: Path) -> None:
    """The shared mock's raw server with the ``loop-K`` rule (see the module docstring)."""
    spec = importlib.util.spec_from_file_location("mock_upstream", shared / "mock_upstream.py")
    if spec is None or spec.loader is None:
        raise SystemExit(f"mock upstream not found in {shared}")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)

    class LoopCore(module.MockCore):  # type: ignore[name-defined,misc]
        def responses(self, req: dict[str, Any]) -> Any:
            if not str(req.get("model") or "").startswith("loop-"):
                return super().responses(req)
            done = outputs_in(req)
            self.function_call = done < rounds_wanted(req) - 1
            if self.function_call and done:
                items = [
                    i
                    for i in req["input"]
                    if not (isinstance(i, dict) and i.get("type") == "function_call_output")
                ]
                req = {**req, "input": items}
            return super().responses(req)

    core = LoopCore(deltas=20)
    with contextlib.suppress(ImportError):
        import uvloop

        uvloop.install()
    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(module._serve_raw(core, "127.0.0.1", port))


def http_bodies(url: str, ks: list[int], with_url: bool, store: bool) -> dict[str, JsonObject]:
    extra = {} if store else {"store": False}
    bodies: dict[str, JsonObject] = {"no tools": {"model": "loop-1", "input": INPUT, **extra}}
    for k in ks:
        bodies[f"instant K={k}"] = {
            "model": f"loop-{k}",
            "input": INPUT,
            "tools": [{"type": "instant"}],
            **extra,
        }
    configured = {"type": "mcp", "server_label": "counter"}
    for k in ks:
        bodies[f"mcp K={k}"] = {
            "model": f"loop-{k}",
            "input": INPUT,
            "tools": [configured],
            **extra,
        }
    if with_url:
        by_url = {
            "type": "mcp",
            "server_label": "counter",
            "server_url": url,
            "require_approval": "never",
            "allowed_tools": ["sum"],
        }
        for k in ks:
            bodies[f"mcp-url K={k}"] = {
                "model": f"loop-{k}",
                "input": INPUT,
                "tools": [by_url],
                **extra,
            }
    return bodies


def post_json(url: str, body: JsonObject) -> JsonObject:
    import urllib.request

    request = urllib.request.Request(
        url, data=json.dumps(body).encode(), headers={"content-type": "application/json"}
    )
    with urllib.request.urlopen(request, timeout=30) as reply:
        data: JsonObject = json.loads(reply.read())
        return data


def check_http(response: JsonObject, rounds: int, label: str) -> None:
    assert response.get("status") == "completed", (label, response)
    output = response.get("output") or []
    calls = [i for i in output if i.get("type") == "mcp_call"]
    assert len(calls) == rounds - 1, (label, len(calls), rounds, output)
    assert all(c.get("status") == "completed" and c.get("output") == "2" for c in calls), calls
    assert output[-1].get("type") == "message", (label, output[-1])


def run_http(args: argparse.Namespace, ks: list[int]) -> dict[str, Any]:
    shared = args.shared_bench.resolve()
    mock_port = free_port()
    mock = Server(
        "mock",
        [
            sys.executable,
            str(Path(__file__).resolve()),
            "--serve-mock",
            str(mock_port),
            "--shared-bench",
            str(shared),
        ],
        mock_port,
    )
    counter = counter_server(free_port())
    gw_port = free_port()
    data_dir = tempfile.mkdtemp(prefix="respgate-loop-bench-")
    config = {
        "servers": [
            {
                "label": "counter",
                "url": mcp_url(counter),
                "allowed_tools": ["sum"],
                "require_approval": "never",
            }
        ]
    }
    gateway = Server(
        "gateway",
        [
            sys.executable,
            str(Path(__file__).resolve()),
            "--serve-gateway",
            "--port",
            str(gw_port),
            "--upstream-url",
            mock.base,
        ],
        gw_port,
        env={
            "RESPGATE_MCP": json.dumps(config),
            "RESPGATE_TOOL_MAX_ROUNDS": "20",
            "RESPGATE_DATA_DIR": data_dir,
        },
    )
    bodies = http_bodies(mcp_url(counter), ks, args.with_url, args.store)
    duration = args.duration or (1.0 if args.quick else 3.0)
    repeats = args.rounds or (1 if args.quick else 2)
    warmup = 5 if args.quick else 20
    scenarios = [("json", 1), ("sse", 1), ("json", 8), ("sse", 8)]
    raw: dict[str, list[dict[str, Any]]] = {}
    with running([mock, counter, gateway]):
        gw_url = gateway.base + "/v1/responses"
        for label, body in bodies.items():
            check_http(post_json(gw_url, body), rounds_wanted(body), label)
        for body in bodies.values():  # warm-up: pools, lazy imports
            run_load(
                shared,
                gw_url,
                concurrency=8,
                duration=0.2,
                stream=True,
                server=None,
                body=body,
                warmup=warmup,
            )
        for rep in range(repeats):
            for mode, conc in scenarios:
                targets = [("direct", mock, {"model": "loop-1", "input": INPUT})]
                targets += [(label, gateway, body) for label, body in bodies.items()]
                for label, server, body in targets:
                    mcp0 = counter.cpu()
                    res = run_load(
                        shared,
                        server.base + "/v1/responses",
                        concurrency=conc,
                        duration=duration,
                        stream=(mode == "sse"),
                        server=server,
                        others=[s for s in (mock, counter, gateway) if s is not server],
                        body=body,
                        warmup=warmup,
                    )
                    served = res["requests"] + warmup * conc
                    res["mcp_server_cpu_us_per_req"] = (counter.cpu() - mcp0) / served * 1e6
                    raw.setdefault(f"{mode}-c{conc}-{label}", []).append(res)
                    print(
                        f"  {rep + 1}/{repeats} {mode.upper():4s} c={conc} {label:14s} "
                        f"{res['rps']:>8,.0f} req/s  p50 {res['latency_ms']['p50']:7.3f} ms  "
                        f"p99 {res['latency_ms']['p99']:7.3f} ms  "
                        f"gw CPU {res.get('server_cpu_us_per_req', 0):6.0f} µs/req  "
                        f"MCP CPU {res['mcp_server_cpu_us_per_req']:5.0f} µs/req  "
                        f"bg {res['bg_cpu_pct']:5.1f}%",
                        flush=True,
                    )
    summary: dict[str, Any] = {}
    for mode, conc in scenarios:
        rows = {}
        for label in ["direct", *bodies]:
            runs = raw[f"{mode}-c{conc}-{label}"]
            row = summarize(runs)
            row["mcp_server_cpu_us_per_req"] = statistics.median(
                r["mcp_server_cpu_us_per_req"] for r in runs
            )
            rows[label] = row
        summary[f"{mode}-c{conc}"] = rows
    print_http(summary, ks, args.with_url)
    return {"summary": summary, "raw": raw, "duration_s": duration, "repeats": repeats}


def print_http(summary: dict[str, Any], ks: list[int], with_url: bool) -> None:
    kmax = max(ks)
    variants = ["instant", "mcp", *(["mcp-url"] if with_url else [])]
    for key in ("json-c1", "sse-c1"):
        rows = summary[key]
        print(f"\n### (b) over HTTP, {key.replace('-c', ' c=')}\n")
        print(
            "| target | req/s | p50 ms | p99 ms | gateway CPU µs/req | MCP server CPU µs/req "
            "| bg CPU % |"
        )
        print("|---|---|---|---|---|---|---|")
        for label, row in rows.items():
            cpu = "-" if label == "direct" else fmt(row["server_cpu_us_per_req"], 0)
            print(
                f"| {label} | {fmt(row['rps'])} | {fmt(row['p50_ms'])} | {fmt(row['p99_ms'])} "
                f"| {cpu} | {fmt(row['mcp_server_cpu_us_per_req'], 0)} "
                f"| {fmt(row['bg_cpu_pct_max'], 0)} |"
            )
        for variant in variants:
            lo, hi = rows[f"{variant} K=1"], rows[f"{variant} K={kmax}"]
            two = rows.get(f"{variant} K=2")
            none = rows["no tools"]
            d50 = (hi["p50_ms"] - lo["p50_ms"]) / (kmax - 1)
            d99 = (hi["p99_ms"] - lo["p99_ms"]) / (kmax - 1)
            dcpu = (hi["server_cpu_us_per_req"] - lo["server_cpu_us_per_req"]) / (kmax - 1)
            dmcp = (hi["mcp_server_cpu_us_per_req"] - lo["mcp_server_cpu_us_per_req"]) / (kmax - 1)
            line = (
                f"\n{variant}: added per round (K={kmax} vs K=1) p50 **{d50:.3f} ms**, "
                f"p99 {d99:.3f} ms, gateway CPU {dcpu:.0f} µs, MCP server CPU {dmcp:.0f} µs; "
                f"fixed cost of the tool (K=1 vs no tools) p50 "
                f"{lo['p50_ms'] - none['p50_ms']:.3f} ms"
            )
            if variant == "instant":
                direct = rows["direct"]["p50_ms"]
                line += (
                    f"; per round minus the mock called directly ({direct:.3f} ms): "
                    f"**{d50 - direct:.3f} ms**"
                )
            if two is not None:
                line += (
                    f"; one tool round vs the same request with no tools (K=2 - no tools): "
                    f"p50 {two['p50_ms'] - none['p50_ms']:.3f} ms, "
                    f"p99 {two['p99_ms'] - none['p99_ms']:.3f} ms"
                )
            print(line)
    for key in ("json-c8", "sse-c8"):
        rows = summary[key]
        print(f"\n### (b) over HTTP, {key.replace('-c', ' c=')}: throughput\n")
        print(
            "| target | req/s | rounds/s | ratio to no tools | p50 ms | p99 ms "
            "| gateway CPU µs/req | MCP server CPU µs/req | bg CPU % |"
        )
        print("|---|---|---|---|---|---|---|---|---|")
        none = rows["no tools"]["rps"]
        for label, row in rows.items():
            k = int(label.rsplit("=", 1)[1]) if "K=" in label else 1
            cpu = "-" if label == "direct" else fmt(row["server_cpu_us_per_req"], 0)
            ratio = "-" if label == "direct" else f"{row['rps'] / none:.3f}"
            print(
                f"| {label} | {fmt(row['rps'])} | {fmt(row['rps'] * k)} | {ratio} "
                f"| {fmt(row['p50_ms'])} | {fmt(row['p99_ms'])} | {cpu} "
                f"| {fmt(row['mcp_server_cpu_us_per_req'], 0)} | {fmt(row['bg_cpu_pct_max'], 0)} |"
            )


class BenchToolKit:
    """The gateway's own toolkit, plus the bench's instant tool for ``{"type": "instant"}``."""

    def __init__(self, real: Any) -> None:
        self.real = real
        self.instant = InstantToolKit()

    @staticmethod
    def _instant(body: JsonObject) -> bool:
        return any(
            isinstance(t, dict) and t.get("type") == "instant" for t in body.get("tools") or []
        )

    def involves_gateway(self, body: JsonObject, items: list[JsonObject]) -> bool:
        return self._instant(body) or bool(self.real.involves_gateway(body, items))

    @property
    def include_values(self) -> frozenset[str]:
        return frozenset(self.real.include_values)

    def secret_fields(self, tool_type: str) -> frozenset[str]:
        return frozenset(self.real.secret_fields(tool_type))

    async def prepare(
        self,
        body: JsonObject,
        history: list[JsonObject],
        new_input: list[JsonObject],
        context: Any = None,
    ) -> Any:
        kit = self.instant if self._instant(body) else self.real
        # The context names the request's engine session: without it every request would share
        # one session (id ""), whose history the mcp engine loads and saves on every call.
        return await kit.prepare(body, history, new_input, context)


def serve_gateway(argv: list[str]) -> None:
    """``bench/gateway_launcher.py`` with ``app.main.build_toolkit`` wrapped at run time so that
    the gateway also serves the instant tool (benchmark only; app/ is not changed)."""
    import app.main as wiring

    build = wiring.build_toolkit

    def build_toolkit(settings: Any, *args: Any) -> Any:
        toolkit, resources = build(settings, *args)
        return BenchToolKit(toolkit), resources

    wiring.build_toolkit = build_toolkit
    import gateway_launcher

    sys.argv = ["gateway_launcher.py", *argv]
    gateway_launcher.main()


# ============================================================================= main


def main() -> int:
    if len(sys.argv) > 1 and sys.argv[1] == "--serve-gateway":
        serve_gateway(sys.argv[2:])
        return 0
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="fewer K, iterations and seconds: < 60 s")
    ap.add_argument("--part", choices=("all", "inproc", "http"), default="all")
    ap.add_argument("--ks", help="round counts, comma list (default 1,2,4,8,16; quick 1,2,8)")
    ap.add_argument("--http-ks", help="round counts over HTTP (default 1,2,4; quick 1,2)")
    ap.add_argument("--iterations", type=int, help="(a) responses per K (1000; quick 300)")
    ap.add_argument(
        "--mcp",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="(a) also with the real MCP tool (default on)",
    )
    ap.add_argument("--no-profile", action="store_true", help="(a) skip the cProfile pass")
    ap.add_argument(
        "--with-url",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="(b) also the MCP tool by server_url (default: on, off with --quick)",
    )
    ap.add_argument("--store", action="store_true", help='store responses (default "store": false)')
    ap.add_argument("--duration", type=float, help="(b) seconds per load run (3; quick 1)")
    ap.add_argument("--rounds", type=int, help="(b) repeats of every scenario (2; quick 1)")
    ap.add_argument("--shared-bench", type=Path, default=DEFAULT_SHARED_BENCH)
    ap.add_argument("--loop", choices=("uvloop", "asyncio"), default="uvloop")
    ap.add_argument("--out", type=Path, default=Path("/tmp/respgate-loop-bench.json"))
    ap.add_argument("--ref", help="measure this git commit's app/ (see bench/README.md)")
    ap.add_argument("--serve-mock", type=int, metavar="PORT", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.serve_mock:
        serve_mock(args.serve_mock, args.shared_bench.resolve())
        return 0
    provenance = use_ref(args.ref)
    sys.path.insert(0, str(app_root()))
    if args.with_url is None:
        args.with_url = not args.quick
    ks = [int(k) for k in (args.ks or ("1,2,8" if args.quick else "1,2,4,8,16")).split(",")]
    http_ks = [int(k) for k in (args.http_ks or ("1,2" if args.quick else "1,2,4")).split(",")]
    for group in (ks, http_ks):
        if 1 not in group or len(group) < 2:
            raise SystemExit("round counts must include 1 and one more value")
    iterations = args.iterations or (300 if args.quick else 1000)
    info = machine_info()
    print(
        f"# loop_bench: app from {provenance['source']} (HEAD {provenance['head']}, app/ dirty: "
        f"{provenance['app_dirty']}, digest {provenance['app_sha256']}); {info.get('cpus')} CPUs, "
        f"loadavg {' '.join(info.get('loadavg', []))}; store={'on' if args.store else 'off'}",
        flush=True,
    )
    started = time.monotonic()
    result: dict[str, Any] = {
        "when": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "machine": info,
        "app": provenance,
        "argv": sys.argv[1:],
    }
    if args.part in ("all", "inproc"):
        warmup = max(iterations // 10, 20)
        result["inproc"] = run_loop(inproc_instant(ks, iterations, warmup, args.store), args.loop)
        if args.mcp:
            mcp_ks = [k for k in ks if k <= 4] or [1, 2]
            with running([server := counter_server(free_port())]):
                result["inproc_mcp"] = run_loop(
                    inproc_mcp(mcp_url(server), mcp_ks, max(iterations // 5, 50), 10, args.store),
                    args.loop,
                )
        if not args.no_profile:
            result["profile"] = run_loop(
                profile_inproc(max(ks), 60 if args.quick else 200, args.store), args.loop
            )
    if args.part in ("all", "http"):
        result["http"] = run_http(args, http_ks)
    result["elapsed_s"] = round(time.monotonic() - started, 1)
    print(f"\nwall time {result['elapsed_s']:.0f} s; raw results in {args.out}")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
