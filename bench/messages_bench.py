"""The Messages front end's added latency: ``POST /v1/messages`` vs ``POST /v1/responses``.

Both routes run in this process (httpx's ASGI transport, no sockets) over the same in-memory
upstream that answers at once with the same output (a message, or a reasoning item, a message
and a function call), so the difference between them is what the front end adds: translating
the request, the response or each stream event, and Anthropic's framing. Both send
``store: false`` (the Messages route always does), so neither pays for the store.

    .venv/bin/python bench/messages_bench.py [--requests 2000] [--warmup 200]

Prints the median and p90 per request of each route and the difference; nothing asserts.
"""

from __future__ import annotations

import argparse
import asyncio
import copy
import statistics
import tempfile
import time
from collections.abc import AsyncIterator, Mapping
from pathlib import Path
from typing import Any

import httpx

from app.core.ports import RawReply
from app.main import create_app
from app.settings import Settings

TEXT = "The quick brown fox jumps over the lazy dog. " * 8
OUTPUT: list[dict[str, Any]] = [
    {"id": "rs_1", "type": "reasoning", "summary": [],
     "content": [{"type": "reasoning_text", "text": "Thinking it over."}]},
    {"id": "msg_1", "type": "message", "role": "assistant", "status": "completed",
     "content": [{"type": "output_text", "text": TEXT, "annotations": []}]},
    {"id": "fc_1", "type": "function_call", "call_id": "call_1", "name": "lookup",
     "arguments": '{"city": "Paris", "units": "metric"}', "status": "completed"},
]  # fmt: skip
USAGE = {"input_tokens": 40, "output_tokens": 60, "total_tokens": 100}


def stream_events() -> list[dict[str, Any]]:
    """The events a Responses server streams for ``OUTPUT`` (text in 16 deltas)."""
    events: list[dict[str, Any]] = [{"type": "response.created", "response": {}}]
    reasoning, text_item, call = OUTPUT
    address = {"item_id": "rs_1", "output_index": 0, "content_index": 0}
    added = "response.output_item.added"
    events += [
        {"type": added, "output_index": 0, "item": {**reasoning, "content": []}},
        {"type": "response.reasoning_text.delta", **address, "delta": "Thinking it over."},
        {"type": "response.output_item.done", "output_index": 0, "item": reasoning},
        {"type": added, "output_index": 1, "item": {**text_item, "content": []}},
        {"type": "response.content_part.added", "item_id": "msg_1", "output_index": 1,
         "content_index": 0, "part": {"type": "output_text", "text": "", "annotations": []}},
    ]  # fmt: skip
    step = len(TEXT) // 16 + 1
    for start in range(0, len(TEXT), step):
        events.append(
            {"type": "response.output_text.delta", "item_id": "msg_1", "output_index": 1,
             "content_index": 0, "delta": TEXT[start : start + step]}
        )  # fmt: skip
    events += [
        {"type": "response.output_text.done", "item_id": "msg_1", "output_index": 1,
         "content_index": 0, "text": TEXT},
        {"type": "response.content_part.done", "item_id": "msg_1", "output_index": 1,
         "content_index": 0, "part": text_item["content"][0]},
        {"type": "response.output_item.done", "output_index": 1, "item": text_item},
        {"type": added, "output_index": 2, "item": {**call, "arguments": ""}},
        {"type": "response.function_call_arguments.delta", "item_id": "fc_1", "output_index": 2,
         "delta": call["arguments"]},
        {"type": "response.output_item.done", "output_index": 2, "item": call},
        {"type": "response.completed",
         "response": {"status": "completed", "output": OUTPUT, "usage": USAGE}},
    ]  # fmt: skip
    return events


EVENTS = stream_events()


class _Events:
    def __init__(self) -> None:
        self._events = copy.deepcopy(EVENTS)

    def __aiter__(self) -> AsyncIterator[dict[str, Any]]:
        return self._iter()

    async def _iter(self) -> AsyncIterator[dict[str, Any]]:
        for event in self._events:
            yield event

    async def aclose(self) -> None:
        return None


class InstantUpstream:
    async def create_response(self, body: Any, headers: Mapping[str, str]) -> dict[str, Any]:
        return {"status": "completed", "output": copy.deepcopy(OUTPUT), "usage": USAGE}

    async def stream_response(self, body: Any, headers: Mapping[str, str]) -> _Events:
        return _Events()

    async def list_models(self, headers: Mapping[str, str]) -> RawReply:
        return RawReply(200, "application/json", b'{"object":"list","data":[]}')

    async def check_ready(self) -> bool:
        return True

    async def aclose(self) -> None:
        return None


TOOL_SCHEMA = {"type": "object", "properties": {"city": {"type": "string"}}}
PROMPT = "What is the weather in Paris? " * 4
RESPONSES_BODY = {
    "model": "m",
    "instructions": "Be brief.",
    "input": PROMPT,
    "max_output_tokens": 256,
    "store": False,
    "tools": [{"type": "function", "name": "lookup", "parameters": TOOL_SCHEMA}],
}
MESSAGES_BODY = {
    "model": "m",
    "system": "Be brief.",
    "messages": [{"role": "user", "content": PROMPT}],
    "max_tokens": 256,
    "tools": [{"name": "lookup", "input_schema": TOOL_SCHEMA}],
}


async def once(client: httpx.AsyncClient, path: str, body: dict[str, Any]) -> float:
    started = time.perf_counter()
    if body.get("stream"):
        async with client.stream("POST", path, json=body) as reply:
            async for _chunk in reply.aiter_bytes():
                pass
    else:
        reply = await client.post(path, json=body)
    elapsed = time.perf_counter() - started
    if reply.status_code != 200:
        raise SystemExit(f"{path}: HTTP {reply.status_code}")
    return elapsed


async def timed(client: httpx.AsyncClient, stream: bool, n: int) -> dict[str, list[float]]:
    """``n`` requests to each route, alternating, so both see the same machine noise."""
    out: dict[str, list[float]] = {"/v1/responses": [], "/v1/messages": []}
    bodies = {"/v1/responses": RESPONSES_BODY, "/v1/messages": MESSAGES_BODY}
    for _ in range(n):
        for path, body in bodies.items():
            out[path].append(await once(client, path, {**body, "stream": stream}))
    return out


def summary(samples: list[float]) -> tuple[float, float]:
    ordered = sorted(samples)
    return statistics.median(ordered) * 1e6, ordered[int(len(ordered) * 0.9)] * 1e6


async def main(requests: int, warmup: int) -> None:
    settings = Settings(data_dir=Path(tempfile.mkdtemp(prefix="respgate-bench-")))
    app = create_app(settings, upstream=InstantUpstream())  # type: ignore[arg-type]
    async with app.router.lifespan_context(app):
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://bench") as client:
            print(f"{requests} sequential requests per case (after {warmup} warm-up), µs")
            print(f"{'case':<10} {'responses p50':>14} {'messages p50':>13} {'added p50':>10}"
                  f" {'responses p90':>14} {'messages p90':>13}")  # fmt: skip
            for stream in (False, True):
                await timed(client, stream, warmup)
                samples = await timed(client, stream, requests)
                r50, r90 = summary(samples["/v1/responses"])
                m50, m90 = summary(samples["/v1/messages"])
                name = "stream" if stream else "json"
                added = m50 - r50
                print(f"{name:<10} {r50:>14.0f} {m50:>13.0f} {added:>+10.0f}", end="")
                print(f" {r90:>14.0f} {m90:>13.0f}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=2000)
    parser.add_argument("--warmup", type=int, default=200)
    args = parser.parse_args()
    asyncio.run(main(args.requests, args.warmup))
