"""The Brave Search API's web search
(https://api-dashboard.search.brave.com/api-reference/web/search/get).

``GET /res/v1/web/search`` with ``q`` (1 to 400 characters), ``count`` (1 to 20, default 20)
and ``country``; the key in ``X-Subscription-Token``. Errors come as
``{"type": "ErrorResponse", "error": {"code", "detail", "status"}}``; a missing or wrong token
is a 422 ``SUBSCRIPTION_TOKEN_INVALID``, as Brave answers it. Descriptions mark the query's
words with ``<strong>``. Domain filtering only through ``site:`` operators in ``q``.
"""

from __future__ import annotations

import re

from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from tests.search_servers.base import SearchServer


def _error(code: str, detail: str, status: int) -> Response:
    return JSONResponse(
        {
            "type": "ErrorResponse",
            "error": {"id": "local", "status": status, "code": code, "detail": detail},
            "time": 0,
        },
        status_code=status,
    )


def _mark(text: str, query: str) -> str:
    for word in set(re.findall(r"[A-Za-z0-9]{3,}", query)):
        text = re.sub(rf"\b({re.escape(word)})\b", r"<strong>\1</strong>", text, flags=re.I)
    return text


def routes(server: SearchServer) -> list[Route]:
    async def search(request: Request) -> Response:
        received = await server.log(request)
        if received.headers.get("x-subscription-token") != server.api_key:
            return _error(
                "SUBSCRIPTION_TOKEN_INVALID", "The provided subscription token is invalid.", 422
            )
        query = received.params.get("q", "")
        if not query.strip() or len(query) > 400:
            return _error("VALIDATION", "Unable to validate request parameter(s)", 422)
        try:
            count = int(received.params.get("count", "20"))
        except ValueError:
            count = 0
        if not 1 <= count <= 20:
            return _error("VALIDATION", "Unable to validate request parameter(s)", 422)
        failed = await server.misbehave(
            lambda: _error("INTERNAL_ERROR", "An internal error occurred.", 500)
        )
        if failed is not None:
            return failed
        documents = server.lookup(query)[:count]
        results = [
            {
                "type": "search_result",
                "title": d.title,
                "url": d.url,
                "description": _mark(d.content, query),
                "extra_snippets": [f"More about {d.title}."],
                "language": "en",
                "profile": {"name": d.host, "url": d.url},
                **({"page_age": d.published} if d.published else {}),
            }
            for d in documents
        ]
        return JSONResponse(
            {
                "type": "search",
                "query": {"original": query, "more_results_available": False},
                "web": {"type": "search", "results": results, "family_friendly": True},
            }
        )

    return [Route("/res/v1/web/search", search, methods=["GET"])]
