"""Request ids and traces, wired into the app (``app.main.create_app``).

- Request ids (always): ``app.api.request_id``'s middleware, outermost.
- Traces (``[tracing] enabled``, ``app/options/tracing.py``): the request's server span is
  FastAPI's own (``POST /v1/responses``, W3C ``traceparent`` from the client honoured), given
  respgate's tracer provider (``fastapi_telemetry``); the inference rounds and the gateway's
  tool calls get their spans from ``app.telemetry.spans`` (``attach``). Off, nothing of
  OpenTelemetry is imported or called: the service calls its upstream directly and the tool
  loop's tracer is ``core.tracing.NO_TRACING``.
"""

from __future__ import annotations

import asyncio
import contextlib
from typing import TYPE_CHECKING, Any

from app import __version__
from app.api.request_id import install_request_ids
from app.core.service import ResponsesService
from app.settings import Settings

if TYPE_CHECKING:
    from app.telemetry.provider import Tracing


class Observability:
    """What ``create_app`` asks for request ids and tracing (see the module docstring)."""

    def __init__(self, settings: Settings) -> None:
        self.tracing: Tracing | None = None
        options = settings.tracing
        if options.enabled:
            from app.telemetry.provider import build_tracing

            self.tracing = build_tracing(options.service_name, options.otlp_endpoint)

    @property
    def fastapi_telemetry(self) -> Any:
        """FastAPI's ``telemetry`` option: its server spans on respgate's provider (none of its
        operation spans); ``None`` (FastAPI's defaults) when tracing is off."""
        if self.tracing is None:
            return None
        return {"tracer_provider": self.tracing.provider, "operation_spans": False}

    def attach(self, service: ResponsesService, stack: contextlib.AsyncExitStack) -> None:
        """Trace ``service``'s inference rounds and tool calls; the provider respgate made is
        shut down (what it buffered sent) when ``stack`` closes."""
        tracing = self.tracing
        if tracing is None:
            return
        from app.telemetry.spans import ToolCallTracer, TracedUpstream

        tracer = tracing.provider.get_tracer("respgate", __version__)
        service.inference = TracedUpstream(service.inference, tracer)
        service.tool_events.tracer = ToolCallTracer(tracer)
        if tracing.owned:
            stack.push_async_callback(asyncio.to_thread, tracing.provider.shutdown)

    def install(self, app: Any) -> None:
        """The request-id middleware, around everything (call it last)."""
        install_request_ids(app)
