"""Local HTTP servers speaking the wire formats of the web search backends, for the tests.

One Starlette app per backend (``searxng``, ``tavily``, ``brave``, ``you``: each module's
docstring names the API reference it follows), all answering from ``base.SearchServer``'s
fixed corpus, checking the key and the parameters as the real service does, with an error
mode (HTTP 500) and a slow mode (for timeouts). ``serve_search`` runs one in a thread.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

from tests.helpers import free_port, serve_in_thread
from tests.search_servers import brave, searxng, tavily, you
from tests.search_servers.base import CORPUS, Document, Received, SearchServer, doc

ROUTES = {
    "searxng": searxng.routes,
    "tavily": tavily.routes,
    "brave": brave.routes,
    "you": you.routes,
}

__all__ = ["CORPUS", "ROUTES", "Document", "Received", "SearchServer", "doc", "serve_search"]


@contextlib.contextmanager
def serve_search(provider: str, **options: Any) -> Iterator[SearchServer]:
    """A running server for ``provider`` (``SearchServer`` options as keywords); searxng has no
    key unless given one."""
    if provider == "searxng":
        options.setdefault("api_key", None)
    server = SearchServer(provider, **options)
    port = free_port()
    server.base_url = f"http://127.0.0.1:{port}"
    with serve_in_thread(server.app(ROUTES[provider](server)), port=port):
        try:
            yield server
        finally:
            server.release()  # slow answers end now, so the server can stop
