"""``CallRunner``: runs one round's gateway calls, concurrently and bounded, and reports each
to the tool-call event bus.

A call whose executor is a ``core.tools.BatchedToolExecutor`` goes to its batch together with
the round's other calls of the same batch (one tool engine batch); every other call runs on
its own. Each call runs in a span of ``ToolEvents.tracer`` (``core.tracing``; none by
default). ``start`` returns ``RunningCalls``, whose ``result`` gives each call's result (the
loop reads them in call order); a failure, a timeout or a crash is a result, never an
exception.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Sequence
from typing import Any

from app.core.bounds import bound_result
from app.core.deadline import Deadline
from app.core.observe import (
    COMPLETED,
    FAILED,
    MESSAGE_CHARS,
    STARTED,
    ToolCallEvent,
    ToolEvents,
    preview_of,
)
from app.core.tools import (
    GatewayCall,
    ToolBatch,
    ToolExecutor,
    ToolResult,
    batch_of,
    tool_name,
)

logger = logging.getLogger(__name__)

Pair = tuple[GatewayCall, ToolExecutor]


class RunningCalls:
    """The started calls of one round."""

    def __init__(
        self,
        tasks: dict[str, asyncio.Task[ToolResult]],
        batches: list[asyncio.Task[dict[str, ToolResult]]],
    ) -> None:
        self._tasks = tasks
        self._batches = batches
        self._batched: dict[str, ToolResult] = {}

    async def result(self, item_id: str) -> ToolResult:
        task = self._tasks.get(item_id)
        if task is not None:
            return await task
        while item_id not in self._batched:  # its batch answers all its calls at once
            done, _ = await asyncio.wait(self._batches, return_when=asyncio.FIRST_COMPLETED)
            for finished in done:
                self._batches.remove(finished)
                self._batched.update(finished.result())
        return self._batched[item_id]

    async def result_before(self, item_id: str, deadline: Deadline | None) -> ToolResult | None:
        """The call's result, or None when the request's deadline comes first."""
        if deadline is None:
            return await self.result(item_id)
        timeout = asyncio.timeout_at(deadline.at)
        try:
            async with timeout:
                return await self.result(item_id)
        except TimeoutError:
            if not timeout.expired():
                raise
            return None

    def cancel(self) -> None:
        for task in self._tasks.values():
            task.cancel()
        for batch in self._batches:
            batch.cancel()


class CallRunner:
    """Runs the gateway calls of one response's rounds (see the module docstring)."""

    def __init__(
        self,
        events: ToolEvents,
        response_id: str,
        *,
        call_timeout: float,
        max_concurrency: int,
        max_result_bytes: int | None = None,
    ) -> None:
        self._tool_events = events
        self._response_id = response_id
        self._call_timeout = call_timeout
        self._max_concurrency = max_concurrency
        self._max_result_bytes = max_result_bytes
        self.round = 0

    def start(self, runnable: Sequence[Pair]) -> RunningCalls:
        semaphore = asyncio.Semaphore(self._max_concurrency)
        tasks: dict[str, asyncio.Task[ToolResult]] = {}
        batched: dict[int, tuple[ToolBatch, list[Pair]]] = {}
        for call, executor in runnable:
            batch = batch_of(executor)
            if batch is not None:
                group = batched.setdefault(id(batch), (batch, []))
                group[1].append((call, executor))
            else:
                tasks[call.item_id] = asyncio.create_task(self._run_one(call, executor, semaphore))
        batches = [
            asyncio.create_task(self._run_batch(batch, group, semaphore))
            for batch, group in batched.values()
        ]
        return RunningCalls(tasks, batches)

    async def _run_batch(
        self,
        batch: ToolBatch,
        pairs: list[Pair],
        semaphore: asyncio.Semaphore,
    ) -> dict[str, ToolResult]:
        """The calls of one batch, run together; every call gets a result."""
        async with semaphore:
            tracer = self._tool_events.tracer
            spans = [tracer.start(self.observe(c, ex), c.call_id) for c, ex in pairs]
            started = time.perf_counter()
            timeout = self._call_timeout
            try:
                # A batch may run its calls one after another (an engine whose later calls
                # read the earlier results): each call has its own timeout.
                async with asyncio.timeout(timeout * len(pairs) + 1.0):
                    results = await batch.run_batch([call for call, _ in pairs], timeout=timeout)
                if len(results) != len(pairs):
                    raise RuntimeError(f"{len(results)} results for {len(pairs)} calls")
            except TimeoutError:
                message = f"the tool calls timed out after {timeout * len(pairs):g} s"
                results = [
                    ex.error_result(c, message, status="failed").with_kind("timeout")
                    for c, ex in pairs
                ]
            except Exception as exc:  # a tool failure is data for the model, never a crash
                logger.exception("tool batch failed", extra={"tool": pairs[0][0].name})
                results = [
                    ex.error_result(c, f"the tool failed: {exc}", status="failed").with_kind(
                        "exception"
                    )
                    for c, ex in pairs
                ]
            except BaseException:  # cancelled: the spans end too
                for span in spans:
                    span.end(None)
                raise
            elapsed = (time.perf_counter() - started) * 1000
            results = [bound_result(result, self._max_result_bytes) for result in results]
            for (call, executor), result, span in zip(pairs, results, spans, strict=True):
                measured = result.duration_ms if result.duration_ms is not None else elapsed
                span.end(self.observe(call, executor, result, measured))
            return {call.item_id: result for (call, _), result in zip(pairs, results, strict=True)}

    async def _run_one(
        self, call: GatewayCall, executor: ToolExecutor, semaphore: asyncio.Semaphore
    ) -> ToolResult:
        async with semaphore:
            span = self._tool_events.tracer.start(self.observe(call, executor), call.call_id)
            started = time.perf_counter()
            try:
                async with asyncio.timeout(self._call_timeout + 1.0):
                    result = await executor.run(call, timeout=self._call_timeout)
            except TimeoutError:
                result = executor.error_result(
                    call,
                    f"the tool call timed out after {self._call_timeout:g} s",
                    status="failed",
                ).with_kind("timeout")
            except Exception as exc:  # a tool failure is data for the model, never a crash
                logger.exception("tool executor failed", extra={"tool": call.name})
                result = executor.error_result(
                    call, f"the tool failed: {exc}", status="failed"
                ).with_kind("exception")
            except BaseException:  # cancelled: the span ends too
                span.end(None)
                raise
            result = bound_result(result, self._max_result_bytes)
            span.end(self.observe(call, executor, result, (time.perf_counter() - started) * 1000))
            return result

    def observe(
        self,
        call: GatewayCall,
        executor: ToolExecutor,
        result: ToolResult | None = None,
        duration_ms: float = 0.0,
    ) -> ToolCallEvent:
        """Emit ``tool_call.started`` (no ``result``), ``tool_call.completed`` or
        ``tool_call.failed``; returns the event (the call's span ends with it)."""
        common: dict[str, Any] = {
            "response_id": self._response_id,
            "round": self.round,
            "tool": tool_name(call, executor),
            "item_id": call.item_id,
        }
        if result is None:
            event = ToolCallEvent(type=STARTED, **common)
        elif result.ok:
            preview = preview_of(result.preview or result.model_output)
            event = ToolCallEvent(
                type=COMPLETED, ok=True, duration_ms=duration_ms, preview=preview, **common
            )
        else:
            event = ToolCallEvent(
                type=FAILED,
                ok=False,
                duration_ms=duration_ms,
                error_kind=result.error_kind or "error",
                message=preview_of(result.preview or result.model_output, MESSAGE_CHARS),
                **common,
            )
        self._tool_events.emit(event)
        return event
