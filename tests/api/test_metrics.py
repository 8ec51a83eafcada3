"""``GET /metrics``: what the gateway counts after real traffic through the ``openai`` SDK (JSON,
stream, an MCP tool call against the real counter server, upstream failures before and during
a stream), with bounded labels (route templates, known models else ``other``); who may read it.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import copy
import json
import re
import threading
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import openai
import pytest

from app.errors import UpstreamTimeoutError
from app.main import create_app
from app.options.auth import ApiKeyConfig, AuthSettings
from app.options.metrics import MetricsSettings
from app.protocol.json_types import JsonObject
from app.settings import Settings
from tests.api.metrics_support import (
    Samples,
    label_values,
    parse_samples,
    scrape_until,
    total,
    value,
)
from tests.fakes import ListEventStream, ScriptedUpstream, function_call, message, round_events
from tests.helpers import ROOT, in_process, local_egress, openai_client

TOKEN = "metrics-token-0123456789"
GATEWAY_KEY = "sk-gateway-key-0123456789"


class FailingUpstream(ScriptedUpstream):
    """The script, except for model ``broken`` (a timeout before anything) and ``cut`` (a
    stream that times out after its first delta)."""

    async def create_response(self, body: JsonObject, headers: Mapping[str, str]) -> JsonObject:
        if body.get("model") == "broken":
            raise UpstreamTimeoutError("the upstream did not answer in time")
        return await super().create_response(body, headers)

    async def stream_response(
        self, body: JsonObject, headers: Mapping[str, str]
    ) -> ListEventStream:
        if body.get("model") == "broken":
            raise UpstreamTimeoutError("the upstream did not answer in time")
        if body.get("model") == "cut":
            events = round_events([message("never finished")])[:4]  # up to the first delta
            return ListEventStream(copy.deepcopy(events), UpstreamTimeoutError("read timed out"))
        return await super().stream_response(body, headers)


def metered_app(upstream: ScriptedUpstream, **metrics: object) -> object:
    settings = Settings(egress=local_egress(), metrics=MetricsSettings(**metrics))  # type: ignore[arg-type]
    return create_app(settings, upstream=upstream)


@dataclass(frozen=True)
class Traffic:
    """What one gateway counted after the traffic of ``traffic``, and the usage it answered."""

    samples: Samples
    tokens_in: int
    tokens_out: int


@pytest.fixture(scope="module")
def traffic(counter_url: str, tmp_path_factory: pytest.TempPathFactory) -> Traffic:
    """JSON, stream, an MCP tool call, an unknown model, an upstream timeout before and
    during a stream and two retrievals, through the ``openai`` SDK; then one scrape."""
    upstream = FailingUpstream(
        [
            [message("json answer")],
            [message("streamed answer")],
            [function_call("mcp__counter__sum", '{"a": 1, "b": 2}')],
            [message("3")],
            [message("from a model nobody configured")],
        ]
    )
    data_dir = tmp_path_factory.mktemp("metrics-data")
    metrics = MetricsSettings(models=["m"], max_learned_models=0)
    settings = Settings(egress=local_egress(), metrics=metrics, data_dir=data_dir)
    with in_process(create_app(settings, upstream=upstream)) as http:
        client = openai_client(http)
        created = client.responses.create(model="m", input="hi")
        with client.responses.stream(model="m", input="hi") as stream:
            streamed = stream.get_final_response()
        tool = {
            "type": "mcp",
            "server_label": "counter",
            "server_url": counter_url,
            "require_approval": "never",
        }
        looped = client.responses.create(model="m", input="1+2?", tools=[tool])  # type: ignore[list-item]
        client.responses.create(model="zz-unknown", input="hi")
        with pytest.raises(openai.APIStatusError) as refused:
            client.responses.create(model="broken", input="hi")
        assert refused.value.status_code == 504
        with client.responses.stream(model="cut", input="hi") as stream:
            failed = [event for event in stream if event.type == "response.failed"]
        assert len(failed) == 1
        client.responses.retrieve(created.id)
        client.responses.retrieve(streamed.id)

        samples = scrape_until(
            lambda: http.get("/metrics"),
            lambda s: total(s, "respgate_tool_calls_total") >= 1,
        )
    usage = [u for u in (created.usage, streamed.usage, looped.usage) if u is not None]
    assert len(usage) == 3
    return Traffic(
        samples,
        tokens_in=sum(u.input_tokens for u in usage),
        tokens_out=sum(u.output_tokens for u in usage),
    )


def test_traffic_through_the_sdk_is_counted_with_bounded_labels(traffic: Traffic) -> None:
    samples = traffic.samples
    requests = "respgate_http_requests_total"
    post = {"route": "/v1/responses", "method": "POST"}
    assert value(samples, requests, **post, status="200", model="m") == 3
    assert value(samples, requests, **post, status="200", model="other") == 2  # zz-unknown, cut
    assert value(samples, requests, **post, status="504", model="other") == 1
    retrieve = {"route": "/v1/responses/{response_id}", "method": "GET", "status": "200"}
    assert value(samples, requests, **retrieve, model="") == 2
    routes = label_values(samples, requests, "route")
    assert not [route for route in routes if "resp_" in route], routes  # templates, never ids
    assert label_values(samples, requests, "model") <= {"m", "other", ""}

    durations = "respgate_http_request_duration_seconds_count"
    assert value(samples, durations, route="/v1/responses", method="POST", model="m") == 3

    responses = "respgate_responses_total"
    assert value(samples, responses, model="m", status="completed", stream="false") == 2
    assert value(samples, responses, model="m", status="completed", stream="true") == 1
    assert value(samples, responses, model="other", status="failed", stream="true") == 1

    tokens = "respgate_tokens_total"
    assert value(samples, tokens, model="m", direction="input") == traffic.tokens_in
    assert value(samples, tokens, model="m", direction="output") == traffic.tokens_out

    ttft = "respgate_time_to_first_token_seconds_count"
    assert value(samples, ttft, model="m") == 1  # the one stream of model m
    assert value(samples, ttft, model="other") == 1  # the cut stream had its first delta

    assert value(samples, "respgate_tool_calls_total", kind="mcp", outcome="ok") == 1
    tool_count = "respgate_tool_call_duration_seconds_count"
    assert value(samples, tool_count, kind="mcp", outcome="ok") == 1

    errors = "respgate_upstream_errors_total"
    assert value(samples, errors, code="upstream_timeout") == 2  # before, and during a stream
    assert value(samples, "respgate_open_streams") == 0
    assert value(samples, "respgate_background_responses") == 0


DASHBOARD = ROOT / "deploy" / "grafana" / "dashboards" / "respgate.json"


def dashboard_metric_names() -> dict[str, set[str]]:
    """Each metric name the dashboard's panels query, with the panels that do."""
    dashboard = json.loads(DASHBOARD.read_text())
    used: dict[str, set[str]] = {}
    for panel in dashboard["panels"]:
        for target in panel.get("targets", []):
            for name in re.findall(r"\b(respgate_[a-z_]+)\b", target["expr"]):
                used.setdefault(name, set()).add(panel["title"])
    return used


def test_every_metric_the_dashboard_queries_is_exported(traffic: Traffic) -> None:
    used = dashboard_metric_names()
    assert len(used) >= 8, used
    exported = {name for name, _ in traffic.samples}
    missing = {name: panels for name, panels in used.items() if name not in exported}
    assert not missing, f"the dashboard queries metrics the gateway does not export: {missing}"
    # And the dashboard shows every family the gateway exports (a _bucket, _count or _total of it).
    families = {re.sub(r"_(bucket|count|sum|created|total)$", "", n) for n in exported}
    shown = {re.sub(r"_(bucket|count|sum|created|total)$", "", n) for n in used}
    assert families - shown == set(), families - shown


def test_the_dashboard_is_grafana_json_on_a_prometheus_data_source() -> None:
    dashboard = json.loads(DASHBOARD.read_text())
    assert dashboard["uid"] == "respgate" and dashboard["panels"]
    variables = {v["name"]: v for v in dashboard["templating"]["list"]}
    assert variables["datasource"]["query"] == "prometheus"
    ids = [panel["id"] for panel in dashboard["panels"]]
    assert len(ids) == len(set(ids))
    for panel in dashboard["panels"]:
        assert panel["datasource"] == {"type": "prometheus", "uid": "${datasource}"}, panel["title"]
        assert panel["targets"], panel["title"]
        for target in panel["targets"]:
            expr = target["expr"]
            assert expr.count("(") == expr.count(")"), expr
            assert 'job=~"$job"' in expr, expr  # every query follows the job variable


def test_a_failed_tool_call_is_counted_by_why(counter_url: str, _isolated_data_dir: Path) -> None:
    upstream = ScriptedUpstream(
        [[function_call("mcp__counter__fail", '{"message": "no such customer"}')], [message("x")]]
    )
    tool = {"type": "mcp", "server_label": "counter", "server_url": counter_url}
    with in_process(metered_app(upstream)) as http:
        reply = http.post(
            "/v1/responses",
            json={"model": "m", "input": "go", "tools": [{**tool, "require_approval": "never"}]},
        )
        assert reply.status_code == 200, reply.text
        samples = scrape_until(
            lambda: http.get("/metrics"), lambda s: total(s, "respgate_tool_calls_total") >= 1
        )
    assert value(samples, "respgate_tool_calls_total", kind="mcp", outcome="tool_error") == 1


def test_models_are_learned_from_completed_responses_up_to_the_limit(
    _isolated_data_dir: Path,
) -> None:
    upstream = ScriptedUpstream([[message("a")], [message("b")], [message("c")]])
    with in_process(metered_app(upstream, max_learned_models=1)) as http:
        for model in ("first", "first", "second"):
            assert (
                http.post("/v1/responses", json={"model": model, "input": "x"}).status_code == 200
            )
        samples = parse_samples(http.get("/metrics").text)
    responses = "respgate_responses_total"
    assert value(samples, responses, model="first", status="completed", stream="false") == 2
    assert value(samples, responses, model="other", status="completed", stream="false") == 1


def auth_settings(**metrics: object) -> Settings:
    auth = AuthSettings(mode="on", keys=[ApiKeyConfig(tenant="t", key=GATEWAY_KEY)])  # type: ignore[arg-type]
    return Settings(auth=auth, metrics=MetricsSettings(**metrics))  # type: ignore[arg-type]


def test_with_authentication_on_and_no_token_nobody_reads_metrics(
    _isolated_data_dir: Path,
) -> None:
    with in_process(create_app(auth_settings(), upstream=ScriptedUpstream([]))) as http:
        for headers in ({}, {"authorization": f"Bearer {GATEWAY_KEY}"}):
            reply = http.get("/metrics", headers=headers)
            assert reply.status_code == 403
            assert reply.json()["error"]["code"] == "metrics_not_served"
        # Refusals of the API are still counted (the metrics run outside authentication).
        assert http.get("/v1/models").status_code == 401


def test_the_metrics_token_opens_metrics_and_nothing_else(_isolated_data_dir: Path) -> None:
    app = create_app(auth_settings(token=TOKEN), upstream=ScriptedUpstream([]))
    with in_process(app) as http:
        assert http.get("/v1/models").status_code == 401
        for headers in ({}, {"authorization": f"Bearer {GATEWAY_KEY}"}, {"x-api-key": "nope"}):
            reply = http.get("/metrics", headers=headers)
            assert reply.status_code == 401
            assert reply.headers["www-authenticate"].startswith("Bearer")
            assert reply.json()["error"]["code"] == "invalid_api_key"
        assert (
            http.get("/v1/models", headers={"authorization": f"Bearer {TOKEN}"}).status_code == 401
        )
        reply = http.get("/metrics", headers={"authorization": f"Bearer {TOKEN}"})
        assert reply.status_code == 200
        assert reply.headers["content-type"].startswith("text/plain")
        samples = parse_samples(reply.text)
    # The two refusals of /v1/models (before routing: no route ran); /metrics is not counted.
    unauthorized = {"route": "unmatched", "method": "GET", "status": "401", "model": ""}
    assert value(samples, "respgate_http_requests_total", **unauthorized) == 2


def test_metrics_can_be_turned_off(_isolated_data_dir: Path) -> None:
    with in_process(metered_app(ScriptedUpstream([]), enabled=False)) as http:
        assert http.get("/metrics").status_code == 404


def test_only_get_reads_metrics(_isolated_data_dir: Path) -> None:
    with in_process(metered_app(ScriptedUpstream([]))) as http:
        assert http.post("/metrics").status_code == 405
        assert http.head("/metrics").status_code == 200


class HeldEvents(ListEventStream):
    """A stream held after its first event until ``release`` is set."""

    def __init__(self, events: list[JsonObject], held: threading.Event, release: threading.Event):
        super().__init__(events)
        self.held, self.release = held, release

    async def _iter(self) -> AsyncIterator[JsonObject]:
        first = True
        async for event in super()._iter():
            yield event
            if first:
                first = False
                self.held.set()
                await asyncio.to_thread(self.release.wait, 60)


class HeldUpstream(ScriptedUpstream):
    """The script, each stream held after its first event until ``release`` is set."""

    def __init__(self, rounds: list[list[JsonObject]]) -> None:
        super().__init__(rounds)
        self.release = threading.Event()
        self.held = threading.Event()

    async def stream_response(
        self, body: JsonObject, headers: Mapping[str, str]
    ) -> ListEventStream:
        stream = await super().stream_response(body, headers)
        return HeldEvents(stream._events, self.held, self.release)


def gauge_until(http: Any, name: str, wanted: float) -> float:
    samples = scrape_until(lambda: http.get("/metrics"), lambda s: value(s, name) == wanted)
    return value(samples, name)


def test_open_streams_and_background_responses_are_gauged() -> None:
    upstream = HeldUpstream([[message("background")], [message("streamed")]])
    with in_process(metered_app(upstream)) as http:
        queued = http.post("/v1/responses", json={"model": "m", "input": "x", "background": True})
        assert queued.status_code == 200, queued.text
        assert gauge_until(http, "respgate_background_responses", 1) == 1
        upstream.release.set()
        assert gauge_until(http, "respgate_background_responses", 0) == 0

        upstream.release.clear()
        upstream.held.clear()
        body = {"model": "m", "input": "x", "stream": True}
        with concurrent.futures.ThreadPoolExecutor(1) as pool:
            streaming = pool.submit(lambda: http.post("/v1/responses", json=body))
            assert upstream.held.wait(30)
            assert gauge_until(http, "respgate_open_streams", 1) == 1
            upstream.release.set()
            assert streaming.result(timeout=60).status_code == 200
        assert gauge_until(http, "respgate_open_streams", 0) == 0
