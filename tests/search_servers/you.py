"""The You.com Search API (https://you.com/docs/api-reference/search/v1-search).

``GET /v1/search`` with ``query`` (required), ``count`` (1 to 100, default 10),
``include_domains`` (comma-separated) and ``country``; the key in ``X-API-Key``, a missing or
wrong one is a 401 ``{"detail": "Invalid or expired API key"}``. The answer's
``results.web[]`` carry ``url``, ``title``, ``description``, ``snippets`` and ``page_age``.
"""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from tests.search_servers.base import SearchServer


def routes(server: SearchServer) -> list[Route]:
    async def search(request: Request) -> Response:
        received = await server.log(request)
        key = received.headers.get("x-api-key")
        if not key:
            return JSONResponse({"detail": "API key is required"}, status_code=401)
        if key != server.api_key:
            return JSONResponse({"detail": "Invalid or expired API key"}, status_code=401)
        query = received.params.get("query", "")
        if not query.strip():
            return JSONResponse({"detail": "query is required"}, status_code=422)
        try:
            count = int(received.params.get("count", "10"))
        except ValueError:
            count = 0
        if not 1 <= count <= 100:
            return JSONResponse({"detail": "count must be between 1 and 100"}, status_code=422)
        failed = await server.misbehave(
            lambda: JSONResponse({"detail": "Internal server error"}, status_code=500)
        )
        if failed is not None:
            return failed
        domains = [d for d in received.params.get("include_domains", "").split(",") if d]
        documents = server.lookup(query, domains)[:count]
        web = [
            {
                "url": d.url,
                "title": d.title,
                "description": d.content,
                "snippets": [d.content, f"Another passage of {d.title}."],
                "favicon_url": f"https://{d.host}/favicon.ico",
                **({"page_age": d.published} if d.published else {}),
            }
            for d in documents
        ]
        return JSONResponse(
            {
                "results": {"web": web, "news": []},
                "metadata": {"request_uuid": "local", "query": query, "latency": 0.01},
            }
        )

    return [Route("/v1/search", search, methods=["GET"])]
