"""OpenTelemetry adapters (the ``otel`` extra): the tracer provider of ``[tracing]``
(``provider``), and the spans of inference rounds and tool calls with the GenAI semantic
conventions (``spans``). Imported only when tracing is on (``app.observability``)."""
