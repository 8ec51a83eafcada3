"""The ``web_search`` tool kind: web search run by the gateway.

The tool (the ``core.tools`` / ``tools.toolkit`` side):
- ``provider``: ``WebSearchToolProvider``, a request's web search tools as one function tool,
  and the lowering of ``web_search_call`` history items;
- ``executor``: ``WebSearchExecutor``, one call (its searches, the results the model reads);
- ``arguments``: a call's queries;
- ``citations``: ``url_citation`` annotations of an answer that cites the results.

The search backends, on aiohttp (``app.net.http``):
- ``results``: ``SearchResult``, ``SearchError``, the ``SearchProvider`` protocol, ``SearchLimits``;
- ``backend``: ``HttpSearchProvider``, what every HTTP backend shares;
- ``searxng``, ``tavily``, ``brave``, ``you``: one module per backend;
- ``backends``: the backends by name (``create_search_provider``);
- ``domains``: the domain filter and location hints;
- ``pages``: the page fetch (egress-checked on every hop) and HTML to text.
"""
