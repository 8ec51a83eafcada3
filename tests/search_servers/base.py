"""What the local search servers share: the corpus, the modes, the request log, the pages.

``SearchServer`` answers queries from a small fixed corpus of ``Document`` items: a document
matches a query when it has one of the query's words among its keywords (ranked by how many),
after the backend's own domain filter (``site:`` operators or a domain list, as each backend
takes it). ``mode`` switches a running server to ``"error"`` (HTTP 500 in the backend's error
shape) or ``"slow"`` (the answer waits ``slow_seconds``, or until the server is released).
``active`` / ``max_active`` count the slow answers waiting at once.
``honour_domains = False`` makes it ignore domain filters, like an engine that does not
support ``site:``. Every request is logged in ``requests``. Besides the search endpoint, every
server serves ``pages`` (``/pages/<name>``) and redirects ``/redirect/<name>`` to them, for
the page fetch.
"""

from __future__ import annotations

import asyncio
import json
import re
import threading
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, Literal

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import RedirectResponse, Response
from starlette.routing import Route

Mode = Literal["ok", "error", "slow"]
Handler = Callable[[Request], Awaitable[Response]]

_WORD = re.compile(r"[a-z0-9]+")
_SITE = re.compile(r"site:([^\s()]+)", re.IGNORECASE)
_OPERATORS = frozenset({"or", "and", "not"})


@dataclass(frozen=True)
class Document:
    title: str
    url: str
    content: str
    published: str | None = None
    keywords: frozenset[str] = frozenset()

    def words(self) -> frozenset[str]:
        if self.keywords:
            return self.keywords
        return frozenset(_WORD.findall(f"{self.title} {self.content}".lower()))

    @property
    def host(self) -> str:
        return self.url.split("://", 1)[-1].split("/", 1)[0].split(":", 1)[0].lower()


def doc(
    title: str, url: str, content: str, *keywords: str, published: str | None = None
) -> Document:
    return Document(title, url, content, published, frozenset(keywords))


CORPUS: tuple[Document, ...] = (
    doc(
        "Potato - Wikipedia",
        "https://en.wikipedia.org/wiki/Potato",
        "The potato is a starchy tuberous vegetable native to the Americas.",
        "potato",
        "potatoes",
    ),
    doc(
        "Potato Nutrition Facts | Potato Goodness",
        "https://potatogoodness.com/nutrition/",
        "A medium potato has 110 calories and more potassium than a banana.",
        "potato",
        "nutrition",
        published="2025-03-01",
    ),
    doc(
        "Potato Facts",
        "https://www.idahopotatomuseum.com/potato-facts/",
        "Potatoes were the first vegetable grown in space.",
        "potato",
        "facts",
    ),
    doc(
        "Tomatoes: Nutrition Facts and Health Benefits",
        "https://www.healthline.com/nutrition/tomatoes",
        "Tomatoes are the major dietary source of the antioxidant lycopene.",
        "tomato",
        "nutrition",
    ),
    doc(
        "Releases · vllm-project/vllm",
        "https://github.com/vllm-project/vllm/releases",
        "vLLM v0.26.0 brings <b>new</b> models & faster kernels.",
        "vllm",
        "release",
        "releases",
        published="2026-10-01T12:00:00",
    ),
    doc(
        "Release Notes - vLLM Ascend",
        "https://docs.vllm.ai/projects/ascend/en/latest/user_guide/release_notes.html",
        "Release notes of the vLLM Ascend plugin.",
        "vllm",
        "release",
    ),
    doc(
        "Tokyo Weather Forecast | AccuWeather",
        "https://www.accuweather.com/en/jp/tokyo/226396/weather-forecast/226396",
        "Tokyo today: clear, 22 °C.",
        "tokyo",
        "weather",
    ),
)


@dataclass
class Received:
    method: str
    path: str
    params: dict[str, str]
    headers: dict[str, str]
    body: Any


@dataclass
class SearchServer:
    """One backend's server (see the module docstring); ``base_url`` once it serves."""

    provider: str
    documents: tuple[Document, ...] = CORPUS
    api_key: str | None = "test-key"
    page_size: int = 20
    mode: Mode = "ok"
    slow_seconds: float = 10.0
    honour_domains: bool = True
    base_url: str = ""
    requests: list[Received] = field(default_factory=list)
    pages: dict[str, tuple[str, str]] = field(default_factory=dict)
    # Slow answers waiting now, and the most that ever waited at once.
    active: int = 0
    max_active: int = 0
    _released: threading.Event = field(default_factory=threading.Event)

    def lookup(self, query: str, domains: list[str] | None = None) -> list[Document]:
        """The documents that answer ``query`` (its ``site:`` operators and ``domains`` filter
        them when ``honour_domains``), best first."""
        sites = [s.lower().strip(".") for s in _SITE.findall(query)]
        words = [w for w in _WORD.findall(_SITE.sub(" ", query).lower()) if w not in _OPERATORS]
        allowed = [*sites, *(domains or [])] if self.honour_domains else []
        scored: list[tuple[int, int, Document]] = []
        for position, document in enumerate(self.documents):
            score = len(set(words) & document.words())
            if not score:
                continue
            if allowed and not any(
                document.host == d or document.host.endswith("." + d) for d in allowed
            ):
                continue
            scored.append((-score, position, document))
        return [document for _, _, document in sorted(scored, key=lambda s: s[:2])]

    async def log(self, request: Request) -> Received:
        raw = await request.body()
        body: Any = None
        if raw:
            try:
                body = json.loads(raw)
            except ValueError:
                body = raw.decode(errors="replace")
        received = Received(
            method=request.method,
            path=request.url.path,
            params=dict(request.query_params),
            headers={k.lower(): v for k, v in request.headers.items()},
            body=body,
        )
        self.requests.append(received)
        return received

    async def misbehave(self, error: Callable[[], Response]) -> Response | None:
        """The answer of the error mode, or None after the slow mode's wait (or at once)."""
        if self.mode == "error":
            return error()
        if self.mode == "slow":
            released = self._released
            self.active += 1
            self.max_active = max(self.max_active, self.active)
            try:
                waited = 0.0
                while waited < self.slow_seconds and not released.is_set():
                    await asyncio.sleep(0.02)
                    waited += 0.02
            finally:
                if released is self._released:  # not counted any more after a reset
                    self.active -= 1
        return None

    def release(self) -> None:
        """End every slow answer now (the server is shutting down, or is reset)."""
        self._released.set()

    def reset(self, documents: tuple[Document, ...] = CORPUS) -> None:
        """Back to a fresh server's state (slow answers still waiting end now)."""
        self.release()
        self._released = threading.Event()
        self.requests.clear()
        self.pages.clear()
        self.mode = "ok"
        self.slow_seconds = 10.0
        self.honour_domains = True
        self.documents = documents
        self.active = self.max_active = 0

    def app(self, routes: list[Route]) -> Starlette:
        async def page(request: Request) -> Response:
            await self.log(request)
            name = request.path_params["name"]
            if name not in self.pages:
                return Response("not found", status_code=404)
            content_type, text = self.pages[name]
            return Response(text, media_type=content_type)

        async def redirect(request: Request) -> Response:
            await self.log(request)
            return RedirectResponse(f"/pages/{request.path_params['name']}", status_code=302)

        return Starlette(
            routes=[
                *routes,
                Route("/pages/{name}", page),
                Route("/redirect/{name}", redirect),
            ]
        )
