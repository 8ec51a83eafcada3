"""Several upstreams behind one ``core.ports.Upstream``, chosen by the request's ``model``.

Exact names (``models`` entries without wildcards and ``model_map`` keys) are looked up first,
then glob patterns in configuration order, then the default upstream. ``model_map`` rewrites the
name sent upstream. ``GET /v1/models`` lists the union of every upstream's models.
"""

from __future__ import annotations

import asyncio
import fnmatch
import logging
import re
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import orjson

from app.core.compaction import NativeCompactor
from app.core.ports import (
    ChatCompletionsForwarder,
    CircuitReport,
    PoolReport,
    PoolWaitObserver,
    RawReply,
    RawStream,
    TokenCount,
    TokenCounter,
    Upstream,
    UpstreamEventStream,
)
from app.errors import NotFoundError, UpstreamError
from app.protocol.json_types import JsonObject
from app.upstream.http import HttpUpstream
from app.upstream.tokenize import estimate_count

logger = logging.getLogger(__name__)

_WILDCARDS = re.compile(r"[*?\[]")


@dataclass(slots=True)
class UpstreamRoute:
    """One upstream and the models it serves."""

    name: str
    upstream: Upstream
    url: str
    models: Sequence[str] = ()
    model_map: Mapping[str, str] = field(default_factory=dict)


class UpstreamRouter:
    """``core.ports.Upstream`` over named upstreams; the first route is the default."""

    def __init__(self, routes: Sequence[UpstreamRoute]) -> None:
        if not routes:
            raise ValueError("at least one upstream is needed")
        self.routes = list(routes)
        self.default = self.routes[0]
        self._exact: dict[str, UpstreamRoute] = {}
        self._patterns: list[tuple[re.Pattern[str], UpstreamRoute]] = []
        # Each route's token counter, looked up once: a runtime protocol check costs
        # microseconds, too much for every request.
        self._counters: dict[int, TokenCounter | None] = {
            id(route): route.upstream if isinstance(route.upstream, TokenCounter) else None
            for route in self.routes
        }
        for route in self.routes:
            for name in (*route.model_map, *route.models):
                if _WILDCARDS.search(name):
                    self._patterns.append((re.compile(fnmatch.translate(name)), route))
                else:
                    self._exact.setdefault(name, route)

    def route_for(self, model: Any) -> UpstreamRoute:
        if isinstance(model, str):
            route = self._exact.get(model)
            if route is not None:
                return route
            for pattern, candidate in self._patterns:
                if pattern.match(model):
                    return candidate
        return self.default

    def _routed(self, body: JsonObject) -> tuple[Upstream, JsonObject]:
        model = body.get("model")
        route = self.route_for(model)
        if isinstance(model, str):
            target = route.model_map.get(model)
            if target is not None:
                body = {**body, "model": target}
        return route.upstream, body

    async def create_response(self, body: JsonObject, headers: Mapping[str, str]) -> JsonObject:
        upstream, routed = self._routed(body)
        return await upstream.create_response(routed, headers)

    async def stream_response(
        self, body: JsonObject, headers: Mapping[str, str]
    ) -> UpstreamEventStream:
        upstream, routed = self._routed(body)
        return await upstream.stream_response(routed, headers)

    def compacts_natively(self, model: str | None) -> bool:
        """``core.compaction.NativeCompactor``: whether the upstream serving ``model`` does."""
        upstream = self.route_for(model).upstream
        return isinstance(upstream, NativeCompactor) and upstream.compacts_natively(model)

    async def compact_natively(self, body: JsonObject, headers: Mapping[str, str]) -> JsonObject:
        upstream, routed = self._routed(body)
        if not isinstance(upstream, NativeCompactor):
            raise NotFoundError(
                "The upstream serving this model does not serve /v1/responses/compact.",
                code="unsupported_endpoint",
            )
        return await upstream.compact_natively(routed, headers)

    async def forward_chat_completions(
        self, body: bytes, parsed: JsonObject, headers: Mapping[str, str]
    ) -> RawStream:
        upstream, routed = self._routed(parsed)
        if not isinstance(upstream, ChatCompletionsForwarder):
            raise NotFoundError(
                "The upstream serving this model does not take chat completions.",
                code="unsupported_endpoint",
            )
        if routed is not parsed:  # the model was renamed
            body = orjson.dumps(routed)
        return await upstream.forward_chat_completions(body, routed, headers)

    async def count_input_tokens(self, body: JsonObject, headers: Mapping[str, str]) -> TokenCount:
        """``core.ports.TokenCounter``: the routed upstream counts (an estimate when it cannot)."""
        route = self.route_for(body.get("model"))
        counter = self._counters[id(route)]
        _, routed = self._routed(body)
        if counter is not None:
            return await counter.count_input_tokens(routed, headers)
        return estimate_count(routed)

    def configured_window(self, model: str) -> int | None:
        route = self.route_for(model)
        counter = self._counters[id(route)]
        if counter is None:
            return None
        return counter.configured_window(route.model_map.get(model, model))

    async def context_window(self, model: str, headers: Mapping[str, str]) -> int | None:
        route = self.route_for(model)
        counter = self._counters[id(route)]
        if counter is None:
            return None
        return await counter.context_window(route.model_map.get(model, model), headers)

    async def list_models(self, headers: Mapping[str, str]) -> RawReply:
        """One upstream: its answer as it came. Several: the union of their lists (first
        listing wins for a repeated id), plus the names ``model_map`` gives clients; an
        upstream that fails is left out, unless all fail."""
        if len(self.routes) == 1 and not self.default.model_map:
            return await self.default.upstream.list_models(headers)
        replies = await asyncio.gather(
            *(route.upstream.list_models(headers) for route in self.routes),
            return_exceptions=True,
        )
        models: dict[str, JsonObject] = {}
        failures: list[BaseException | RawReply] = []
        for route, reply in zip(self.routes, replies, strict=True):
            listed = _listed_models(reply)
            if listed is None:
                logger.warning("upstream %s: model list unavailable: %s", route.name, reply)
                failures.append(reply)
                continue
            for entry in listed:
                models.setdefault(str(entry["id"]), entry)
        if len(failures) == len(self.routes):
            first = failures[0]
            if isinstance(first, RawReply):
                return first
            if isinstance(first, UpstreamError):
                raise first
            raise UpstreamError(f"no upstream listed its models: {first!r}")
        created = int(time.time())
        for route in self.routes:
            for alias in route.model_map:
                models.setdefault(
                    alias,
                    {"id": alias, "object": "model", "created": created, "owned_by": route.name},
                )
        body = {"object": "list", "data": list(models.values())}
        return RawReply(200, "application/json", orjson.dumps(body))

    async def check_ready(self) -> bool:
        """Ready when every upstream answers (a request may be routed to any of them)."""
        answers = await asyncio.gather(*(route.upstream.check_ready() for route in self.routes))
        return all(answers)

    async def readiness(self) -> dict[str, bool]:
        answers = await asyncio.gather(*(route.upstream.check_ready() for route in self.routes))
        return {route.name: ready for route, ready in zip(self.routes, answers, strict=True)}

    def circuits(self) -> dict[str, CircuitReport]:
        """``core.ports.UpstreamCircuits``: each upstream's circuit, by name."""
        reports: dict[str, CircuitReport] = {}
        for route in self.routes:
            upstream = route.upstream
            if isinstance(upstream, HttpUpstream) and upstream.guard.breaker is not None:
                breaker = upstream.guard.breaker
                reports[route.name] = CircuitReport(breaker.state.value, breaker.retry_after)
        return reports

    def _pooled(self) -> list[tuple[str, HttpUpstream]]:
        return [(r.name, r.upstream) for r in self.routes if isinstance(r.upstream, HttpUpstream)]

    def pools(self) -> dict[str, PoolReport]:
        """``core.ports.UpstreamPools``: each upstream's pool, by name."""
        return {name: upstream.pool.report() for name, upstream in self._pooled()}

    def watch_pool_waits(self, observer: PoolWaitObserver) -> Callable[[], None]:
        """``core.ports.UpstreamPools``: ``observer`` hears every upstream's waits."""
        stops = [upstream.pool.watch(observer) for _, upstream in self._pooled()]

        def stop() -> None:
            for each in stops:
                each()

        return stop

    async def aclose(self) -> None:
        for route in self.routes:
            try:
                await route.upstream.aclose()
            except Exception:
                logger.exception("closing upstream %s failed", route.name)


def _listed_models(reply: RawReply | BaseException) -> list[JsonObject] | None:
    if not isinstance(reply, RawReply) or reply.status_code >= 400:
        return None
    try:
        data = orjson.loads(reply.body)
    except orjson.JSONDecodeError:
        return None
    entries = data.get("data") if isinstance(data, dict) else data
    if not isinstance(entries, list):
        return None
    return [e for e in entries if isinstance(e, dict) and isinstance(e.get("id"), str)]
