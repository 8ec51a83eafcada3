"""What request ids and tracing add to a request, in one process: the gateway without the
request-id middleware (as before issue 18), as it ships (request ids; ``[tracing]`` off), and
with ``[tracing]`` on (the spans handed to an exporter that drops them).

The apps run here (httpx's ASGI transport, no sockets) over the same in-memory upstream
(``messages_bench.InstantUpstream``), each on its own SQLite store (``store`` true, the
clients' default), and the requests alternate between them so all see the same machine noise.
Clients send no ``x-request-id``: the gateway makes one for each request (the dearer case).

    .venv/bin/python bench/request_id_bench.py [--requests 2000] [--warmup 200]

Prints the median and p90 per request (µs) of each app and the differences; nothing asserts.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import httpx
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export import SimpleSpanProcessor, SpanExporter, SpanExportResult

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _ab import asgi_client, each_client, summary
from messages_bench import InstantUpstream

from app.api.request_id import RequestIdMiddleware
from app.main import create_app
from app.settings import Settings
from app.telemetry import provider

BODY: dict[str, Any] = {"model": "m", "input": "What is the weather in Paris?"}
CASES = ("no request ids", "request ids", "tracing on")


class DroppingExporter(SpanExporter):
    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        return SpanExportResult.SUCCESS


def build(case: str) -> Any:
    data_dir = Path(tempfile.mkdtemp(prefix="respgate-request-id-bench-"))
    tracing = {"enabled": case == "tracing on"}
    app = create_app(Settings(data_dir=data_dir, tracing=tracing), upstream=InstantUpstream())  # type: ignore[arg-type]
    if case == "no request ids":
        del app.build_middleware_stack  # Starlette's own: no request-id middleware
    return app


async def middleware_alone(calls: int) -> tuple[float, float]:
    """µs per call of a bare ASGI app answering 200, without and with the request-id
    middleware around it (a request with eight headers and no ``x-request-id``): the
    middleware's own cost, which the whole-request figures are too noisy to resolve."""

    async def bare(scope: Any, receive: Any, send: Any) -> None:
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"{}"})

    async def receive() -> Any:
        return {"type": "http.request", "body": b""}

    async def send(message: Any) -> None:
        return None

    headers = [(f"x-header-{i}".encode(), b"value") for i in range(8)]
    scope = {"type": "http", "method": "POST", "path": "/v1/responses", "headers": headers}
    wrapped = RequestIdMiddleware(bare)
    best: dict[str, float] = {}
    for _ in range(5):  # best of five rounds, alternating
        for name, app in (("bare", bare), ("wrapped", wrapped)):
            started = time.perf_counter()
            for _ in range(calls):
                await app(scope, receive, send)
            elapsed = (time.perf_counter() - started) / calls * 1e6
            best[name] = min(best.get(name, elapsed), elapsed)
    return best["bare"], best["wrapped"]


async def main(requests: int, warmup: int) -> None:
    bare, wrapped = await middleware_alone(100_000)
    print(
        f"request-id middleware alone: {bare:.2f} µs bare app, {wrapped:.2f} µs wrapped "
        f"(+{wrapped - bare:.2f} µs per request)"
    )
    provider.span_processor = lambda endpoint: SimpleSpanProcessor(DroppingExporter())
    async with contextlib.AsyncExitStack() as stack:
        clients: dict[str, httpx.AsyncClient] = {}
        for case in CASES:
            clients[case] = await asgi_client(stack, build(case))
        print(f"{requests} sequential requests per case (after {warmup} warm-up), p50 µs")
        results: dict[str, Any] = {}
        for stream in (False, True):
            body = {**BODY, "stream": stream}
            await each_client(clients, body, warmup)
            samples = await each_client(clients, body, requests)
            figures = {case: summary(samples[case]) for case in CASES}
            base = figures["no request ids"][0]
            name = "stream" if stream else "json"
            results[name] = {case: {"p50": p50, "p90": p90} for case, (p50, p90) in figures.items()}
            print(
                f"{name:<7} "
                + "  ".join(
                    f"{case} {p50:6.0f} ({p50 - base:+5.0f}, p90 {p90:6.0f})"
                    for case, (p50, p90) in figures.items()
                )
            )
        print(json.dumps(results))


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=2000)
    parser.add_argument("--warmup", type=int, default=200)
    args = parser.parse_args()
    asyncio.run(main(args.requests, args.warmup))
