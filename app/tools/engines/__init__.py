"""Tool engines (``core.engines.ToolEngine``): ``rest`` (operator-configured HTTP tools), ``lm``
(a model simulates results), ``multi`` (routes calls by namespace), their tool sets and the
engine registry. Their sessions live in ``core.session_book.SessionBook``."""
