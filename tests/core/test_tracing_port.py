"""The tool loop's tracing port (``core.tracing``): each gateway call's span starts with its
``tool_call.started`` event (and the model's call id), in the call's own task, and ends with
its last event; a cancelled call's span ends too (``None``), so no span is left open."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import Any

from app.core.call_runner import CallRunner
from app.core.observe import COMPLETED, FAILED, STARTED, ToolCallEvent, ToolEvents
from app.core.tenancy import DEFAULT_TENANT
from app.core.tools import GatewayCall
from app.core.tracing import CallSpan
from app.protocol.requests import ParsedRequest
from tests.core.test_loop import BODY, FakeTool, make_service
from tests.fakes import function_call, message


@dataclass
class RecordedSpan:
    started: ToolCallEvent
    call_id: str
    task: asyncio.Task[Any] | None
    ended: list[ToolCallEvent | None] = field(default_factory=list)

    def end(self, event: ToolCallEvent | None) -> None:
        self.ended.append(event)


@dataclass
class RecordingTracer:
    spans: list[RecordedSpan] = field(default_factory=list)

    def start(self, event: ToolCallEvent, call_id: str) -> CallSpan:
        span = RecordedSpan(event, call_id, asyncio.current_task())
        self.spans.append(span)
        return span


async def test_each_call_has_one_span_from_started_to_its_last_event() -> None:
    def crash(arguments: Any) -> Any:
        raise RuntimeError("down")

    tools = [FakeTool("add", lambda a: 3), FakeTool("boom", crash)]
    calls = [
        function_call("mcp__fake__add", "{}", "call_a"),
        function_call("mcp__fake__boom", "{}", "call_b"),
    ]
    service, _, _ = make_service([calls, [message("done")]], tools)
    tracer = RecordingTracer()
    service.tool_events = ToolEvents()
    service.tool_events.tracer = tracer
    await service.create(ParsedRequest.from_body(BODY, tenant=DEFAULT_TENANT), {})
    spans = {span.call_id: span for span in tracer.spans}
    assert set(spans) == {"call_a", "call_b"}
    for call_id, kind in (("call_a", COMPLETED), ("call_b", FAILED)):
        span = spans[call_id]
        assert span.started.type == STARTED and span.started.round == 1
        (last,) = span.ended
        assert last is not None and last.type == kind
        assert last.item_id == span.started.item_id
    # each span starts in its call's own task (the context a tracer parents spans on)
    assert spans["call_a"].task is not spans["call_b"].task


async def test_a_cancelled_call_ends_its_span() -> None:
    started = asyncio.Event()

    async def hang(arguments: Any) -> Any:
        started.set()
        await asyncio.Event().wait()

    events = ToolEvents()
    tracer = RecordingTracer()
    events.tracer = tracer
    runner = CallRunner(events, "resp_1", call_timeout=60.0, max_concurrency=2)
    call = GatewayCall(
        item_id="mcp_1", call_id="call_1", name="mcp__fake__hang", arguments="{}", output_index=0
    )
    running = runner.start([(call, FakeTool("hang", hang))])
    await started.wait()
    running.cancel()
    result = asyncio.ensure_future(running.result("mcp_1"))
    await asyncio.wait([result])
    assert result.cancelled()
    (span,) = tracer.spans
    assert span.call_id == "call_1"
    assert span.ended == [None]
