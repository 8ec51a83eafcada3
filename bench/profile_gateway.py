"""Where does the gateway's per-request CPU go?

    python bench/profile_gateway.py                 # both parts, ~1 min
    python bench/profile_gateway.py --part micro    # in-process component timings only
    python bench/profile_gateway.py --part live     # sampling profile of the running server

Part ``micro`` (no sockets): the real ``create_app`` app called as an ASGI callable with an
in-process upstream that returns the mock upstream's own bytes (``MockCore`` from
shared/bench/mock_upstream.py, imported by path), decoded the way the HTTP adapter decodes them
(``orjson.loads``; ``parse_sse_lines`` for streams). Each component is timed alone, best of
several repeats, in µs per request, and compared with the floors a framework imposes: the same
FastAPI app with a trivial endpoint, a bare Starlette route, Starlette's StreamingResponse vs
sse-starlette's EventSourceResponse for the same frames.

Part ``live``: the gateway under uvicorn (``bench/gateway_launcher.py --profile pyinstrument``)
behind the real mock upstream, saturated by load.py at c=32 (so the process is busy for the
whole window and wall-clock samples are CPU), for JSON and for SSE. Samples are grouped by
package (uvicorn, fastapi, starlette, sse-starlette + anyio, aiohttp, pydantic, app.*, stdlib
copy, event loop) and reported as a share of samples and as µs per request, scaled to the CPU
per request the same run measured without the profiler attached.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import importlib.util
import json
import os
import signal
import sys
import tempfile
import time
from collections import defaultdict
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import _harness
from _harness import (
    BODY,
    DEFAULT_SHARED_BENCH,
    Server,
    free_port,
    mock_server,
    run_load,
    running,
    use_ref,
)

# Module level on purpose: FastAPI resolves the (string) annotations of the endpoints below
# against this module's globals.
from starlette.requests import Request
from starlette.responses import Response

# --------------------------------------------------------------------------------------------
# part 1: in-process component timings
# --------------------------------------------------------------------------------------------


def load_mock_core(shared: Path, deltas: int = 20) -> Any:
    spec = importlib.util.spec_from_file_location("_mock_upstream", shared / "mock_upstream.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.MockCore(deltas=deltas)


async def one_chunk(data: bytes) -> AsyncIterator[bytes]:
    yield data


async def drain(events: AsyncIterator[Any]) -> None:
    async for _ in events:
        pass


async def parse_frames_whatif(chunks: AsyncIterator[bytes]) -> AsyncIterator[dict[str, Any]]:
    """What-if only (not a drop-in: ``\\n\\n`` separators, one ``data:`` line per frame):
    how much a parser working on whole network chunks saves over one async step per line."""
    import orjson

    buffer = b""
    async for chunk in chunks:
        buffer += chunk
        *frames, buffer = buffer.split(b"\n\n")
        for frame in frames:
            start = frame.find(b"data:")
            if start >= 0:
                event = orjson.loads(frame[start + 5 :])
                if "type" not in event and frame.startswith(b"event:"):
                    event["type"] = frame[6 : frame.find(b"\n")].strip().decode()
                yield event


class InProcessUpstream:
    """``core.ports.Upstream`` answering with the mock's bytes, decoded like the HTTP adapter."""

    def __init__(self, json_body: bytes, sse_bytes: bytes) -> None:
        self.json_body = json_body
        self.sse_lines = [line + b"\n" for line in sse_bytes.split(b"\n")]

    async def create_response(self, body: dict[str, Any], headers: Mapping[str, str]) -> Any:
        import orjson

        from app.upstream.http import decode_json_object as decode_response

        orjson.dumps(body)  # what the adapter serializes
        return decode_response(self.json_body)

    async def stream_response(self, body: dict[str, Any], headers: Mapping[str, str]) -> Any:
        import orjson

        from app.upstream.sse import parse_sse_lines

        orjson.dumps(body)
        lines = self.sse_lines

        class _Stream:
            def __aiter__(self) -> AsyncIterator[dict[str, Any]]:
                async def gen() -> AsyncIterator[bytes]:
                    # The first event comes after a wait, as from the network: the response's
                    # opening events go out first (the gateway sends what it made before it
                    # waits), so "time to the first body chunk" is not the whole stream.
                    await asyncio.sleep(0)
                    for line in lines:
                        yield line

                return parse_sse_lines(gen()).__aiter__()

            async def aclose(self) -> None:
                return None

        return _Stream()

    async def list_models(self, headers: Mapping[str, str]) -> Any:
        raise NotImplementedError

    async def check_ready(self) -> bool:
        return True

    async def aclose(self) -> None:
        return None


def asgi_scope(path: str, body: bytes) -> dict[str, Any]:
    return {
        "type": "http",
        "asgi": {"version": "3.0", "spec_version": "2.3"},
        "http_version": "1.1",
        "method": "POST",
        "scheme": "http",
        "path": path,
        "raw_path": path.encode(),
        "root_path": "",
        "query_string": b"",
        "headers": [
            (b"host", b"127.0.0.1"),
            (b"content-type", b"application/json"),
            (b"content-length", str(len(body)).encode()),
        ],
        "client": ("127.0.0.1", 1234),
        "server": ("127.0.0.1", 9000),
        "state": {},
    }


FIRST_BODY: list[float] = []  # perf_counter() of the first non-empty body chunk of each call


async def call_asgi(app: Any, path: str, body: bytes) -> tuple[int, bytes]:
    sent = False
    first = True
    never = asyncio.Event()
    status = 0
    chunks: list[bytes] = []

    async def receive() -> dict[str, Any]:
        nonlocal sent
        if not sent:
            sent = True
            return {"type": "http.request", "body": body, "more_body": False}
        await never.wait()
        return {"type": "http.disconnect"}

    async def send(message: dict[str, Any]) -> None:
        nonlocal status, first
        if message["type"] == "http.response.start":
            status = message["status"]
        elif message["type"] == "http.response.body":
            chunk = message.get("body", b"")
            if first and chunk:
                first = False
                FIRST_BODY.append(time.perf_counter())
            chunks.append(chunk)

    await app(asgi_scope(path, body), receive, send)
    return status, b"".join(chunks)


async def timeit_async(fn: Callable[[], Awaitable[Any]], n: int, repeats: int) -> float:
    """Best-of-``repeats`` mean µs per call of ``n`` awaited calls."""
    for _ in range(min(n, 200)):
        await fn()
    best = float("inf")
    for _ in range(repeats):
        t0 = time.perf_counter()
        for _ in range(n):
            await fn()
        best = min(best, (time.perf_counter() - t0) / n)
    return best * 1e6


def timeit_sync(fn: Callable[[], Any], n: int, repeats: int) -> float:
    for _ in range(min(n, 200)):
        fn()
    best = float("inf")
    for _ in range(repeats):
        t0 = time.perf_counter()
        for _ in range(n):
            fn()
        best = min(best, (time.perf_counter() - t0) / n)
    return best * 1e6


async def micro(shared: Path, n: int, repeats: int) -> list[tuple[str, float, str]]:
    import copy

    import orjson
    from fastapi import FastAPI
    from sse_starlette import EventSourceResponse
    from starlette.applications import Starlette
    from starlette.responses import StreamingResponse
    from starlette.routing import Route

    from app.api.sse import encode_event
    from app.api.sse_response import EventStreamResponse
    from app.core.response import (
        ResponseOutcome,
        build_response,
        normalize_item,
        normalize_usage,
    )
    from app.core.tenancy import DEFAULT_TENANT
    from app.main import create_app
    from app.protocol.requests import CreateResponseRequest, ParsedRequest
    from app.settings import Settings

    def parsed(body: dict[str, Any]) -> ParsedRequest:
        """What the route hands the service: the body validated, for the default tenant."""
        return ParsedRequest.from_body(dict(body), DEFAULT_TENANT)

    core = load_mock_core(shared)
    json_body = core.responses(dict(BODY)).body
    sse_bytes = b"".join(core.responses({**BODY, "stream": True}).events)
    upstream = InProcessUpstream(json_body, sse_bytes)
    stack = contextlib.AsyncExitStack()

    async def started_app(up: InProcessUpstream) -> Any:
        # The app's own lifespan wires the service (and whatever it needs) as in production.
        settings = Settings(
            upstream_url="http://127.0.0.1:1",
            data_dir=Path(tempfile.mkdtemp(prefix="respgate-profile-data-")),
        )
        started = create_app(settings, upstream=up)
        await stack.enter_async_context(started.router.lifespan_context(started))
        return started

    app = await started_app(upstream)
    service = app.state.gateway.service
    req = orjson.dumps(BODY)
    req_stream = orjson.dumps({**BODY, "stream": True})
    status, out = await call_asgi(app, "/v1/responses", req)
    assert status == 200, out
    status, out = await call_asgi(app, "/v1/responses", req_stream)
    assert status == 200 and b"response.completed" in out, out[-300:]
    n_events = out.count(b"\nevent: ") + 1
    upstream_data = orjson.loads(json_body)
    built = await service.create(parsed(BODY), {})

    # floors: the same FastAPI stack (error handlers included) with a trivial endpoint; Starlette
    fast = FastAPI(docs_url=None, redoc_url=None)

    @fast.post("/v1/responses")
    async def trivial(request: Request) -> Response:
        await request.body()
        return Response(json_body, media_type="application/json")

    async def star_ep(request: Request) -> Response:
        await request.body()
        return Response(json_body, media_type="application/json")

    events_out: list[dict[str, Any]] = []
    async for e in await service.open_stream(parsed({**BODY, "stream": True}), {}):
        events_out.append(e)
    frames = [encode_event(e) for e in events_out] + [b"data: [DONE]\n\n"]

    async def gen_frames() -> AsyncIterator[bytes]:
        for f in frames:
            yield f

    async def star_stream(request: Request) -> Response:
        await request.body()
        return StreamingResponse(gen_frames(), media_type="text/event-stream")

    async def star_sse(request: Request) -> Response:
        await request.body()
        return EventSourceResponse(gen_frames(), ping=15, sep="\n")

    async def star_own(request: Request) -> Response:
        await request.body()
        return EventStreamResponse(gen_frames(), ping=15)

    star = Starlette(
        routes=[
            Route("/json", star_ep, methods=["POST"]),
            Route("/stream", star_stream, methods=["POST"]),
            Route("/sse", star_sse, methods=["POST"]),
            Route("/own", star_own, methods=["POST"]),
        ]
    )
    fast_route = FastAPI(docs_url=None, redoc_url=None)
    fast_route.add_route("/v1/responses", star_ep, methods=["POST"])
    for check_app, path, check_body in (
        (fast, "/v1/responses", req),
        (star, "/json", req),
        (fast_route, "/v1/responses", req),
        (star, "/stream", req),
        (star, "/sse", req),
    ):
        status, out = await call_asgi(check_app, path, check_body)
        assert status == 200, (path, status, out[:200])

    async def consume_stream() -> None:
        async for _ in await service.open_stream(parsed({**BODY, "stream": True}), {}):
            pass

    async def consume_stream_encoded() -> None:
        async for e in await service.open_stream(parsed({**BODY, "stream": True}), {}):
            encode_event(e)

    async def parse_only() -> None:
        async for _ in await upstream.stream_response({}, {}):
            pass

    defaults_copy = {
        "metadata": {},
        "reasoning": {"effort": None, "summary": None},
        "text": {"format": {"type": "text"}},
        "tools": [],
    }

    rows: list[tuple[str, float, str]] = []

    def add(name: str, us: float, note: str = "") -> None:
        rows.append((name, us, note))
        print(f"  {name:72s} {us:8.1f} µs  {note}", flush=True)

    print("non-streaming (per request):")
    add(
        "full app, ASGI call, in-process upstream (JSON)",
        await timeit_async(lambda: call_asgi(app, "/v1/responses", req), n, repeats),
        "everything but sockets, uvicorn and aiohttp",
    )
    add(
        "  FastAPI app, trivial POST endpoint (framework floor)",
        await timeit_async(lambda: call_asgi(fast, "/v1/responses", req), n, repeats),
    )
    add(
        "  FastAPI app, same endpoint as a plain Starlette Route (app.add_route)",
        await timeit_async(lambda: call_asgi(fast_route, "/v1/responses", req), n, repeats),
    )
    add(
        "  bare Starlette route, same trivial endpoint",
        await timeit_async(lambda: call_asgi(star, "/json", req), n, repeats),
    )
    add(
        "  CreateResponseRequest.model_validate(body)",
        timeit_sync(lambda: CreateResponseRequest.model_validate(dict(BODY)), n, repeats),
    )
    add(
        "  ResponsesService.create (in-process upstream; store write included if any)",
        await timeit_async(lambda: service.create(parsed(BODY), {}), n, repeats),
    )
    add(
        "    build_response(...)",
        timeit_sync(
            lambda: build_response(
                BODY, "resp_x", 1, ResponseOutcome("completed", [], upstream=upstream_data)
            ),
            n,
            repeats,
        ),
    )
    add(
        "      of which copy.deepcopy of the 4 dict/list defaults",
        timeit_sync(lambda: [copy.deepcopy(v) for v in defaults_copy.values()], n, repeats),
    )
    add(
        "    copy.deepcopy + normalize_item of the upstream output",
        timeit_sync(
            lambda: [normalize_item(copy.deepcopy(i)) for i in upstream_data["output"]], n, repeats
        ),
    )
    add(
        "    normalize_usage",
        timeit_sync(lambda: normalize_usage(upstream_data["usage"]), n, repeats),
    )
    add("  orjson.dumps(response)", timeit_sync(lambda: orjson.dumps(built), n, repeats))

    print(f"streaming (per stream of {n_events} client events):")
    add(
        "full app, ASGI call, in-process upstream (SSE)",
        await timeit_async(lambda: call_asgi(app, "/v1/responses", req_stream), n // 4, repeats),
        "everything but sockets, uvicorn and aiohttp",
    )

    async def first_byte(path: str, payload: bytes) -> float:
        t0 = time.perf_counter()
        await call_asgi(app, path, payload)
        return (FIRST_BODY[-1] - t0) * 1e6

    samples = sorted([await first_byte("/v1/responses", req_stream) for _ in range(n // 4)])
    add(
        "  time to the first body chunk (median; JSON full request for comparison below)",
        samples[len(samples) // 2],
    )
    samples = sorted([await first_byte("/v1/responses", req) for _ in range(n // 4)])
    add("    JSON: time to the (only) body chunk (median)", samples[len(samples) // 2])

    async def first_byte_star(path: str) -> float:
        t0 = time.perf_counter()
        await call_asgi(star, path, req)
        return (FIRST_BODY[-1] - t0) * 1e6

    for path, label in (
        ("/sse", "sse-starlette EventSourceResponse"),
        ("/own", "the gateway's EventStreamResponse"),
        ("/stream", "Starlette StreamingResponse"),
    ):
        samples = sorted([await first_byte_star(path) for _ in range(n // 4)])
        add(
            f"    bare Starlette, pre-encoded frames, {label}: first chunk (median)",
            samples[len(samples) // 2],
        )
    add(
        "  parse_sse_lines over the upstream bytes", await timeit_async(parse_only, n // 4, repeats)
    )
    add(
        "  service.open_stream consumed (parse, accumulator, lifecycle, store if any)",
        await timeit_async(consume_stream, n // 4, repeats),
    )
    add(
        "  ... + encode_event per event",
        await timeit_async(consume_stream_encoded, n // 4, repeats),
    )
    snapshot = events_out[0]["response"]
    add(
        "  ResponseLifecycle.opening's 2 x copy.deepcopy(snapshot)",
        timeit_sync(lambda: (copy.deepcopy(snapshot), copy.deepcopy(snapshot)), n, repeats),
    )
    add(
        "    what-if: 2 x orjson.loads(orjson.dumps(snapshot))",
        timeit_sync(
            lambda: (orjson.loads(orjson.dumps(snapshot)), orjson.loads(orjson.dumps(snapshot))),
            n,
            repeats,
        ),
    )
    whole = b"".join(upstream.sse_lines)
    add(
        "    what-if: chunk-level SSE parser (split frames, orjson.loads)",
        await timeit_async(lambda: drain(parse_frames_whatif(one_chunk(whole))), n // 4, repeats),
        "vs parse_sse_lines above",
    )
    long_core = load_mock_core(shared, deltas=1000)
    long_sse = b"".join(long_core.responses({**BODY, "stream": True}).events)
    long_service = (await started_app(InProcessUpstream(json_body, long_sse))).state.gateway.service

    async def consume_long() -> None:
        async for _ in await long_service.open_stream(parsed({**BODY, "stream": True}), {}):
            pass

    long_us = await timeit_async(consume_long, max(n // 100, 20), repeats)
    add(
        "  service.open_stream consumed, 1,000 deltas (per stream)",
        long_us,
        f"{long_us / 1008:.1f} µs per event",
    )
    add(
        "  sse-starlette EventSourceResponse of the same frames (bare Starlette)",
        await timeit_async(lambda: call_asgi(star, "/sse", req), n // 4, repeats),
    )
    add(
        "  the gateway's EventStreamResponse of the same frames (bare Starlette)",
        await timeit_async(lambda: call_asgi(star, "/own", req), n // 4, repeats),
    )
    add(
        "  Starlette StreamingResponse of the same frames",
        await timeit_async(lambda: call_asgi(star, "/stream", req), n // 4, repeats),
    )
    await stack.aclose()
    return rows


# --------------------------------------------------------------------------------------------
# part 2: live sampling profile
# --------------------------------------------------------------------------------------------

BUCKETS = (
    ("sse_starlette", "sse-starlette"),
    ("/anyio/", "anyio (sse-starlette's task group, cancel scopes)"),
    ("/uvicorn/", "uvicorn (HTTP server protocol)"),
    ("/fastapi/", "fastapi (routing, dependencies, middleware)"),
    ("/starlette/", "starlette (requests, responses, middleware)"),
    ("/aiohttp/", "aiohttp (upstream client)"),
    ("/yarl/", "aiohttp (upstream client)"),
    ("/multidict/", "aiohttp (upstream client)"),
    ("/pydantic", "pydantic"),
    ("/sqlalchemy/", "store (SQLAlchemy, aiosqlite, asyncpg)"),
    ("/aiosqlite/", "store (SQLAlchemy, aiosqlite, asyncpg)"),
    ("/asyncpg/", "store (SQLAlchemy, aiosqlite, asyncpg)"),
    ("/app/store/", "store (app.store)"),
    ("/opentelemetry/", "fastapi (routing, dependencies, middleware)"),
    ("/app/api/", "app.api"),
    ("/app/core/", "app.core"),
    ("/app/upstream/", "app.upstream"),
    ("/app/protocol/", "app.core"),
    ("/copy.py", "stdlib copy.deepcopy"),
    ("/asyncio/", "asyncio + uvloop (event loop, C I/O)"),
    ("/uvloop/", "asyncio + uvloop (event loop, C I/O)"),
    ("/logging/", "logging"),
    ("/contextlib.py", "contextlib"),
)

# Functions whose inclusive time is worth reporting (matched on "file:function").
FOCUS = (
    ("app/api/body.py", "validate", "pydantic request validation (app.api.body.validate)"),
    ("app/api/body.py", "read_json_object", "read + parse body (read_json_object)"),
    ("app/core/response.py", "build_response", "build_response"),
    ("app/core/service.py", "create", "ResponsesService.create (incl. upstream call)"),
    ("app/upstream/responses.py", "create_response", "ResponsesUpstream.create_response (aiohttp)"),
    ("app/core/service.py", "_stream", "ResponsesService._stream (incl. upstream read)"),
    ("app/core/accumulator.py", "feed", "ResponseAccumulator.feed"),
    ("app/core/stream.py", "opening", "ResponseLifecycle.opening (2 deepcopies)"),
    ("app/upstream/sse.py", "parse_sse_lines", "parse_sse_lines (incl. reading upstream)"),
    ("app/core/service.py", "_persist", "ResponsesService._persist (store write, main thread)"),
    ("app/core/service.py", "_prepare", "ResponsesService._prepare (history rehydration)"),
    ("app/api/sse.py", "encode_event", "encode_event"),
    ("copy.py", "deepcopy", "copy.deepcopy (all callers)"),
    ("fastapi/dependencies/utils.py", "solve_dependencies", "fastapi solve_dependencies"),
    ("sse_starlette/sse.py", "_send_with_timeout", "sse-starlette _send_with_timeout (per event)"),
    ("uvicorn/protocols/http/httptools_impl.py", "send", "uvicorn send (ASGI -> socket)"),
)


def bucket_of(path: str) -> str:
    for needle, name in BUCKETS:
        if needle in path:
            return name
    if "/site-packages/" in path:
        return "other third-party"
    if "/lib/python3" in path:
        return "other stdlib"
    return "other"


def analyse_session(session_file: Path) -> tuple[dict[str, float], dict[str, float], float]:
    from pyinstrument.session import Session

    session = Session.load(str(session_file))
    root = session.root_frame()
    self_by_bucket: dict[str, float] = defaultdict(float)
    focus_incl: dict[str, float] = defaultdict(float)
    total = root.time if root is not None else 0.0

    loop_bucket = "asyncio + uvloop (event loop, C I/O)"

    def walk(frame: Any, active: frozenset[str], parent_bucket: str) -> None:
        path = frame.file_path or ""
        fn = frame.function or ""
        # Built-ins (dict.get, orjson.loads, socket writes...) and frozen stdlib helpers count
        # for the package that called them; pyinstrument also charges C work done inside a
        # Python function to that function. Frames without a file are the event loop's root.
        if not path:
            bucket = loop_bucket
        elif path.startswith("<"):
            bucket = parent_bucket
        else:
            bucket = bucket_of(path)
        self_by_bucket[bucket] += frame.total_self_time
        now = set(active)
        for file_part, func, label in FOCUS:
            if fn == func and path.endswith(file_part) and label not in active:
                focus_incl[label] += frame.time
                now.add(label)
        for child in frame.children:
            if not child.is_synthetic:  # "[self]" frames: already in the parent's total_self_time
                walk(child, frozenset(now), bucket)

    if root is not None:
        walk(root, frozenset(), loop_bucket)
    return dict(self_by_bucket), dict(focus_incl), total


def live(shared: Path, duration: float, out_dir: Path) -> dict[str, Any]:
    results: dict[str, Any] = {}
    mock = mock_server(shared, free_port(), None)
    plain_port = free_port()
    plain = Server(
        "gateway-plain",
        [
            sys.executable,
            str(Path(__file__).parent / "gateway_launcher.py"),
            "--upstream-url",
            mock.base,
            "--port",
            str(plain_port),
        ],
        plain_port,
    )
    with running([mock, plain]):
        baseline = {}
        for stream in (False, True):
            run_load(
                shared,
                plain.base + "/v1/responses",
                concurrency=32,
                duration=1,
                stream=stream,
                server=plain,
            )
            res = run_load(
                shared,
                plain.base + "/v1/responses",
                concurrency=32,
                duration=duration,
                stream=stream,
                server=plain,
            )
            baseline["sse" if stream else "json"] = res
    for stream in (False, True):
        mode = "sse" if stream else "json"
        session_file = out_dir / f"gateway-{mode}.pyisession"
        port = free_port()
        mock = mock_server(shared, free_port(), None)
        prof = Server(
            f"gateway-prof-{mode}",
            [
                sys.executable,
                str(Path(__file__).parent / "gateway_launcher.py"),
                "--upstream-url",
                mock.base,
                "--port",
                str(port),
                "--profile",
                "pyinstrument",
                "--profile-signals",
                "--profile-out",
                str(session_file),
            ],
            port,
        )
        with running([mock, prof]):
            run_load(
                shared,
                prof.base + "/v1/responses",
                concurrency=32,
                duration=1,
                stream=stream,
                server=prof,
            )
            assert prof.proc is not None
            os.kill(prof.proc.pid, signal.SIGUSR1)
            res = run_load(
                shared,
                prof.base + "/v1/responses",
                concurrency=32,
                duration=duration,
                stream=stream,
                server=prof,
                warmup=0,
            )
            os.kill(prof.proc.pid, signal.SIGUSR2)
            deadline = time.monotonic() + 60
            while not session_file.exists() and time.monotonic() < deadline:
                time.sleep(0.2)
            time.sleep(0.5)
        buckets, focus, total = analyse_session(session_file)
        base = baseline[mode]
        # pyinstrument samples the main thread (the event loop): shares scale its CPU; worker
        # threads (aiosqlite's connection thread, executors) are reported on their own.
        cpu_us = base.get("server_main_thread_cpu_us_per_req", base["server_cpu_us_per_req"])
        other_us = base.get("server_other_threads_cpu_us_per_req", 0.0)
        results[mode] = {
            "requests_profiled": res["requests"],
            "profiled_rps": res["rps"],
            "unprofiled_rps": base["rps"],
            "unprofiled_cpu_us_per_req": base["server_cpu_us_per_req"],
            "unprofiled_main_thread_cpu_us_per_req": cpu_us,
            "unprofiled_other_threads_cpu_us_per_req": other_us,
            "sampled_s": total,
            "buckets_share": {k: v / total for k, v in buckets.items()} if total else {},
            "focus_share": {k: v / total for k, v in focus.items()} if total else {},
            "session_file": str(session_file),
        }
        print(
            f"\nlive {mode.upper()} c=32: {base['rps']:,.0f} req/s and "
            f"{base['server_cpu_us_per_req']:.0f} µs CPU/req without the profiler (main thread "
            f"{cpu_us:.0f}, worker threads {other_us:.0f}); {res['rps']:,.0f} req/s with it; "
            f"{total:.1f} s sampled"
        )
        print("  (shares are of main-thread samples; µs/req = share x main-thread CPU/req)")
        print(f"  {'self time by package':58s} {'share':>6s} {'µs/req':>8s}")
        for name, t in sorted(buckets.items(), key=lambda kv: -kv[1]):
            if t / total >= 0.005:
                print(f"  {name:58s} {t / total:6.1%} {t / total * cpu_us:8.0f}")
        print(f"  {'inclusive time of selected functions':58s}")
        for name, t in sorted(focus.items(), key=lambda kv: -kv[1]):
            print(f"  {name:58s} {t / total:6.1%} {t / total * cpu_us:8.0f}")
    return results


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--part", choices=("all", "micro", "live"), default="all")
    ap.add_argument("--shared-bench", type=Path, default=DEFAULT_SHARED_BENCH)
    ap.add_argument("-n", type=int, default=2000, help="iterations per micro timing")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--duration", type=float, default=8.0, help="seconds of load per live profile")
    ap.add_argument("--out", type=Path, default=Path("/tmp/respgate-profile.json"))
    ap.add_argument(
        "--ref",
        help="measure this git commit (exported with git archive to a temp dir) instead of "
        "the work tree",
    )
    args = ap.parse_args()
    provenance = use_ref(args.ref)
    print(
        f"# app from {provenance['source']} (HEAD {provenance['head']}, "
        f"app/ dirty: {provenance['app_dirty']}, app/ digest {provenance['app_sha256']})"
    )
    shared = args.shared_bench.resolve()
    sys.path.insert(0, str(_harness.APP_ROOT))
    result: dict[str, Any] = {"app": provenance}
    if args.part in ("all", "micro"):
        try:
            import uvloop

            uvloop.install()
        except ImportError:
            pass
        rows = asyncio.run(micro(shared, args.n, args.repeats))
        result["micro_us"] = {name.strip(): us for name, us, _ in rows}
    if args.part in ("all", "live"):
        out_dir = Path(tempfile.mkdtemp(prefix="respgate-profile-"))
        result["live"] = live(shared, args.duration, out_dir)
    args.out.write_text(json.dumps(result, indent=2))
    print(f"\nwritten {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
