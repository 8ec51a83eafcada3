"""Scripted upstreams with a tokenizer, for the token count and ``truncation`` tests.

``tokenizing_app`` serves a scripted server (``tests/clients``: the Responses kind or the chat
kind) plus what vLLM serves besides inference: ``POST /tokenize`` (a chat request; the count is
``scripted_count`` of what it received; absent with ``tokenize=False``, a 404 as on a server
without the route) and ``GET /v1/models`` with ``max_model_len``; with ``native_count``, OpenAI's
``POST /v1/responses/input_tokens`` too (``scripted_count`` of the input). ``TokenizerLog``
records each count request and counts the model lists, so a test sees what the gateway asked.
"""

from __future__ import annotations

import contextlib
import copy
import json
from collections.abc import Iterator
from dataclasses import dataclass, field

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from app.main import create_app
from app.protocol.json_types import JsonObject
from app.settings import Settings
from app.upstream.chat import ChatUpstream
from app.upstream.responses import ResponsesUpstream
from app.upstream.router import UpstreamRoute, UpstreamRouter
from app.upstream.tokenize import TokenizingUpstream
from tests.clients.scripted_chat_upstream import ScriptedChatUpstream
from tests.clients.scripted_upstream import ScriptedServer, ScriptedUpstream
from tests.fakes import MemoryResponseStore
from tests.helpers import serve_in_thread

MODEL = "scripted-model"


def scripted_count(request: JsonObject) -> int:
    """The scripted tokenizer: one token per whitespace-separated word of the JSON of the
    messages and tools (monotonic in the text, and easy to reason about in a test)."""
    rendered = json.dumps({"messages": request.get("messages"), "tools": request.get("tools")})
    return len(rendered.split())


def words(count: int, word: str = "w") -> str:
    return " ".join([word] * count)


@dataclass
class TokenizerLog:
    tokenized: list[JsonObject] = field(default_factory=list)
    natively_counted: list[JsonObject] = field(default_factory=list)
    model_lists: int = 0


def tokenizing_app(
    server: ScriptedServer,
    log: TokenizerLog,
    *,
    max_model_len: int | None,
    tokenize: bool,
    native_count: bool = False,
) -> Starlette:
    app = server.app()

    async def input_tokens(request: Request) -> Response:
        body = await request.json()
        log.natively_counted.append(copy.deepcopy(body))
        count = scripted_count({"messages": body.get("input"), "tools": body.get("tools")})
        return JSONResponse({"object": "response.input_tokens", "input_tokens": count})

    async def tokenize_route(request: Request) -> Response:
        body = await request.json()
        log.tokenized.append(copy.deepcopy(body))
        count = scripted_count(body)
        return JSONResponse(
            {"count": count, "max_model_len": max_model_len, "tokens": list(range(count))}
        )

    async def models(request: Request) -> Response:
        log.model_lists += 1
        entry: JsonObject = {"id": server.model, "object": "model"}
        if max_model_len is not None:
            entry["max_model_len"] = max_model_len
        return JSONResponse({"object": "list", "data": [entry]})

    app.router.routes.insert(0, Route("/v1/models", models, methods=["GET"]))
    if tokenize:
        app.router.routes.append(Route("/tokenize", tokenize_route, methods=["POST"]))
    if native_count:
        route = Route("/v1/responses/input_tokens", input_tokens, methods=["POST"])
        app.router.routes.append(route)
    return app


@dataclass
class Served:
    """A scripted upstream behind a gateway app: what each side recorded."""

    server: ScriptedServer
    log: TokenizerLog
    store: MemoryResponseStore
    gateway: Starlette

    def inference_bodies(self) -> list[JsonObject]:
        return self.server.requests


@contextlib.contextmanager
def served(
    kind: str,
    *,
    max_model_len: int | None = None,
    tokenize: bool = True,
    native_count: bool = False,
    context_window: int | None = None,
) -> Iterator[Served]:
    """A gateway (its app, not yet started) over one scripted upstream of ``kind``."""
    server: ScriptedServer = ScriptedUpstream() if kind == "responses" else ScriptedChatUpstream()
    log = TokenizerLog()
    app = tokenizing_app(
        server, log, max_model_len=max_model_len, tokenize=tokenize, native_count=native_count
    )
    with serve_in_thread(app) as url:
        upstream: TokenizingUpstream
        if kind == "responses":
            upstream = ResponsesUpstream(url, context_window=context_window)
        else:
            upstream = ChatUpstream(url, context_window=context_window)
        router = UpstreamRouter([UpstreamRoute(name="default", upstream=upstream, url=url)])
        store = MemoryResponseStore()
        settings = Settings(upstream_url=url, upstream_kind=kind)
        gateway = create_app(settings, upstream=router, store=store)
        yield Served(server, log, store, gateway)
