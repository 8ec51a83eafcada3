"""Tool engines (``core.engines.ToolEngine``): ``rest`` (operator-configured HTTP tools), ``lm``
(a model simulates results), ``multi`` (routes calls by namespace), their tool sets, the
engine registry, and ``sessions.SessionBook``, the in-memory session bookkeeping they share."""
