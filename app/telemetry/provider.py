"""The tracer provider of ``[tracing]``: OTLP over HTTP, batched.

When the host already configured an SDK tracer provider as the global one (for example
``opentelemetry-instrument``), respgate's spans go there and respgate adds no exporter of its
own. Otherwise it makes its own provider (``service.name``: the setting, else
``OTEL_SERVICE_NAME``, else ``respgate``; the sampler from ``OTEL_TRACES_SAMPLER``) exporting to
``endpoint``, or where the ``OTEL_EXPORTER_OTLP_*`` variables say (default localhost:4318). It
does not become the global provider: other libraries' spans are the host's business.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from opentelemetry import trace
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import SpanProcessor, TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor

DEFAULT_SERVICE_NAME = "respgate"


def span_processor(endpoint: str | None) -> SpanProcessor:
    """Where finished spans go: batched to the OTLP/HTTP collector at ``endpoint`` (None: the
    ``OTEL_EXPORTER_OTLP_*`` variables). Tests replace it with an in-memory exporter."""
    return BatchSpanProcessor(OTLPSpanExporter(endpoint=endpoint))


@dataclass(frozen=True, slots=True)
class Tracing:
    """The provider respgate's spans go to; ``owned``: respgate made it (and shuts it down,
    flushing what is buffered, when the app stops)."""

    provider: TracerProvider
    owned: bool


def build_tracing(service_name: str | None, endpoint: str | None) -> Tracing:
    current = trace.get_tracer_provider()
    if isinstance(current, TracerProvider):
        return Tracing(current, owned=False)
    name = service_name or os.environ.get("OTEL_SERVICE_NAME") or DEFAULT_SERVICE_NAME
    provider = TracerProvider(resource=Resource.create({"service.name": name}))
    provider.add_span_processor(span_processor(endpoint))
    return Tracing(provider, owned=True)
