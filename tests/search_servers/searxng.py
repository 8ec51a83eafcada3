"""A SearXNG instance's JSON API (https://docs.searxng.org/dev/search_api.html).

``GET /search?q=…&format=json``: ``format`` other than ``json`` is refused with 403 (an
instance whose settings do not enable it does that), an empty ``q`` with 400. There is no
count parameter: a page holds ``page_size`` results. Domain filtering only through ``site:``
operators in ``q``. With an ``api_key`` (an instance behind an authenticating proxy) the
request needs ``Authorization: Bearer <key>``.
"""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse, Response
from starlette.routing import Route

from tests.search_servers.base import SearchServer


def routes(server: SearchServer) -> list[Route]:
    async def search(request: Request) -> Response:
        received = await server.log(request)
        if server.api_key and received.headers.get("authorization") != f"Bearer {server.api_key}":
            return PlainTextResponse("Unauthorized", status_code=401)
        if received.params.get("format") != "json":
            return PlainTextResponse("Forbidden", status_code=403)
        query = received.params.get("q", "")
        if not query.strip():
            return PlainTextResponse("Bad Request", status_code=400)
        failed = await server.misbehave(
            lambda: PlainTextResponse("Internal Server Error", status_code=500)
        )
        if failed is not None:
            return failed
        documents = server.lookup(query)[: server.page_size]
        results = [
            {
                "url": d.url,
                "title": d.title,
                "content": d.content,
                "engine": "local",
                "engines": ["local"],
                "positions": [n],
                "score": 1.0 / n,
                "category": "general",
                **({"publishedDate": d.published} if d.published else {}),
            }
            for n, d in enumerate(documents, start=1)
        ]
        return JSONResponse(
            {
                "query": query,
                "number_of_results": len(results),
                "results": results,
                "answers": [],
                "corrections": [],
                "infoboxes": [],
                "suggestions": [],
                "unresponsive_engines": [],
            }
        )

    return [Route("/search", search, methods=["GET", "POST"])]
