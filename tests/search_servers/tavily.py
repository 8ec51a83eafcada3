"""Tavily's Search API (https://docs.tavily.com/documentation/api-reference/endpoint/search).

``POST /search`` with a JSON body: ``query`` (required), ``max_results`` (0 to 20, default 5),
``search_depth``, ``include_domains``. The key as ``Authorization: Bearer <key>`` or, as older
clients send it, ``api_key`` in the body; a wrong key in either place is a 401
``{"detail": {"error": …}}``.
"""

from __future__ import annotations

from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from tests.search_servers.base import SearchServer


def _error(message: str, status: int) -> Response:
    return JSONResponse({"detail": {"error": message}}, status_code=status)


def _authorized(server: SearchServer, headers: dict[str, str], body: dict[str, Any]) -> bool:
    header = headers.get("authorization")
    in_body = body.get("api_key")
    if header is None and in_body is None:
        return False
    if header is not None and header != f"Bearer {server.api_key}":
        return False
    return in_body is None or in_body == server.api_key


def routes(server: SearchServer) -> list[Route]:
    async def search(request: Request) -> Response:
        received = await server.log(request)
        body = received.body if isinstance(received.body, dict) else {}
        if not _authorized(server, received.headers, body):
            return _error("Unauthorized: missing or invalid API key.", 401)
        query = body.get("query")
        if not isinstance(query, str) or not query.strip():
            return _error("Query is missing.", 400)
        count = body.get("max_results", 5)
        if not isinstance(count, int) or not 0 <= count <= 20:
            return _error("max_results must be between 0 and 20.", 400)
        if body.get("search_depth", "basic") not in ("basic", "advanced"):
            return _error("Invalid search depth.", 400)
        failed = await server.misbehave(lambda: _error("Internal server error", 500))
        if failed is not None:
            return failed
        domains = body.get("include_domains") or []
        documents = server.lookup(query, domains)[:count]
        results = [
            {
                "title": d.title,
                "url": d.url,
                "content": d.content,
                "score": round(1.0 / n, 4),
                "raw_content": None,
                **({"published_date": d.published} if d.published else {}),
            }
            for n, d in enumerate(documents, start=1)
        ]
        return JSONResponse(
            {
                "query": query,
                "follow_up_questions": None,
                "answer": None,
                "images": [],
                "results": results,
                "response_time": 0.01,
                "request_id": "req-local",
            }
        )

    return [Route("/search", search, methods=["POST"])]
