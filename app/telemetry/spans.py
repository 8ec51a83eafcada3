"""Spans with the OpenTelemetry GenAI semantic conventions (semconv 1.37+).

- ``TracedUpstream`` wraps the upstream the responses' rounds go through
  (``ResponsesService.inference``): one CLIENT span ``chat {model}`` per inference round, from
  the request until the stream is closed (``gen_ai.operation.name`` ``chat``,
  ``gen_ai.provider.name``, ``gen_ai.request.model``; from the final Response:
  ``gen_ai.response.id``, ``gen_ai.response.model``, ``gen_ai.usage.input_tokens`` and
  ``output_tokens``, ``gen_ai.response.finish_reasons``). Its context goes upstream as
  ``traceparent``, so an inference server that traces (vLLM) joins the trace.
- ``ToolCallTracer`` is the kernel's ``core.tracing.CallTracer``: one INTERNAL span
  ``execute_tool {name}`` per gateway tool call (``gen_ai.tool.name``, ``gen_ai.tool.call.id``,
  ``error.type`` when it failed), fed by the call's ``tool_call.*`` events.

Both start in the context they are called in: the request's server span (FastAPI's, ``POST
/v1/responses``), so a response with one tool round is request → chat, execute_tool, chat.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping
from typing import Any

from opentelemetry import propagate, trace
from opentelemetry.trace import Span, SpanKind, StatusCode, Tracer

from app.core.observe import ToolCallEvent
from app.core.ports import RawReply, Upstream, UpstreamEventStream
from app.core.tracing import CallSpan
from app.protocol.json_types import JsonObject

PROVIDER = "openai"  # the API every upstream kind is reached through
_TERMINAL = frozenset({"response.completed", "response.incomplete", "response.failed"})
_FINISH = {"completed": "stop", "failed": "error", "cancelled": "cancelled"}


class TracedUpstream:
    """``upstream`` with a ``chat`` span around each ``create_response`` and
    ``stream_response`` (its other calls pass through)."""

    def __init__(self, upstream: Upstream, tracer: Tracer) -> None:
        self._upstream = upstream
        self._tracer = tracer

    def _start(self, body: JsonObject, headers: Mapping[str, str]) -> tuple[Span, dict[str, str]]:
        model = body.get("model")
        attributes: dict[str, Any] = {
            "gen_ai.operation.name": "chat",
            "gen_ai.provider.name": PROVIDER,
            "gen_ai.system": PROVIDER,  # its name before semconv 1.37
        }
        if isinstance(model, str):
            attributes["gen_ai.request.model"] = model
        for field, name in (
            ("max_output_tokens", "gen_ai.request.max_tokens"),
            ("temperature", "gen_ai.request.temperature"),
            ("top_p", "gen_ai.request.top_p"),
        ):
            value = body.get(field)
            if isinstance(value, int | float) and not isinstance(value, bool):
                attributes[name] = value
        request_id = headers.get("x-request-id")
        if request_id is not None:
            trace.get_current_span().set_attribute("respgate.request_id", request_id)
        span = self._tracer.start_span(
            f"chat {model}" if isinstance(model, str) else "chat",
            kind=SpanKind.CLIENT,
            attributes=attributes,
        )
        carrier = dict(headers)
        propagate.inject(carrier, context=trace.set_span_in_context(span))
        return span, carrier

    async def create_response(self, body: JsonObject, headers: Mapping[str, str]) -> JsonObject:
        span, carrier = self._start(body, headers)
        try:
            response = await self._upstream.create_response(body, carrier)
        except BaseException as exc:
            _failed(span, exc)
            span.end()
            raise
        _record_response(span, response)
        span.end()
        return response

    async def stream_response(
        self, body: JsonObject, headers: Mapping[str, str]
    ) -> UpstreamEventStream:
        span, carrier = self._start(body, headers)
        try:
            stream = await self._upstream.stream_response(body, carrier)
        except BaseException as exc:
            _failed(span, exc)
            span.end()
            raise
        return _TracedStream(stream, span)

    async def list_models(self, headers: Mapping[str, str]) -> RawReply:
        return await self._upstream.list_models(headers)

    async def check_ready(self) -> bool:
        return await self._upstream.check_ready()

    async def aclose(self) -> None:
        await self._upstream.aclose()


class _TracedStream:
    """An upstream stream whose span ends when it is closed, with what its terminal event
    said (a stream closed before one came: cut short)."""

    def __init__(self, stream: UpstreamEventStream, span: Span) -> None:
        self._stream = stream
        self._span = span
        self._ended = False

    def __aiter__(self) -> AsyncIterator[JsonObject]:
        return self._events()

    async def _events(self) -> AsyncIterator[JsonObject]:
        try:
            async for event in self._stream:
                if event.get("type") in _TERMINAL:
                    response = event.get("response")
                    if isinstance(response, dict):
                        _record_response(self._span, response)
                yield event
        except Exception as exc:
            _failed(self._span, exc)
            raise

    async def aclose(self) -> None:
        try:
            await self._stream.aclose()
        finally:
            if not self._ended:
                self._ended = True
                self._span.end()


def _record_response(span: Span, response: JsonObject) -> None:
    attributes: dict[str, Any] = {}
    for field, name in (("id", "gen_ai.response.id"), ("model", "gen_ai.response.model")):
        value = response.get(field)
        if isinstance(value, str):
            attributes[name] = value
    usage = response.get("usage")
    if isinstance(usage, dict):
        for field in ("input_tokens", "output_tokens"):
            count = usage.get(field)
            if isinstance(count, int):
                attributes[f"gen_ai.usage.{field}"] = count
    status = response.get("status")
    if isinstance(status, str):
        details = response.get("incomplete_details")
        reason = details.get("reason") if isinstance(details, dict) else None
        attributes["gen_ai.response.finish_reasons"] = [str(reason or _FINISH.get(status, status))]
        if status == "failed":
            attributes["error.type"] = "response_failed"
            span.set_status(StatusCode.ERROR)
    span.set_attributes(attributes)


def _failed(span: Span, exc: BaseException) -> None:
    code = getattr(exc, "code", None)
    span.set_attribute("error.type", code if isinstance(code, str) else type(exc).__qualname__)
    span.set_status(StatusCode.ERROR, type(exc).__qualname__)


class ToolCallTracer:
    """``core.tracing.CallTracer``: an ``execute_tool`` span per gateway tool call."""

    def __init__(self, tracer: Tracer) -> None:
        self._tracer = tracer

    def start(self, event: ToolCallEvent, call_id: str) -> CallSpan:
        span = self._tracer.start_span(
            f"execute_tool {event.tool}",
            kind=SpanKind.INTERNAL,
            attributes={
                "gen_ai.operation.name": "execute_tool",
                "gen_ai.tool.name": event.tool,
                "gen_ai.tool.call.id": call_id,
                "respgate.response_id": event.response_id,
                "respgate.tool.round": event.round,
                "respgate.tool.item_id": event.item_id,
            },
        )
        return _ToolSpan(span)


class _ToolSpan:
    __slots__ = ("_span",)

    def __init__(self, span: Span) -> None:
        self._span = span

    def end(self, event: ToolCallEvent | None) -> None:
        span = self._span
        if event is None:
            span.set_attribute("error.type", "cancelled")
            span.set_status(StatusCode.ERROR, "cancelled")
        elif not event.ok:
            span.set_attribute("error.type", event.error_kind or "error")
            span.set_status(StatusCode.ERROR, event.message or event.error_kind or "error")
        span.end()
