"""ResponsesService: create, retrieve and delete responses; owns persistence.

A create rehydrates the history (``core.history``), calls the upstream, and stores the final
response once, in one transaction, before the client sees it complete: the object returned by
``GET /v1/responses/{id}`` is the one the client received. Everything is its tenant's
(``core.tenancy``): a create reads and stores as ``ParsedRequest.tenant``, the other calls take
the caller's ``tenant``; another tenant's response is not found, as an unknown id is.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Callable, Mapping
from typing import Any, NamedTuple

from app.core.accumulator import ResponseAccumulator
from app.core.checkpoint import Checkpoints
from app.core.compact import Compactor, UpstreamView, compaction_prelude
from app.core.compaction import CompactionCodec, has_compaction
from app.core.context_window import ContextWindow, RoundWindow, fit_history
from app.core.deadline import timed_out_stream, within
from app.core.failures import log_stream_failure, stream_failure
from app.core.history import History, rehydrate
from app.core.ids import new_id
from app.core.limits import LoopLimits, check_request_limits
from app.core.loop import LoopRequest, ToolLoop
from app.core.observe import ToolEvents
from app.core.paging import page_or_raise
from app.core.ports import (
    NewResponse,
    Page,
    ResponseStore,
    TokenCount,
    TokenCounter,
    Upstream,
)
from app.core.response import (
    ResponseOutcome,
    build_response,
    normalize_item,
    normalize_usage,
    without_secrets,
)
from app.core.single_round import SingleRound
from app.core.store_errors import ConversationNotFoundError
from app.core.stream import ResponseLifecycle
from app.core.tool_choice import check_tool_choice
from app.core.tools import ToolContext, ToolKit
from app.errors import NotFoundError, ResponseNotStoredError, StorageUnavailableError
from app.protocol.json_types import JsonObject
from app.protocol.requests import SIMULATE_FIELD, ParsedRequest

_FINAL_STATUSES = frozenset({"completed", "incomplete", "failed", "cancelled"})
_STORED_STATUSES = frozenset({"completed", "incomplete"})
# Fields the gateway answers itself, never forwarded (``background``: core.background runs it).
_STATE_FIELDS = ("previous_response_id", "conversation", SIMULATE_FIELD, "background")
_STATE_FIELDS_SET = frozenset((SIMULATE_FIELD, "background"))
# Fields the tool loop answers itself instead of forwarding.
_LOOP_FIELDS = (*_STATE_FIELDS, "tools", "tool_choice", "max_tool_calls", "input", "stream")


class _StreamIds(NamedTuple):
    response_id: str
    created_at: int
    request_id: str | None  # the client's ``x-request-id``, for the log


class ResponsesService:
    """The domain entry point the API layer calls; owns the lifecycle of every response."""

    def __init__(
        self,
        upstream: Upstream,
        store: ResponseStore,
        *,
        toolkit: ToolKit | None = None,
        limits: LoopLimits | None = None,
        tool_events: ToolEvents | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.upstream = upstream
        # What the responses' inference rounds go through: the upstream, or a wrapper that
        # traces them (app.telemetry); the other calls (tokens, compaction) use ``upstream``.
        self.inference: Upstream = upstream
        self.store = store
        self.toolkit = toolkit
        self.limits = limits or LoopLimits()
        self.tool_events = tool_events or ToolEvents()
        self._clock = clock
        # Compacts, and lowers compaction items; the app gives it its lasting key (until then,
        # compaction items last as long as the process).
        self.compactor = Compactor(upstream, store, CompactionCodec.ephemeral(), clock=clock)
        self.context = ContextWindow(upstream if isinstance(upstream, TokenCounter) else None)

    # ------------------------------------------------------------------ create

    async def _prepare(
        self, request: ParsedRequest, headers: Mapping[str, str]
    ) -> tuple[History, JsonObject, UpstreamView]:
        """Check, rehydrate, fit the context window (``truncation``); the upstream body is the
        client's own unless history joins it, truncation cuts it or compaction
        (``core.compact``) changes what the upstream sees. Returns the history (what is
        stored), the upstream body and what the upstream sees."""
        body = request.body
        check_request_limits(body, self.limits)
        check_tool_choice(request.params)
        history = await rehydrate(self.store, request.params, tenant=request.tenant)
        compacted = has_compaction(history.input_items)
        if compacted:
            self.compactor.lowering(request.params.model).check(history.input_items, "input")
        seen = history
        if self.context.checks(request.params.model, request.params.truncation):
            seen = await fit_history(self.context, request, history, headers)
        view = await self.compactor.view(body, seen, headers)
        referenced = len(history.new_input_items) != len(history.input_items)
        plain = seen is history and not history.stateful and not referenced and not compacted
        if plain and not _STATE_FIELDS_SET.intersection(body) and "context_management" not in body:
            return history, body, view
        upstream_body = {
            k: v for k, v in self.compactor.forwarded(body).items() if k not in _STATE_FIELDS
        }
        upstream_body["input"] = [*view.history, *view.input]
        return history, upstream_body, view

    async def input_tokens(self, request: ParsedRequest, headers: Mapping[str, str]) -> TokenCount:
        """``POST /v1/responses/input_tokens``: the rehydrated request's input tokens."""
        history = await rehydrate(self.store, request.params, tenant=request.tenant)
        body = {k: v for k, v in request.body.items() if k not in _STATE_FIELDS}
        return await self.context.count(
            body, history.upstream_input(), headers, truncation=request.params.truncation
        )

    async def _tool_loop(
        self,
        request: ParsedRequest,
        history: History,
        view: UpstreamView,
        headers: Mapping[str, str],
        response_id: str,
        *,
        stream: bool,
    ) -> ToolLoop | None:
        """The tool loop for a request that involves gateway tools or items, else ``None``."""
        toolkit = self.toolkit
        if toolkit is None:
            return None
        body = request.body
        items = [*history.history_items, *history.input_items]
        if not toolkit.involves_gateway(body, items):
            return None
        deadline = self.limits.deadline(background=request.params.background is True)
        context = ToolContext(
            session_id=history.session_id or response_id,
            response_id=response_id,
            simulate=body.get(SIMULATE_FIELD) is True,
            tenant=request.tenant,
        )
        prepared = await toolkit.prepare(body, view.history, view.input, context)
        prepared.prelude[:0] = [compaction_prelude(item) for item in view.output]
        forwarded = self.compactor.forwarded(body)
        upstream_body = {k: v for k, v in forwarded.items() if k not in _LOOP_FIELDS}
        include: list[Any] | None = request.params.include
        if prepared.upstream_include is not None:
            include = prepared.upstream_include
        if include is not None:
            # What the gateway's own items include (the toolkit's ``include_values``) is the
            # gateway's business: an upstream would reject the values it does not know.
            answered = toolkit.include_values
            kept = [i for i in include if str(i) not in answered]
            if kept:
                upstream_body["include"] = kept
            else:
                upstream_body.pop("include", None)
        if prepared.upstream_tools:
            upstream_body["tools"] = prepared.upstream_tools
            if prepared.tool_choice is not None:
                upstream_body["tool_choice"] = prepared.tool_choice
        params = request.params
        loop_request = LoopRequest(
            upstream_body=upstream_body,
            headers=headers,
            stream=stream,
            response_id=response_id,
            max_tool_calls=params.max_tool_calls,
            fit_round=RoundWindow(
                self.context,
                headers,
                truncation=params.truncation,
                max_output_tokens=params.max_output_tokens,
            )
            if self.context.checks(params.model, params.truncation)
            else None,
            deadline=deadline,
        )
        return ToolLoop(
            upstream=self.inference,
            request=loop_request,
            prepared=prepared,
            limits=self.limits,
            tool_events=self.tool_events,
        )

    async def create(self, request: ParsedRequest, headers: Mapping[str, str]) -> JsonObject:
        """Non-streaming create: the final Response object (stored unless ``store`` is false)."""
        response_id = new_id("resp")
        created_at = int(self._clock())
        history, upstream_body, view = await self._prepare(request, headers)
        loop = await self._tool_loop(request, history, view, headers, response_id, stream=False)
        if loop is not None:
            return await self._create_looped(request, history, loop, response_id, created_at)
        deadline = self.limits.deadline(background=request.params.background is True)
        answer = self.inference.create_response(upstream_body, headers)
        data = await within(deadline, answer, lambda cut: cut.timed_out_response())
        raw_output = data.get("output")
        output = [
            normalize_item(item, fresh_id=True)
            for item in (raw_output if isinstance(raw_output, list) else [])
            if isinstance(item, dict)
        ]
        status = data.get("status")
        status = status if status in _FINAL_STATUSES else "completed"
        error = data.get("error")
        details = data.get("incomplete_details")
        outcome = ResponseOutcome(
            status=status,
            output=[*view.output, *output],
            upstream=data,
            usage=normalize_usage(data.get("usage")),
            error=error if isinstance(error, dict) else None,
            incomplete_details=details if isinstance(details, dict) else None,
            completed_at=self._completed_at(status),
        )
        response = build_response(self._echoed(request.body), response_id, created_at, outcome)
        await self._persist(request, history, response)
        return response

    async def _create_looped(
        self,
        request: ParsedRequest,
        history: History,
        loop: ToolLoop,
        response_id: str,
        created_at: int,
    ) -> JsonObject:
        try:
            await loop.open()
            async for _ in loop.events():
                pass
        finally:
            await loop.aclose()
        status = loop.status or "completed"
        outcome = ResponseOutcome(
            status=status,
            output=loop.output,
            upstream=loop.upstream_response,
            usage=loop.usage,
            error=loop.error if status == "failed" else None,
            incomplete_details=loop.incomplete_details,
            completed_at=self._completed_at(status),
        )
        response = build_response(self._echoed(request.body), response_id, created_at, outcome)
        await self._persist(request, history, response)
        return response

    async def open_stream(
        self,
        request: ParsedRequest,
        headers: Mapping[str, str],
        *,
        response_id: str | None = None,
        created_at: int | None = None,
        checkpoints: Checkpoints | None = None,
    ) -> AsyncIterator[JsonObject]:
        """Start a streaming create.

        Raises before returning when the request is invalid or the upstream cannot start (so
        the client gets an HTTP error); afterwards every failure becomes an ``error`` event and
        ``response.failed``. ``response_id`` and ``created_at``: those a background response
        was given when it was queued (``core.background``), and its tool loop's checkpoints
        (``core.checkpoint``: where to continue from, who records each new one).
        """
        response_id = response_id or new_id("resp")
        created_at = int(self._clock()) if created_at is None else created_at
        ids = _StreamIds(response_id, created_at, headers.get("x-request-id"))
        history, upstream_body, view = await self._prepare(request, headers)
        loop = await self._tool_loop(request, history, view, headers, response_id, stream=True)
        if loop is not None:
            if checkpoints is not None:
                loop.use_checkpoints(checkpoints)
            try:
                await loop.open()
            except BaseException:
                await loop.aclose()
                raise
            return self._stream(request, history, loop, loop, ids)
        deadline = self.limits.deadline(background=request.params.background is True)
        opening = self.inference.stream_response(upstream_body, headers)
        upstream_events = await within(deadline, opening, timed_out_stream)
        prelude = [compaction_prelude(i) for i in view.output]
        single = SingleRound(upstream_events, prelude, deadline)
        return self._stream(request, history, single, single.accumulator, ids)

    async def _stream(
        self,
        request: ParsedRequest,
        history: History,
        source: SingleRound | ToolLoop,
        state: ResponseAccumulator | ToolLoop,
        ids: _StreamIds,
    ) -> AsyncIterator[JsonObject]:
        """One client lifecycle around ``source``'s events; ``state`` holds the response's
        output, status and usage as they grow."""
        response_id, created_at, request_id = ids
        lifecycle = ResponseLifecycle()
        echoed = self._echoed(request.body)

        def snapshot(status: str, **fields: Any) -> JsonObject:
            output = state.output
            if isinstance(source, SingleRound) and source.shown:
                output = [*source.shown, *output]
            outcome = ResponseOutcome(
                status=status, output=output, upstream=state.upstream_response, **fields
            )
            return build_response(echoed, response_id, created_at, outcome)

        try:
            opening = snapshot("in_progress")
            opening["usage"] = None  # as OpenAI's: no usage until the response is done
            for event in lifecycle.opening(opening):
                yield event
            failure: JsonObject | None = None
            final: JsonObject | None = None
            try:
                async for produced in source.events():
                    yield lifecycle.stamp(produced)
                if state.status == "failed":
                    failure = state.error or {
                        "code": "upstream_error",
                        "message": "the upstream reported a failed response",
                    }
                    log_stream_failure(response_id, failure, request_id)
                else:
                    status = state.status or "completed"
                    final = snapshot(
                        status,
                        usage=state.usage,
                        incomplete_details=state.incomplete_details,
                        completed_at=self._completed_at(status),
                    )
                    await self._persist(request, history, final)
            except Exception as exc:  # a bug must not cut the stream silently either
                failure = stream_failure(exc, response_id, request_id)
            if failure is not None:
                for closing in source.finish("incomplete"):
                    yield lifecycle.stamp(closing)
                failed = snapshot("failed", usage=state.usage, error=failure)
                for event in lifecycle.failure(failure, failed):
                    yield event
                return
            assert final is not None
            yield lifecycle.closing(final)
        finally:
            await source.aclose()

    async def _persist(
        self, request: ParsedRequest, history: History, response: JsonObject
    ) -> None:
        """Store a final response and its items in one transaction (OpenAI: ``store`` defaults
        to true; failed responses and ``store: false`` write nothing)."""
        if request.params.store is False or response["status"] not in _STORED_STATUSES:
            return
        try:
            try:
                await self._save(history, response, request.tenant)
            except StorageUnavailableError:
                # Once more: a pooled connection the database closed (a restart) fails once,
                # and the next one is fresh; the generation is worth a second write.
                await self._save(history, response, request.tenant)
        except ConversationNotFoundError:
            # The conversation was deleted while the response was being generated.
            raise NotFoundError(
                f"Conversation with id '{history.conversation_id}' not found.",
                param="conversation",
            ) from None
        except StorageUnavailableError as exc:
            # Generated, not stored: a blind retry would pay for another generation.
            raise ResponseNotStoredError() from exc

    async def _save(self, history: History, response: JsonObject, tenant: str) -> None:
        await self.store.save_response(
            NewResponse(
                response=response,
                history_ids=history.history_ids,
                input_item_ids=[str(item["id"]) for item in history.input_items],
                new_items=[*history.new_input_items, *response["output"]],
                conversation_id=history.conversation_id,
                root_id=history.root_id,
            ),
            tenant=tenant,
        )

    def echoed(self, body: JsonObject) -> JsonObject:
        """The request as its response echoes it (and a background job stores it)."""
        return self._echoed(body)

    def _echoed(self, body: JsonObject) -> JsonObject:
        """The request as its response echoes it: without the tool fields the toolkit calls
        secret (credentials that go to the tool only: never echoed, never stored)."""
        if self.toolkit is None:
            return body
        tools = body.get("tools")
        public = without_secrets(tools, self.toolkit.secret_fields)
        return body if public is tools else {**body, "tools": public}

    def _completed_at(self, status: str) -> int | None:
        return int(self._clock()) if status in ("completed", "incomplete") else None

    # ------------------------------------------------------------------ retrieve / delete

    async def get(self, response_id: str, *, tenant: str) -> JsonObject:
        stored = await self.store.get_response(response_id, tenant=tenant)
        if stored is None:
            raise _response_not_found(response_id)
        return stored.response

    async def delete(self, response_id: str, *, tenant: str) -> JsonObject:
        if not await self.store.delete_response(response_id, tenant=tenant):
            raise _response_not_found(response_id)
        return {"id": response_id, "object": "response", "deleted": True}

    async def input_items(
        self, response_id: str, *, tenant: str, after: str | None, limit: int, order: str
    ) -> Page:
        lookup = self.store.list_input_items(
            response_id, tenant=tenant, after=after, limit=limit, order=order
        )
        return await page_or_raise(lookup, after, _response_not_found(response_id))


def _response_not_found(response_id: str) -> NotFoundError:
    return NotFoundError(f"Response with id '{response_id}' not found.", param="response_id")
