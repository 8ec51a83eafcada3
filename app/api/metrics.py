"""The gateway's Prometheus metrics: what is counted, with which labels, and their exposition.

``GatewayMetrics`` owns the metric families of one application (its own registry, so two apps
in one process never collide) and what records them:
- ``respgate_http_requests_total`` and ``respgate_http_request_duration_seconds`` (route
  template, never the raw path; method; status; model), recorded by
  ``app.api.metrics_middleware`` once per request;
- ``respgate_responses_total`` (model, status, stream), ``respgate_tokens_total`` (model,
  direction ``input``/``output``) and ``respgate_time_to_first_token_seconds`` (model; streams:
  the first ``*.delta`` event), recorded through the request's ``Exchange`` by the responses
  route and the SSE writer: once per response, never per event;
- ``respgate_tool_calls_total`` and ``respgate_tool_call_duration_seconds`` (kind, outcome),
  an async hook on the tool-call event bus (``core.observe.ToolEvents.subscribe``);
- ``respgate_upstream_errors_total`` (code): an upstream failure answered before the stream
  started (the error handler notes it, ``app.api.errors.ERROR_SCOPE_KEY``) or a stream's
  ``error`` event with an upstream code;
- ``respgate_upstream_pool_wait_seconds`` (upstream): how long a request waited for a
  connection of the upstream's pool, the pool full (``app.upstream.pool``, through
  ``core.ports.UpstreamPools``; a request that found a free connection is not observed);
- ``respgate_open_streams`` (SSE responses being sent), ``respgate_background_responses``
  (background responses this process runs) and ``respgate_upstream_pool_waiting`` (upstream:
  requests waiting for a connection now), sampled.

What a request reports is appended to a list and moved into the metrics in batches
(``GatewayMetrics.flush``): the hot path takes no lock and looks up no label set.

Labels are bounded: the route is the matched template (``unmatched`` otherwise), the model one
of ``ModelLabels`` (else ``other``), an outcome or code one of a fixed set.

Several processes (``respgate serve --workers N``): with ``PROMETHEUS_MULTIPROC_DIR`` set
(``app.monitoring.multiprocess_metrics``) every process writes its values there and
``exposition`` sums them, so one scrape on the shared port sees every worker.
"""

from __future__ import annotations

import collections
import os
import threading
import time
from collections.abc import Awaitable, Callable, Iterable, Mapping
from typing import Any

from prometheus_client import (
    CONTENT_TYPE_LATEST,
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    generate_latest,
    multiprocess,
    values,
)
from starlette.requests import HTTPConnection

from app.core.observe import COMPLETED, FAILED, ToolCallEvent
from app.protocol.json_types import JsonObject

MULTIPROC_ENV = "PROMETHEUS_MULTIPROC_DIR"
MAX_PENDING = 1024
"""Requests reported but not yet flushed into the metrics: the next one flushes."""
OTHER = "other"
LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300)
TTFT_BUCKETS = (0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2, 5, 10, 30, 60)
TOOL_BUCKETS = (0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120)
POOL_WAIT_BUCKETS = (0.001, 0.005, 0.025, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30)
_STATUSES = frozenset({"completed", "incomplete", "failed", "cancelled", "queued"})
_TOOL_OUTCOMES = frozenset(
    {
        "timeout",
        "exception",
        "not_run",
        "invalid_arguments",
        "http_status",
        "tool_error",
        "network_error",
        "protocol_error",
        "unknown_tool",
        "search_failed",
        "unavailable",
        "error",
    }
)


def multiprocess_dir() -> str | None:
    """The directory the processes share their values in, when there is one."""
    return os.environ.get(MULTIPROC_ENV) or None


class ModelLabels:
    """The ``model`` label: the known models by name, up to ``max_learned`` more learned from
    completed responses, anything else ``other`` (``""``: the request named none)."""

    def __init__(self, known: Iterable[str], max_learned: int) -> None:
        self._names = set(known)
        self._room = max_learned
        self._lock = threading.Lock()

    def label(self, model: object) -> str:
        if not model:
            return ""
        return model if isinstance(model, str) and model in self._names else OTHER

    def learn(self, model: object) -> None:
        if self._room <= 0 or not isinstance(model, str) or not model or model in self._names:
            return
        if len(model) > 128:
            return
        with self._lock:
            if self._room > 0 and model not in self._names:
                self._names.add(model)
                self._room -= 1


def tool_kind(name: str) -> str:
    """The kind of a gateway tool by the name its events carry: ``mcp`` (``server::tool``:
    MCP servers and the tool sets of engines, all requested as ``mcp`` tools), ``web_search``,
    ``file_search``, else ``other``."""
    if "::" in name or name.startswith("mcp__"):
        return "mcp"
    if "web_search" in name:
        return "web_search"
    if "file_search" in name:
        return "file_search"
    return OTHER


def _count(tokens: object) -> int:
    return tokens if isinstance(tokens, int) and tokens > 0 else 0


def upstream_code(code: object) -> str | None:
    """The ``code`` label of an upstream failure, or None when ``code`` is not one."""
    if isinstance(code, str) and code.startswith("upstream_") and len(code) <= 48:
        return code
    return None


class GatewayMetrics:
    """The metric families of one application (see the module docstring)."""

    def __init__(self, models: ModelLabels, upstreams: Iterable[str] = ()) -> None:
        self.models = models
        # The configured upstreams' names: the ``upstream`` label (their series exist from
        # the start, at 0).
        self.upstreams = frozenset(upstreams)
        self.multiprocess = multiprocess_dir() is not None
        if self.multiprocess and not getattr(values.ValueClass, "_multiprocess", False):
            # prometheus_client chose its value class when first imported; the directory may
            # have been set after that (a worker forked from a process that imported it).
            values.ValueClass = values.get_value_class()  # type: ignore[no-untyped-call]
        self.registry = CollectorRegistry(auto_describe=True)
        r = self.registry
        self.requests = Counter(
            "respgate_http_requests",
            "HTTP requests answered, by route template, method, status and model.",
            ["route", "method", "status", "model"],
            registry=r,
        )
        self.duration = Histogram(
            "respgate_http_request_duration_seconds",
            "Time from a request's start to the end of its answer (a stream: its last byte).",
            ["route", "method", "model"],
            buckets=LATENCY_BUCKETS,
            registry=r,
        )
        self.responses = Counter(
            "respgate_responses",
            "Responses finished, by model, final status and whether they were streamed.",
            ["model", "status", "stream"],
            registry=r,
        )
        self.tokens = Counter(
            "respgate_tokens",
            "Tokens of finished responses (their usage), input and output.",
            ["model", "direction"],
            registry=r,
        )
        self.ttft = Histogram(
            "respgate_time_to_first_token_seconds",
            "Streams: time from the request's start to its first delta event.",
            ["model"],
            buckets=TTFT_BUCKETS,
            registry=r,
        )
        self.tool_calls = Counter(
            "respgate_tool_calls",
            "Gateway tool calls finished, by tool kind and outcome (ok or why it failed).",
            ["kind", "outcome"],
            registry=r,
        )
        self.tool_duration = Histogram(
            "respgate_tool_call_duration_seconds",
            "Duration of gateway tool calls, by tool kind and outcome.",
            ["kind", "outcome"],
            buckets=TOOL_BUCKETS,
            registry=r,
        )
        self.upstream_errors = Counter(
            "respgate_upstream_errors",
            "Upstream failures (before a stream started, or ending one), by error code.",
            ["code"],
            registry=r,
        )
        self.pool_wait = Histogram(
            "respgate_upstream_pool_wait_seconds",
            "Time a request waited for a connection of the upstream's pool, the pool full.",
            ["upstream"],
            buckets=POOL_WAIT_BUCKETS,
            registry=r,
        )
        self.pool_waiting = Gauge(
            "respgate_upstream_pool_waiting",
            "Requests waiting for a connection of the upstream's pool (max_connections).",
            ["upstream"],
            registry=r,
            multiprocess_mode="livesum",
        )
        self.open_streams = Gauge(
            "respgate_open_streams",
            "SSE responses being sent.",
            registry=r,
            multiprocess_mode="livesum",
        )
        self.background = Gauge(
            "respgate_background_responses",
            "Background responses running (queued or in progress) in the gateway's processes.",
            registry=r,
            multiprocess_mode="livesum",
        )
        # How many background responses this process runs (``app.monitoring`` sets it).
        self.background_count: Callable[[], int] | None = None
        # How many requests wait for a connection of each upstream's pool (``app.monitoring``).
        self.pool_waiting_counts: Callable[[], Mapping[str, int]] | None = None
        self.streams = 0  # SSE responses being sent (the middleware counts; flush sets the gauge)
        self._children: dict[tuple[int, tuple[str, ...]], Any] = {}
        # What the requests reported since the last flush (see ``flush``).
        self._requests: list[tuple[str, str, int, str, float]] = []
        self._responses: list[tuple[str, str, str, int, int]] = []
        self._first_tokens: list[tuple[str, float]] = []
        self._pool_waits: list[tuple[str, float]] = []
        for name in self.upstreams:
            self._child(self.pool_wait, (name,))
            self._child(self.pool_waiting, (name,)).set(0)

    # ------------------------------------------------------------------ recording
    # A request only appends a tuple to a list (no lock, no label lookup); ``flush`` moves the
    # lists into the metrics (counters summed per label set), before every scrape, every
    # ``FLUSH_SECONDS`` (``app.monitoring``) and when ``MAX_PENDING`` requests wait.

    def record_request(
        self, route: str, method: str, status: int, model: str, seconds: float
    ) -> None:
        """One answered HTTP request."""
        pending = self._requests
        pending.append((route, method, status, model, seconds))
        if len(pending) >= MAX_PENDING:
            self.flush()

    def record_response(self, model: str, response: JsonObject | None, stream: bool) -> None:
        """A finished response: its status and its usage."""
        if response is None:
            return
        status = response.get("status")
        if status == "queued":  # a background response: its run finishes it later
            return
        if status == "completed":
            self.models.learn(model)
        usage = response.get("usage")
        if not isinstance(usage, dict):
            usage = {}
        self._responses.append(
            (
                self.models.label(model),
                status if status in _STATUSES else OTHER,
                "true" if stream else "false",
                _count(usage.get("input_tokens")),
                _count(usage.get("output_tokens")),
            )
        )

    def record_first_token(self, model: str, seconds: float) -> None:
        self._first_tokens.append((self.models.label(model), seconds))

    def record_pool_wait(self, upstream: str, seconds: float) -> None:
        """``core.ports.PoolWaitObserver``: a request waited for a pool connection."""
        pending = self._pool_waits
        pending.append((upstream if upstream in self.upstreams else OTHER, seconds))
        if len(pending) >= MAX_PENDING:
            self.flush()

    def _child(self, metric: Any, labels: tuple[str, ...]) -> Any:
        key = (id(metric), labels)
        child = self._children.get(key)
        if child is None:
            child = self._children[key] = metric.labels(*labels)
        return child

    def flush(self) -> None:
        """Move what the requests reported into the metrics, and set the gauges."""
        requests, self._requests = self._requests, []
        responses, self._responses = self._responses, []
        first_tokens, self._first_tokens = self._first_tokens, []
        pool_waits, self._pool_waits = self._pool_waits, []
        counts: collections.Counter[tuple[str, ...]] = collections.Counter()
        for route, method, code, model, seconds in requests:
            counts[(route, method, str(code), model)] += 1
            self._child(self.duration, (route, method, model)).observe(seconds)
        for labels, count in counts.items():
            self._child(self.requests, labels).inc(count)
        finished: collections.Counter[tuple[str, ...]] = collections.Counter()
        tokens: collections.Counter[tuple[str, ...]] = collections.Counter()
        for label, status, stream, tokens_in, tokens_out in responses:
            finished[(label, status, stream)] += 1
            tokens[(label, "input")] += tokens_in
            tokens[(label, "output")] += tokens_out
        for labels, count in finished.items():
            self._child(self.responses, labels).inc(count)
        for labels, count in tokens.items():
            if count:
                self._child(self.tokens, labels).inc(count)
        for label, seconds in first_tokens:
            self._child(self.ttft, (label,)).observe(seconds)
        for upstream, seconds in pool_waits:
            self._child(self.pool_wait, (upstream,)).observe(seconds)
        waiting = self.pool_waiting_counts
        if waiting is not None:
            for upstream, count in waiting().items():
                if upstream in self.upstreams:
                    self._child(self.pool_waiting, (upstream,)).set(count)
        self.open_streams.set(self.streams)
        running = self.background_count
        if running is not None:
            self.background.set(running())

    def record_upstream_error(self, code: str) -> None:
        self._child(self.upstream_errors, (code,)).inc()

    async def on_tool_event(self, event: ToolCallEvent) -> None:
        """The tool-call bus hook: a finished call's kind, outcome and duration."""
        if event.type == COMPLETED:
            outcome = "ok"
        elif event.type == FAILED:
            kind = event.error_kind or "error"
            outcome = kind if kind in _TOOL_OUTCOMES else OTHER
        else:
            return
        labels = (tool_kind(event.tool), outcome)
        self._child(self.tool_calls, labels).inc()
        if event.duration_ms is not None:
            self._child(self.tool_duration, labels).observe(event.duration_ms / 1000)

    # ------------------------------------------------------------------ exposition

    def exposition(self) -> tuple[bytes, str]:
        """The text format of every value: this process's, or every worker's."""
        self.flush()
        directory = multiprocess_dir() if self.multiprocess else None
        if directory is None:
            return generate_latest(self.registry), CONTENT_TYPE_LATEST
        registry = CollectorRegistry()
        multiprocess.MultiProcessCollector(registry, path=directory)  # type: ignore[no-untyped-call]
        return generate_latest(registry), CONTENT_TYPE_LATEST


EXCHANGE_KEY = "respgate.exchange"
"""Where ``app.api.metrics_middleware`` keeps the request's ``Exchange`` in its ASGI scope."""


class Exchange:
    """One HTTP request as the metrics see it: when it started and the model it named (the
    route sets ``model``); what the responses route and the SSE writer report about it."""

    __slots__ = ("metrics", "model", "started")

    def __init__(self, metrics: GatewayMetrics, started: float) -> None:
        self.metrics = metrics
        self.started = started
        self.model: str | None = None

    def finished(self, response: JsonObject | None, *, stream: bool) -> None:
        self.metrics.record_response(self.model or "", response, stream)

    def first_token(self) -> None:
        self.metrics.record_first_token(self.model or "", time.perf_counter() - self.started)

    def stream_error(self, event: JsonObject) -> None:
        """A stream's ``error`` event: counted when the upstream failed (the failed Response
        that follows says only ``server_error``)."""
        code = upstream_code(event.get("code"))
        if code is not None:
            self.metrics.record_upstream_error(code)


def exchange_of(connection: HTTPConnection) -> Exchange | None:
    """The request's ``Exchange``; None when metrics are off."""
    exchange: Exchange | None = connection.scope.get(EXCHANGE_KEY)
    return exchange


OnFinal = Callable[[JsonObject | None], Awaitable[None]]


def finishing(
    exchange: Exchange | None, then: OnFinal | None
) -> tuple[OnFinal | None, Exchange | None]:
    """A stream's hooks for ``app.api.sse.event_stream_response``: at its end, record the final
    Response then call ``then`` (the rate limits' charge); the exchange watches its first delta
    and its ``error`` event. Without metrics: ``then`` alone."""
    if exchange is None:
        return then, None

    async def finished(response: JsonObject | None) -> None:
        exchange.finished(response, stream=True)
        if then is not None:
            await then(response)

    return finished, exchange
