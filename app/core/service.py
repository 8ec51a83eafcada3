"""ResponsesService: create a response, as one JSON object or as one event stream."""

from __future__ import annotations

import copy
import logging
import time
from collections.abc import AsyncIterator, Callable, Mapping
from typing import Any

from app.core.accumulator import ResponseAccumulator
from app.core.ids import new_id
from app.core.ports import Upstream, UpstreamEventStream
from app.core.response import build_response, normalize_item, normalize_usage
from app.core.stream import ResponseLifecycle
from app.errors import GatewayError, UpstreamProtocolError

logger = logging.getLogger(__name__)

JsonObject = dict[str, Any]

_FINAL_STATUSES = frozenset({"completed", "incomplete", "failed", "cancelled"})


class ResponsesService:
    """The domain entry point the API layer calls; owns the lifecycle of every response."""

    def __init__(self, upstream: Upstream, *, clock: Callable[[], float] = time.time) -> None:
        self.upstream = upstream
        self._clock = clock

    def _upstream_body(self, body: JsonObject) -> JsonObject:
        """What is sent upstream for a client request (history and tools join here later)."""
        return body

    async def create(self, body: JsonObject, headers: Mapping[str, str]) -> JsonObject:
        """Non-streaming create: the final Response object."""
        response_id = new_id("resp")
        created_at = int(self._clock())
        data = await self.upstream.create_response(self._upstream_body(body), headers)
        raw_output = data.get("output")
        output = [
            normalize_item(copy.deepcopy(item))
            for item in (raw_output if isinstance(raw_output, list) else [])
            if isinstance(item, dict)
        ]
        status = data.get("status")
        status = status if status in _FINAL_STATUSES else "completed"
        error = data.get("error")
        details = data.get("incomplete_details")
        return build_response(
            request=body,
            response_id=response_id,
            created_at=created_at,
            status=status,
            output=output,
            upstream=data,
            usage=normalize_usage(data.get("usage")),
            error=error if isinstance(error, dict) else None,
            incomplete_details=details if isinstance(details, dict) else None,
            completed_at=self._completed_at(status),
        )

    async def open_stream(
        self, body: JsonObject, headers: Mapping[str, str]
    ) -> AsyncIterator[JsonObject]:
        """Start a streaming create.

        Raises before returning when the upstream cannot start (so the client gets an HTTP
        error); afterwards every failure becomes an ``error`` event and ``response.failed``.
        """
        response_id = new_id("resp")
        created_at = int(self._clock())
        upstream_events = await self.upstream.stream_response(self._upstream_body(body), headers)
        return self._stream(body, upstream_events, response_id, created_at)

    async def _stream(
        self,
        body: JsonObject,
        upstream_events: UpstreamEventStream,
        response_id: str,
        created_at: int,
    ) -> AsyncIterator[JsonObject]:
        lifecycle = ResponseLifecycle()
        accumulator = ResponseAccumulator()

        def snapshot(status: str, **fields: Any) -> JsonObject:
            return build_response(
                request=body,
                response_id=response_id,
                created_at=created_at,
                status=status,
                output=accumulator.output,
                upstream=accumulator.upstream_response,
                **fields,
            )

        try:
            for event in lifecycle.opening(snapshot("in_progress", usage=None)):
                yield event
            failure: JsonObject | None = None
            try:
                async for upstream_event in upstream_events:
                    for event in accumulator.feed(upstream_event):
                        yield lifecycle.stamp(event)
                    if accumulator.finished:
                        break
                if not accumulator.finished:
                    raise UpstreamProtocolError(
                        "the upstream stream ended before the response was complete"
                    )
            except GatewayError as exc:
                failure = {"code": exc.code or exc.type, "message": exc.message}
            except Exception as exc:  # a bug must not cut the stream silently
                logger.exception("stream failed", extra={"response_id": response_id})
                failure = {"code": "server_error", "message": f"internal error: {exc!r}"}
            if failure is None and accumulator.status == "failed":
                failure = accumulator.error or {
                    "code": "upstream_error",
                    "message": "the upstream reported a failed response",
                }
            if failure is not None:
                for event in accumulator.finish("incomplete"):
                    yield lifecycle.stamp(event)
                final = snapshot("failed", usage=accumulator.usage, error=failure)
                for event in lifecycle.failure(failure, final):
                    yield event
                return
            status = accumulator.status or "completed"
            final = snapshot(
                status,
                usage=accumulator.usage,
                incomplete_details=accumulator.incomplete_details,
                completed_at=self._completed_at(status),
            )
            yield lifecycle.closing(final)
        finally:
            await upstream_events.aclose()

    def _completed_at(self, status: str) -> int | None:
        return int(self._clock()) if status in ("completed", "incomplete") else None
