"""The ``rest`` tool engine: operator-configured tools called over HTTP (``engine.RestEngine``),
their bindings (``binding.RestBinding``) and the aiohttp client (``client.RestClient``); tools
can be generated from an OpenAPI 3 document (``openapi``)."""

from app.tools.engines.rest.binding import RestBinding
from app.tools.engines.rest.engine import RestEngine, RestEngineOptions, create_rest_engine

__all__ = ["RestBinding", "RestEngine", "RestEngineOptions", "create_rest_engine"]
