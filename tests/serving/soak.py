"""A soak: many mixed requests at a concurrency against a real gateway, then what must hold.

Shared by tests/serving/test_soak.py (a short run in CI) and bench/soak.py (the long one).

The fake upstream (``SoakUpstream``, also ``uvicorn --factory tests.serving.soak:upstream_app``)
answers every request from its last input text alone: ``u-<chain>-<k>`` gets ``a-<chain>-<k>``.
So it also knows the history a continuation must carry (``u-c-0, a-c-0, ..., u-c-k``, whether
through ``previous_response_id`` or a conversation) and counts every request whose input differs
(``GET /stats``).

The workload (``plan``: seeded, so a run is repeatable) mixes tasks, each a short sequence run by
one client worker: a JSON response then its retrieval; a stream then its retrieval; a chain of
three turns through ``previous_response_id`` (JSON and stream alternating) then the last one's
input items; a conversation with two turns then its items; a response deleted then not found.
Afterwards every stored response is retrieved (complete, its output the expected text) and the
database is read: exactly the stored responses are there, and no response or conversation names
an item that is not (nothing lost, nothing half-written).
"""

from __future__ import annotations

import asyncio
import random
import re
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import httpx
import orjson
from sqlalchemy import text
from sqlalchemy.ext.asyncio import create_async_engine
from sqlalchemy.pool import NullPool
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from app.protocol.json_types import JsonObject
from tests.fakes import message, round_events, text_response

USER_TEXT = re.compile(r"u-([0-9a-z]+)-(\d+)")
MODEL = "soak-model"
# Requests each task kind sends (the mix is drawn by weight).
TASKS: dict[str, tuple[int, int]] = {  # kind: (requests, weight)
    "json": (2, 3),
    "stream": (2, 3),
    "chain": (4, 2),
    "conversation": (4, 1),
    "delete": (3, 1),
}


# ---------------------------------------------------------------------------- the upstream


def input_texts(value: Any) -> list[str]:
    """The texts of the messages of a Responses ``input``, in order."""
    if isinstance(value, str):
        return [value]
    out: list[str] = []
    for item in value or []:
        if not isinstance(item, dict) or item.get("type", "message") != "message":
            continue
        content = item.get("content")
        if isinstance(content, str):
            out.append(content)
        elif isinstance(content, list):
            out.append("".join(str(part.get("text", "")) for part in content))
    return out


@dataclass
class SoakUpstream:
    """The Responses server of the soak; ``stats`` is what ``GET /stats`` answers."""

    requests: int = 0
    continuations: int = 0
    bad_history: int = 0
    examples: list[str] = field(default_factory=list)

    def answer(self, body: JsonObject) -> str:
        self.requests += 1
        seen = input_texts(body.get("input"))
        match = USER_TEXT.fullmatch(seen[-1]) if seen else None
        if match is None:
            self._bad(f"no user text in {seen!r}")
            return "a-none-0"
        chain, step = match[1], int(match[2])
        expected = [f"{who}-{chain}-{i}" for i in range(step) for who in ("u", "a")]
        if step:
            self.continuations += 1
        if seen != [*expected, seen[-1]]:
            self._bad(f"{seen[-1]} got history {seen[:-1]!r}")
        return f"a-{chain}-{step}"

    def _bad(self, example: str) -> None:
        self.bad_history += 1
        if len(self.examples) < 10:
            self.examples.append(example)

    def stats(self) -> JsonObject:
        return {
            "requests": self.requests,
            "continuations": self.continuations,
            "bad_history": self.bad_history,
            "examples": list(self.examples),
        }

    def app(self) -> Starlette:
        async def infer(request: Request) -> Response:
            body = orjson.loads(await request.body())
            reply = self.answer(body)
            if body.get("stream"):
                return StreamingResponse(_frames(reply), media_type="text/event-stream")
            return JSONResponse(text_response(reply))

        async def stats(request: Request) -> Response:
            return JSONResponse(self.stats())

        async def health(request: Request) -> Response:
            return Response(status_code=200)

        return Starlette(
            routes=[
                Route("/v1/responses", infer, methods=["POST"]),
                Route("/stats", stats, methods=["GET"]),
                Route("/health", health, methods=["GET"]),
            ]
        )


async def _frames(reply: str) -> AsyncIterator[bytes]:
    for event in round_events([message(reply)]):
        yield b"event: " + event["type"].encode() + b"\ndata: " + orjson.dumps(event) + b"\n\n"


def upstream_app() -> Starlette:
    """``uvicorn --factory tests.serving.soak:upstream_app``: the upstream as a process."""
    return SoakUpstream().app()


# ---------------------------------------------------------------------------- the client


@dataclass
class Outcome:
    """What the client saw: requests sent, errors, the responses that must be stored (id:
    expected output text), the ones deleted, and the requests' latencies."""

    requests: int = 0
    errors: int = 0
    examples: list[str] = field(default_factory=list)
    stored: dict[str, str] = field(default_factory=dict)
    deleted: set[str] = field(default_factory=set)
    latencies: list[float] = field(default_factory=list)

    def error(self, what: str) -> None:
        self.errors += 1
        if len(self.examples) < 10:
            self.examples.append(what)


class Soak:
    """One soak run against the gateway at ``http``'s base URL."""

    def __init__(self, http: httpx.AsyncClient) -> None:
        self.http = http
        self.out = Outcome()

    async def call(self, method: str, path: str, body: JsonObject | None = None) -> httpx.Response:
        started = time.perf_counter()
        self.out.requests += 1
        reply = await self.http.request(method, path, json=body)
        self.out.latencies.append(time.perf_counter() - started)
        return reply

    def expect(self, reply: httpx.Response, status: int, what: str) -> bool:
        if reply.status_code == status:
            return True
        self.out.error(f"{what}: {reply.status_code} {reply.text[:200]}")
        return False

    async def respond(self, chain: str, step: int, *, stream: bool, **extra: Any) -> str | None:
        """One turn (``u-chain-step``); the response id once it completed as expected."""
        body = {"model": MODEL, "input": f"u-{chain}-{step}", "stream": stream, **extra}
        if not stream:
            reply = await self.call("POST", "/v1/responses", body)
            if not self.expect(reply, 200, f"POST {chain}-{step}"):
                return None
            return self._completed(reply.json(), chain, step)
        started = time.perf_counter()
        self.out.requests += 1
        async with self.http.stream("POST", "/v1/responses", json=body) as reply:
            raw = (await reply.aread()).decode()
        self.out.latencies.append(time.perf_counter() - started)
        if not self.expect(reply, 200, f"stream {chain}-{step}"):
            return None
        data = [line[5:].strip() for line in raw.split("\n") if line.startswith("data:")]
        if not data or data[-1] != "[DONE]":
            self.out.error(f"stream {chain}-{step} did not end with [DONE]: {raw[-300:]}")
            return None
        events = [orjson.loads(line) for line in data[:-1]]
        done = [e for e in events if e.get("type") == "response.completed"]
        if len(done) != 1 or any(e.get("type") in ("error", "response.failed") for e in events):
            self.out.error(f"stream {chain}-{step} ended without completing: {raw[-300:]}")
            return None
        return self._completed(done[0]["response"], chain, step)

    def _completed(self, response: JsonObject, chain: str, step: int) -> str | None:
        said = "".join(input_texts(response.get("output")))
        if response.get("status") != "completed" or said != f"a-{chain}-{step}":
            self.out.error(f"{chain}-{step}: {response.get('status')} {said!r}")
            return None
        self.out.stored[response["id"]] = said
        return str(response["id"])

    async def retrieve(self, response_id: str) -> None:
        reply = await self.call("GET", f"/v1/responses/{response_id}")
        if self.expect(reply, 200, f"GET {response_id}"):
            self.check_retrieved(response_id, reply.json())

    def check_retrieved(self, response_id: str, response: JsonObject) -> None:
        said = "".join(input_texts(response.get("output")))
        if response.get("status") != "completed" or said != self.out.stored[response_id]:
            self.out.error(f"{response_id} retrieved {response.get('status')} {said!r}")

    # ------------------------------------------------------------------------ tasks

    async def task_json(self, chain: str) -> None:
        if (rid := await self.respond(chain, 0, stream=False)) is not None:
            await self.retrieve(rid)

    async def task_stream(self, chain: str) -> None:
        if (rid := await self.respond(chain, 0, stream=True)) is not None:
            await self.retrieve(rid)

    async def task_chain(self, chain: str) -> None:
        previous: str | None = None
        for step in range(3):
            extra = {"previous_response_id": previous} if previous else {}
            previous = await self.respond(chain, step, stream=step % 2 == 1, **extra)
            if previous is None:
                return
        reply = await self.call("GET", f"/v1/responses/{previous}/input_items?order=asc")
        if self.expect(reply, 200, f"input_items {previous}"):
            got = input_texts(reply.json()["data"])
            if got != [f"u-{chain}-2"]:
                self.out.error(f"input_items of {chain}-2: {got!r}")

    async def task_conversation(self, chain: str) -> None:
        reply = await self.call("POST", "/v1/conversations", {})
        if not self.expect(reply, 200, "POST /v1/conversations"):
            return
        conversation = reply.json()["id"]
        for step in range(2):
            if await self.respond(chain, step, stream=step == 1, conversation=conversation) is None:
                return
        reply = await self.call("GET", f"/v1/conversations/{conversation}/items?order=asc")
        if self.expect(reply, 200, f"items of {conversation}"):
            got = input_texts(reply.json()["data"])
            want = [f"{who}-{chain}-{i}" for i in range(2) for who in ("u", "a")]
            if got != want:
                self.out.error(f"conversation {chain}: {got!r}")

    async def task_delete(self, chain: str) -> None:
        rid = await self.respond(chain, 0, stream=False)
        if rid is None:
            return
        if self.expect(await self.call("DELETE", f"/v1/responses/{rid}"), 200, f"DELETE {rid}"):
            del self.out.stored[rid]
            self.out.deleted.add(rid)
            gone = await self.call("GET", f"/v1/responses/{rid}")
            self.expect(gone, 404, f"GET deleted {rid}")

    async def run(self, tasks: list[tuple[str, str]], concurrency: int) -> None:
        queue: asyncio.Queue[tuple[str, str]] = asyncio.Queue()
        for task in tasks:
            queue.put_nowait(task)
        kinds: dict[str, Callable[[str], Awaitable[None]]] = {
            kind: getattr(self, f"task_{kind}") for kind in TASKS
        }

        async def worker() -> None:
            while not queue.empty():
                kind, chain = queue.get_nowait()
                try:
                    await kinds[kind](chain)
                except (httpx.HTTPError, ValueError, KeyError) as exc:
                    self.out.error(f"{kind} {chain}: {type(exc).__name__}: {exc}")

        await asyncio.gather(*(worker() for _ in range(concurrency)))

    async def verify_all(self, concurrency: int) -> int:
        """Retrieve every stored response (not counted as load); how many were checked."""
        ids = list(self.out.stored)
        semaphore = asyncio.Semaphore(concurrency)

        async def one(response_id: str) -> None:
            async with semaphore:
                reply = await self.http.get(f"/v1/responses/{response_id}")
            if self.expect(reply, 200, f"verify {response_id}"):
                self.check_retrieved(response_id, reply.json())

        await asyncio.gather(*(one(response_id) for response_id in ids))
        return len(ids)


def plan(requests: int, seed: int = 18) -> list[tuple[str, str]]:
    """Tasks (kind, chain name) adding up to at least ``requests`` requests."""
    rng = random.Random(seed)
    kinds = list(TASKS)
    weights = [TASKS[kind][1] for kind in kinds]
    tasks: list[tuple[str, str]] = []
    total = 0
    while total < requests:
        kind = rng.choices(kinds, weights)[0]
        tasks.append((kind, f"{len(tasks):x}"))
        total += TASKS[kind][0]
    return tasks


# ---------------------------------------------------------------------------- the database


async def database_problems(database_url: str, stored: set[str], deleted: set[str]) -> list[str]:
    """What the database holds against what the client saw: the stored responses exactly (none
    lost, none deleted left), and no response or conversation naming a missing item."""
    engine = create_async_engine(database_url, poolclass=NullPool)
    try:
        async with engine.connect() as connection:
            items = set((await connection.execute(text("SELECT id FROM items"))).scalars())
            rows = (
                await connection.execute(text("SELECT id, input_item_ids FROM responses"))
            ).all()
            members = (
                await connection.execute(text("SELECT item_id FROM conversation_items"))
            ).scalars()
            in_conversations = set(members)
    finally:
        await engine.dispose()
    problems: list[str] = []
    found = {str(row[0]) for row in rows}
    if lost := stored - found:
        problems.append(f"{len(lost)} stored responses missing, e.g. {sorted(lost)[:3]}")
    if left := found & deleted:
        problems.append(f"{len(left)} deleted responses still there, e.g. {sorted(left)[:3]}")
    if extra := found - stored - deleted:
        problems.append(f"{len(extra)} responses no client saw complete: {sorted(extra)[:3]}")
    for response_id, item_ids in rows:
        ids = orjson.loads(item_ids) if isinstance(item_ids, str | bytes) else item_ids
        if missing := set(ids) - items:
            problems.append(f"response {response_id} names missing items {sorted(missing)[:3]}")
    if missing := in_conversations - items:
        problems.append(f"conversations name {len(missing)} missing items")
    return problems[:20]


# ---------------------------------------------------------------------------- one run


@dataclass
class SoakReport:
    requests: int
    seconds: float
    errors: int
    examples: list[str]
    verified: int
    upstream: JsonObject
    database: list[str]
    latencies: list[float]

    def figures(self) -> str:
        ordered = sorted(self.latencies) or [0.0]
        p50, p99 = (ordered[int(q * (len(ordered) - 1))] * 1000 for q in (0.5, 0.99))
        return (
            f"{self.requests} requests in {self.seconds:.1f} s ({self.requests / self.seconds:.0f}"
            f" req/s), p50 {p50:.1f} ms, p99 {p99:.1f} ms; {self.errors} errors; "
            f"{self.verified} stored responses verified; upstream: {self.upstream['requests']} "
            f"requests, {self.upstream['continuations']} continuations, "
            f"{self.upstream['bad_history']} with a wrong history; database: "
            f"{'intact' if not self.database else '; '.join(self.database)}"
        )


async def soak(
    gateway: str, upstream: str, database_url: str, requests: int, concurrency: int
) -> SoakReport:
    """Run ``plan(requests)`` at ``concurrency`` against ``gateway``; check what must hold."""
    # Idle connections are dropped before the server (uvicorn: 5 s) closes them: a request sent
    # on a connection the server is closing at that moment fails, and is no fault of the gateway.
    limits = httpx.Limits(
        max_connections=concurrency, max_keepalive_connections=concurrency, keepalive_expiry=2
    )
    async with httpx.AsyncClient(base_url=gateway, limits=limits, timeout=120) as http:
        run = Soak(http)
        started = time.perf_counter()
        await run.run(plan(requests), concurrency)
        seconds = time.perf_counter() - started
        verified = await run.verify_all(concurrency)
        stats = (await http.get(f"{upstream}/stats")).json()
    out = run.out
    database = await database_problems(database_url, set(out.stored), out.deleted)
    return SoakReport(
        out.requests, seconds, out.errors, out.examples, verified, stats, database, out.latencies
    )
