"""``[tracing]``: OpenTelemetry traces of requests, inference rounds and tool calls.

Off by default (no span is made, nothing is imported). On: spans with the GenAI semantic
conventions (``app.telemetry``) go to an OTLP/HTTP collector: ``otlp_endpoint``, else the
standard ``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`` / ``OTEL_EXPORTER_OTLP_ENDPOINT`` (default
``http://localhost:4318``); the other ``OTEL_*`` variables (``OTEL_TRACES_SAMPLER``,
``OTEL_RESOURCE_ATTRIBUTES``, ``OTEL_EXPORTER_OTLP_HEADERS`` …) apply as the SDK reads them.
Needs the ``otel`` extra (``pip install 'respgate[otel]'``).
"""

from __future__ import annotations

from urllib.parse import urlsplit

from pydantic import BaseModel, ConfigDict, field_validator

from app.options.urls import check_http_url


class TracingSettings(BaseModel):
    """``[tracing]`` (``RESPGATE_TRACING__<KEY>``)."""

    model_config = ConfigDict(extra="forbid")

    enabled: bool = False
    # The collector's OTLP/HTTP traces URL (http://collector:4318/v1/traces; a URL without a
    # path gets /v1/traces). None: the OTEL_EXPORTER_OTLP_* variables, else localhost:4318.
    otlp_endpoint: str | None = None
    # The service.name of the spans. None: OTEL_SERVICE_NAME, else "respgate".
    service_name: str | None = None

    @field_validator("otlp_endpoint")
    @classmethod
    def _http_url(cls, value: str | None) -> str | None:
        if value is None:
            return None
        check_http_url(value)
        return value if urlsplit(value).path.strip("/") else f"{value.rstrip('/')}/v1/traces"
