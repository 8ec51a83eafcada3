"""``[tracing]``: OpenTelemetry spans with the GenAI semantic conventions, end to end (the
official ``openai`` SDK -> the gateway in process -> a scripted upstream, the model's call run
on the real counter MCP server).

One response with one tool round is one trace: FastAPI's server span ``POST /v1/responses``,
and under it ``chat {model}`` (round 1), ``execute_tool {name}``, ``chat {model}`` (round 2),
each with its GenAI attributes; the chat span's context goes upstream as ``traceparent``, and a
client's ``traceparent`` is the request span's parent. With an OTLP endpoint the spans reach a
collector over HTTP when the app stops; off, no span is made and nothing is wrapped.
"""

from __future__ import annotations

import copy
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind, StatusCode
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from app.core.tracing import NO_TRACING
from app.main import create_app
from app.protocol.json_types import JsonObject
from app.settings import Settings
from app.telemetry import provider
from tests.fakes import ListEventStream, ScriptedUpstream, function_call, message
from tests.helpers import in_process, local_egress, openai_client, serve_in_thread

TOOL = "mcp__counter__sum"  # the function the model calls
TOOL_NAME = "counter::sum"  # the tool's qualified name (the bus's events name it so too)
CLIENT_TRACE = "0af7651916cd43dd8448eb211c80319c"
CLIENT_PARENT = "b7ad6b7169203331"


class TracedScript(ScriptedUpstream):
    """A scripted upstream whose Responses have an id and a model, noting the headers."""

    def __init__(self, rounds: list[list[JsonObject]]) -> None:
        super().__init__(rounds)
        self.headers: list[dict[str, str]] = []

    async def create_response(self, body: JsonObject, headers: Mapping[str, str]) -> JsonObject:
        self.headers.append(dict(headers))
        response = await super().create_response(body, headers)
        return {**response, "id": f"resp_up{len(self.headers)}", "model": "test-model-v1"}

    async def stream_response(
        self, body: JsonObject, headers: Mapping[str, str]
    ) -> ListEventStream:
        self.headers.append(dict(headers))
        stream = await super().stream_response(body, headers)
        stream._events = copy.deepcopy(stream._events)
        final = stream._events[-1]["response"]
        final.update(id=f"resp_up{len(self.headers)}", model="test-model-v1")
        return stream


@pytest.fixture
def spans(monkeypatch: pytest.MonkeyPatch) -> InMemorySpanExporter:
    """The spans respgate's own provider makes, in memory (no collector)."""
    exporter = InMemorySpanExporter()
    monkeypatch.setattr(provider, "span_processor", lambda endpoint: SimpleSpanProcessor(exporter))
    return exporter


def mcp_tool(url: str) -> JsonObject:
    return {
        "type": "mcp",
        "server_label": "counter",
        "server_url": url,
        "require_approval": "never",
    }


def traced_settings(tmp_path: Path, **tracing: Any) -> Settings:
    return Settings(
        data_dir=tmp_path / "data", egress=local_egress(), tracing={"enabled": True, **tracing}
    )


def by_name(spans: tuple[ReadableSpan, ...], name: str) -> list[ReadableSpan]:
    return sorted((s for s in spans if s.name == name), key=lambda s: s.start_time or 0)


@pytest.mark.parametrize("stream", [False, True])
def test_one_tool_round_is_request_chat_tool_chat(
    tmp_path: Path, counter_url: str, spans: InMemorySpanExporter, stream: bool
) -> None:
    upstream = TracedScript([[function_call(TOOL, '{"a": 2, "b": 3}')], [message("5")]])
    with in_process(create_app(traced_settings(tmp_path), upstream=upstream)) as http:
        http.headers["traceparent"] = f"00-{CLIENT_TRACE}-{CLIENT_PARENT}-01"
        http.headers["x-request-id"] = "trace-me-1"
        client = openai_client(http)
        kwargs: dict[str, Any] = {"model": "test-model", "input": "2+3?"}
        kwargs["tools"] = [mcp_tool(counter_url)]
        if stream:
            with client.responses.stream(**kwargs) as events:
                response = events.get_final_response()
        else:
            response = client.responses.create(**kwargs)
    assert response.output_text == "5"
    finished = spans.get_finished_spans()

    (request,) = by_name(finished, "POST /v1/responses")
    assert request.kind == SpanKind.SERVER
    assert request.parent is not None and request.parent.span_id == int(CLIENT_PARENT, 16)
    assert request.context.trace_id == int(CLIENT_TRACE, 16)
    assert request.attributes["http.route"] == "/v1/responses"
    assert request.attributes["http.response.status_code"] == 200
    assert request.attributes["respgate.request_id"] == "trace-me-1"

    chats = by_name(finished, "chat test-model")
    (tool,) = by_name(finished, f"execute_tool {TOOL_NAME}")
    assert len(chats) == 2
    assert chats[0].end_time <= tool.start_time and tool.end_time <= chats[1].start_time
    for span in (*chats, tool):
        assert span.parent is not None and span.parent.span_id == request.context.span_id
        assert span.context.trace_id == request.context.trace_id
    for index, chat in enumerate(chats, start=1):
        assert chat.kind == SpanKind.CLIENT
        assert chat.status.status_code == StatusCode.UNSET
        assert dict(chat.attributes) == {
            "gen_ai.operation.name": "chat",
            "gen_ai.provider.name": "openai",
            "gen_ai.system": "openai",
            "gen_ai.request.model": "test-model",
            "gen_ai.response.id": f"resp_up{index}",
            "gen_ai.response.model": "test-model-v1",
            "gen_ai.usage.input_tokens": 10,
            "gen_ai.usage.output_tokens": 5,
            "gen_ai.response.finish_reasons": ("stop",),
        }
        traceparent = upstream.headers[index - 1]["traceparent"]
        assert traceparent == f"00-{CLIENT_TRACE}-{chat.context.span_id:016x}-01"
        assert upstream.headers[index - 1]["x-request-id"] == "trace-me-1"
    assert tool.kind == SpanKind.INTERNAL
    assert tool.status.status_code == StatusCode.UNSET
    call_id = next(item.id for item in response.output if item.type == "mcp_call")
    assert tool.attributes["gen_ai.operation.name"] == "execute_tool"
    assert tool.attributes["gen_ai.tool.name"] == TOOL_NAME
    assert str(tool.attributes["gen_ai.tool.call.id"]).startswith("call_")
    assert tool.attributes["respgate.tool.item_id"] == call_id
    assert tool.attributes["respgate.response_id"] == response.id
    assert tool.attributes["respgate.tool.round"] == 1


def test_a_failed_tool_call_is_an_error_span(
    tmp_path: Path, counter_url: str, spans: InMemorySpanExporter
) -> None:
    upstream = TracedScript([[function_call("mcp__counter__nope", "{}")], [message("sorry")]])
    with in_process(create_app(traced_settings(tmp_path), upstream=upstream)) as http:
        response = openai_client(http).responses.create(
            model="test-model", input="?", tools=[mcp_tool(counter_url)]
        )
    assert response.output_text == "sorry"
    (tool,) = by_name(spans.get_finished_spans(), "execute_tool counter::nope")
    assert tool.status.status_code == StatusCode.ERROR
    assert tool.attributes["error.type"]


def test_an_upstream_failure_is_an_error_chat_span(
    tmp_path: Path, spans: InMemorySpanExporter
) -> None:
    settings = traced_settings(tmp_path)
    settings.upstream_url = "http://127.0.0.1:9"  # nothing listens
    with in_process(create_app(settings)) as http:
        reply = http.post("/v1/responses", json={"model": "m", "input": "hi"})
    assert reply.status_code == 502
    (chat,) = by_name(spans.get_finished_spans(), "chat m")
    assert chat.status.status_code == StatusCode.ERROR
    assert chat.attributes["error.type"] == reply.json()["error"]["code"]
    (request,) = by_name(spans.get_finished_spans(), "POST /v1/responses")
    assert request.attributes["http.response.status_code"] == 502


def test_spans_reach_an_otlp_collector(tmp_path: Path) -> None:
    received: list[bytes] = []

    async def traces(request: Request) -> Response:
        received.append(await request.body())
        return Response(status_code=200)

    collector = Starlette(routes=[Route("/v1/traces", traces, methods=["POST"])])
    with serve_in_thread(collector) as url:
        upstream = TracedScript([[message("hi")]])
        settings = traced_settings(tmp_path, otlp_endpoint=url, service_name="gw-test")
        with in_process(create_app(settings, upstream=upstream)) as http:
            assert openai_client(http).responses.create(model="m", input="hi").output_text == "hi"
        # the app's shutdown flushed the batch
    names: set[str] = set()
    services: set[str] = set()
    for body in received:
        export = ExportTraceServiceRequest.FromString(body)
        for resource_spans in export.resource_spans:
            for attribute in resource_spans.resource.attributes:
                if attribute.key == "service.name":
                    services.add(attribute.value.string_value)
            for scope in resource_spans.scope_spans:
                names.update(span.name for span in scope.spans)
    assert names == {"POST /v1/responses", "chat m"}
    assert services == {"gw-test"}


def test_off_nothing_is_traced(tmp_path: Path, spans: InMemorySpanExporter) -> None:
    upstream = TracedScript([[message("hi")]])
    app = create_app(Settings(data_dir=tmp_path / "data"), upstream=upstream)
    with in_process(app) as http:
        assert openai_client(http).responses.create(model="m", input="hi").output_text == "hi"
        service = app.state.gateway.service
        assert service.inference is upstream
        assert service.tool_events.tracer is NO_TRACING
    assert spans.get_finished_spans() == ()
    assert "traceparent" not in upstream.headers[0]


@pytest.fixture(autouse=True)
def _no_global_provider() -> Iterator[None]:
    """respgate makes its own provider: the global one stays unconfigured."""
    from opentelemetry import trace

    yield
    assert not isinstance(trace.get_tracer_provider(), provider.TracerProvider)
