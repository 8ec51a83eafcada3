"""The server-side tool loop: infer -> decide -> run the gateway's tools -> feed back.

``ToolLoop`` runs the rounds of one response and yields the client's events (unnumbered:
``core.stream.ResponseLifecycle`` numbers them), one lifecycle across every round:
``output_index`` is global, the upstream's ``function_call`` events for gateway-owned calls are
replaced by the executor's own item events (``mcp_call`` …: ``core.round_view``), and text
streams live. After the iteration its ``output``, ``status``, ``usage``, ``error`` and
``incomplete_details`` describe the final response, like ``ResponseAccumulator``'s do for a
single round.

Two lists grow side by side: ``output`` is what the client sees; ``_model_items`` is what the
next round's upstream reads (the model's own items, its calls as ``function_call`` and their
results as ``function_call_output``). Both, with the round number, usage and calls run, make a
``core.checkpoint.LoopCheckpoint``: reported after each round whose gateway calls all have
results, and a loop can start from one (a background job taken over) instead of from round 1:
``use_checkpoints``, before it opens.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from dataclasses import dataclass

from app.core.accumulator import ResponseAccumulator
from app.core.call_runner import CallRunner
from app.core.checkpoint import Checkpoints, LoopCheckpoint
from app.core.context_window import RoundFit
from app.core.deadline import Deadline, timed_out_stream, within
from app.core.decide import Continue, Done, Incomplete, RequiresClientAction, decide_next
from app.core.limits import LoopLimits as LoopLimits
from app.core.observe import (
    ToolEvents,
)
from app.core.ports import SingleResponseStream, Upstream, UpstreamEventStream
from app.core.response import add_usage
from app.core.round_view import RoundView, added_event, call_event, done_event
from app.core.tools import (
    GatewayCall,
    PreparedTools,
    ToolExecutor,
    ToolResult,
)
from app.errors import UpstreamProtocolError, UpstreamTimeoutError
from app.protocol.events import StreamEvent
from app.protocol.items import FunctionCallItem
from app.protocol.json_types import JsonObject

logger = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class LoopRequest:
    """What a loop sends upstream each round, and for which response."""

    upstream_body: JsonObject  # the client's body without the fields the loop answers
    headers: Mapping[str, str]
    stream: bool
    response_id: str
    max_tool_calls: int | None = None
    # Checks a later round's input against the context window (core.context_window.RoundWindow):
    # (body, items, index of the response's own first item) -> what to send, or the failure.
    fit_round: Callable[[JsonObject, list[JsonObject], int], Awaitable[RoundFit]] | None = None
    # The whole request's deadline (core.deadline): past it the response ends incomplete.
    deadline: Deadline | None = None


class ToolLoop:
    """One response's rounds (see the module docstring)."""

    def __init__(
        self,
        *,
        upstream: Upstream,
        request: LoopRequest,
        prepared: PreparedTools,
        limits: LoopLimits,
        tool_events: ToolEvents | None = None,
    ) -> None:
        self._upstream = upstream
        self._headers = request.headers
        self._body = request.upstream_body
        self._prepared = prepared
        self._limits = limits
        self._stream = request.stream
        self._response_id = request.response_id
        self._max_tool_calls = request.max_tool_calls
        self._fit_round = request.fit_round
        self._runner = CallRunner(
            tool_events or ToolEvents(),
            request.response_id,
            call_timeout=limits.call_timeout,
            max_concurrency=limits.max_concurrency,
            max_result_bytes=limits.max_result_bytes,
        )
        self._deadline = request.deadline
        self._timed_out = False
        self._model_items: list[JsonObject] = list(prepared.upstream_input)
        self._pending: UpstreamEventStream | None = None
        self._accumulator: ResponseAccumulator | None = None
        self._view: RoundView | None = None
        self._held: dict[str, tuple[GatewayCall, ToolExecutor]] = {}
        self._calls_run = 0
        self._results_fed = False
        self._round = 0
        self.output: list[JsonObject] = []
        self.upstream_response: JsonObject = {}
        self.status: str | None = None
        self.usage: JsonObject | None = None
        self.error: JsonObject | None = None
        self.incomplete_details: JsonObject | None = None
        self.finished = False
        self._resumed = False
        self._checkpoints = Checkpoints()

    # ------------------------------------------------------------------ public API

    async def open(self) -> None:
        """Start the first round now when nothing has to run before it, so that an upstream
        that refuses the request is reported before the client's stream starts (a loop resumed
        from a checkpoint opens its round in ``events``, where the round's input is fitted)."""
        if not self._prepared.approved and not self._resumed:
            self._pending = await within(self._deadline, self._open_first(), timed_out_stream)

    async def _open_first(self) -> UpstreamEventStream:
        deadline = self._limits.round_timeout
        try:
            async with asyncio.timeout(deadline):
                return await self._open_round()
        except TimeoutError:
            raise UpstreamTimeoutError(
                f"the upstream did not answer round 1 within {deadline} s"
            ) from None

    async def events(self) -> AsyncIterator[StreamEvent]:
        """The client's events for every round; sets the final state when it ends."""
        for prelude in [] if self._resumed else self._prepared.prelude:  # else: in the output
            index = len(self.output)
            self.output.append(prelude.item)
            yield added_event(index, prelude.opening)
            for kind in prelude.events:
                yield {"type": kind, "output_index": index, "item_id": prelude.item.get("id")}
            yield done_event(index, prelude.item)
        if self._prepared.approved and not self._resumed:
            for call, executor in self._prepared.approved:
                call.output_index = len(self.output)
                opened = executor.open_item(call)
                call.item_id = str(opened["id"])
                self.output.append(opened)
                for event in self._open_call_events(call, executor, opened):
                    yield event
            async for event in self._run_calls(list(self._prepared.approved)):
                yield event
            await self._round_done()
        while True:
            if self._timed_out or (self._deadline is not None and self._deadline.passed):
                for event in self._stop_at_deadline():
                    yield event
                return
            self._round += 1
            self._runner.round = self._round
            if self._round > self._limits.max_rounds + 1:
                raise UpstreamProtocolError("the tool loop exceeded its round guard")
            async for event in self._run_round():
                yield event
            if self.finished:
                return
            await self._round_done()

    def checkpoint(self) -> LoopCheckpoint:
        """Where the loop stands between rounds (``core.checkpoint``)."""
        return LoopCheckpoint(
            output=list(self.output),
            model_items=list(self._model_items),
            round=self._round,
            usage=self.usage,
            calls_run=self._calls_run,
            results_fed=self._results_fed,
        )

    def use_checkpoints(self, checkpoints: Checkpoints) -> None:
        """Before ``open``: start from ``checkpoints.resume_from`` (when set) and report each
        round's checkpoint to ``checkpoints.on_round`` (and await ``before_calls`` before
        gateway calls start)."""
        self._checkpoints = checkpoints
        checkpoint = checkpoints.resume_from
        if checkpoint is None:
            return
        self._resumed = True
        self.output = list(checkpoint.output)
        self._model_items = list(checkpoint.model_items)
        self._round = checkpoint.round
        self.usage = checkpoint.usage
        self._calls_run = checkpoint.calls_run
        self._results_fed = checkpoint.results_fed

    async def _round_done(self) -> None:
        on_round = self._checkpoints.on_round
        if on_round is not None:
            await on_round(self.checkpoint())

    def finish(self, status: str = "incomplete") -> list[StreamEvent]:
        """Close every item still open (the response failed); returns the closing events."""
        events: list[StreamEvent] = []
        accumulator, view = self._accumulator, self._view
        if accumulator is not None and view is not None:
            for event in accumulator.finish(status):
                events.extend(view.translate(event))
            self.output.extend(view.client_item(item) for item in accumulator.output)
            for call in list(view.open_calls.values()):
                self._held.setdefault(call.item_id, (call, view.executors[call.name]))
            self._accumulator = self._view = None
        for call, executor in list(self._held.values()):
            result = executor.error_result(
                call, "the response ended before this call finished", status="incomplete"
            )
            self._set_output(call.output_index, result.item)
            events.append(done_event(call.output_index, result.item))
        self._held.clear()
        return events

    def _stop_at_deadline(self) -> list[StreamEvent]:
        """End the response ``incomplete`` at the request's deadline: what is open is closed."""
        assert self._deadline is not None
        events = self.finish("incomplete")
        self.status, self.incomplete_details = "incomplete", self._deadline.details
        self.finished = True
        logger.info("response %s reached its time limit", self._response_id)
        return events

    async def aclose(self) -> None:
        if self._pending is not None:
            pending, self._pending = self._pending, None
            await pending.aclose()
        await self._prepared.aclose()

    # ------------------------------------------------------------------ rounds

    async def _open_round(self, items: list[JsonObject] | None = None) -> UpstreamEventStream:
        body = {**self._body, "input": items or self._model_items, "stream": self._stream}
        if self._results_fed and body.get("tool_choice") not in (None, "auto", "none"):
            # A forced choice (``required``, a named tool) has been honoured once the model's
            # call ran: forcing it again would keep the model from ever answering (vLLM decodes
            # a forced choice as structured output that must contain a call).
            body["tool_choice"] = "auto"
        if self._stream:
            return await self._upstream.stream_response(body, self._headers)
        return SingleResponseStream(await self._upstream.create_response(body, self._headers))

    async def _run_round(self) -> AsyncIterator[StreamEvent]:
        items = self._model_items
        if self._pending is None and self._results_fed and self._fit_round is not None:
            fitted = await self._fit_round(self._body, items, len(self._prepared.upstream_input))
            if fitted.error is not None:
                self.status, self.error, self.finished = "failed", fitted.error, True
                return
            items = fitted.items
        offset = len(self.output)
        accumulator = ResponseAccumulator(output_offset=offset)
        view = RoundView(self._prepared.executors, self._prepared.annotators)
        self._accumulator, self._view = accumulator, view
        deadline = self._limits.round_timeout
        request_deadline = self._deadline
        if request_deadline is None:
            timeout = asyncio.timeout(deadline)
        else:
            timeout = asyncio.timeout_at(request_deadline.sooner(deadline))
        try:
            async with timeout:
                stream = self._pending or await self._open_round(items)
                self._pending = None
                try:
                    async for upstream_event in stream:
                        for event in accumulator.feed(upstream_event):
                            for out in view.translate(event):
                                yield out
                        if accumulator.finished:
                            break
                finally:
                    await stream.aclose()
        except TimeoutError:
            if request_deadline is None or not request_deadline.passed:
                raise UpstreamTimeoutError(
                    f"the upstream did not finish round {self._round} within {deadline} s"
                ) from None
            for event in self._stop_at_deadline():
                yield event
            return
        if not accumulator.finished:
            raise UpstreamProtocolError(
                "the upstream stream ended before the response was complete"
            )
        self.upstream_response = accumulator.upstream_response
        self.usage = add_usage(self.usage, accumulator.usage)
        self.output.extend(view.client_item(item) for item in accumulator.output)
        for call in view.open_calls.values():
            self._held[call.item_id] = (call, view.executors[call.name])
        self._accumulator = self._view = None
        if accumulator.status == "failed":
            self.status, self.error = "failed", accumulator.error
            self.finished = True
            return
        if accumulator.status in ("incomplete", "cancelled"):
            async for event in self._close_unrun(
                "the response was cut off before this call ran", "incomplete"
            ):
                yield event
            self.status = "incomplete"
            self.incomplete_details = accumulator.incomplete_details
            self.finished = True
            return
        decision = decide_next(
            accumulator.output,
            self._prepared.executors,
            self._round,
            self._limits.max_rounds,
            needs_approval=frozenset(view.approvals),
        )
        if isinstance(decision, Done):
            self.status, self.finished = "completed", True
            return
        if isinstance(decision, Incomplete):
            async for event in self._close_unrun(
                f"not run: the tool loop reached its limit of {self._limits.max_rounds} rounds",
                "incomplete",
            ):
                yield event
            self.status = "incomplete"
            self.incomplete_details = {"reason": decision.reason}
            self.finished = True
            return
        self._model_items.extend(accumulator.output)
        pairs = [self._held[call.item_id] for call in _in_order(view, decision.calls)]
        async for event in self._run_calls(pairs):
            yield event
        if self._timed_out:
            return  # the next pass of ``events`` ends the response
        if isinstance(decision, RequiresClientAction):
            self.status, self.finished = "completed", True
            return
        assert isinstance(decision, Continue)

    # ------------------------------------------------------------------ gateway calls

    def _open_call_events(
        self, call: GatewayCall, executor: ToolExecutor, opened: JsonObject
    ) -> list[StreamEvent]:
        events: list[StreamEvent] = [added_event(call.output_index, opened)]
        events.extend(call_event(t, call) for t in executor.presentation.opened_events)
        names = executor.presentation.arguments_events
        if names is not None:
            events.append({**call_event(names[0], call), "delta": call.arguments})
            events.append({**call_event(names[1], call), "arguments": call.arguments})
        self._held[call.item_id] = (call, executor)
        return events

    async def _run_calls(
        self, pairs: list[tuple[GatewayCall, ToolExecutor]]
    ) -> AsyncIterator[StreamEvent]:
        """Run gateway calls concurrently (bounded); results are reported in call order."""
        runnable: list[tuple[GatewayCall, ToolExecutor]] = []
        refused: dict[str, ToolResult] = {}
        per_round = self._limits.max_calls_per_round
        for call, executor in pairs:
            reason = None
            if self._max_tool_calls is not None and self._calls_run >= self._max_tool_calls:
                reason = f"this response reached max_tool_calls ({self._max_tool_calls})"
            elif per_round is not None and len(runnable) >= per_round:
                reason = f"the gateway runs at most {per_round} tool calls per round"
            if reason is not None:
                refused[call.item_id] = executor.error_result(
                    call, f"not run: {reason}", status="incomplete"
                )
                continue
            self._calls_run += 1
            runnable.append((call, executor))
        for call, executor in runnable:
            for kind in executor.presentation.running_events:
                yield call_event(kind, call)
        before_calls = self._checkpoints.before_calls
        if runnable and before_calls is not None:
            await before_calls()  # a background run records that calls start
        running = self._runner.start(runnable)
        try:
            for call, executor in pairs:
                result = refused.get(call.item_id)
                if result is None and not self._timed_out:
                    result = await running.result_before(call.item_id, self._deadline)
                if result is None:  # past the request's deadline: cancelled below
                    assert self._deadline is not None
                    self._timed_out = True
                    result = executor.error_result(
                        call, self._deadline.not_finished, status="incomplete"
                    )
                for event in self._close_call(call, executor, result):
                    yield event
                self._results_fed = True
                self._model_items.append(
                    {
                        "type": "function_call_output",
                        "call_id": call.call_id,
                        "output": result.model_output,
                    }
                )
        finally:
            running.cancel()

    def _close_call(
        self, call: GatewayCall, executor: ToolExecutor, result: ToolResult
    ) -> list[StreamEvent]:
        self._held.pop(call.item_id, None)
        self._set_output(call.output_index, result.item)
        presentation = executor.presentation
        kind = presentation.completed_event if result.ok else presentation.failed_event
        return [call_event(kind, call), done_event(call.output_index, result.item)]

    async def _close_unrun(self, message: str, status: str) -> AsyncIterator[StreamEvent]:
        for call, executor in list(self._held.values()):
            result = executor.error_result(call, message, status=status)
            for event in self._close_call(call, executor, result):
                yield event

    def _set_output(self, index: int, item: JsonObject) -> None:
        if 0 <= index < len(self.output):
            self.output[index] = item


def _in_order(view: RoundView, items: list[FunctionCallItem]) -> list[GatewayCall]:
    """The gateway calls of ``items`` (the round's ``function_call`` items), in call order."""
    return [view.calls[item["id"]] for item in items]
