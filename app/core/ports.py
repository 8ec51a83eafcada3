"""Interfaces the core depends on; adapters in upstream/, tools/, store/ implement them."""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

JsonObject = dict[str, Any]


@dataclass(frozen=True, slots=True)
class RawReply:
    """An upstream answer passed to the client as it came (``GET /v1/models``)."""

    status_code: int
    content_type: str
    body: bytes


class UpstreamEventStream(Protocol):
    """Parsed upstream stream events; ``aclose`` releases the connection (and cancels upstream)."""

    def __aiter__(self) -> AsyncIterator[JsonObject]: ...

    async def aclose(self) -> None: ...


class Upstream(Protocol):
    """An inference server that answers Responses API requests.

    ``headers`` carries the client's credentials when it sent some. Errors are raised as
    ``app.errors.UpstreamError`` subclasses before any event is yielded; a failure after that
    surfaces from the iterator as the same exceptions.
    """

    async def create_response(self, body: JsonObject, headers: Mapping[str, str]) -> JsonObject:
        """Non-streaming ``POST /v1/responses``: the upstream's Response object."""
        ...

    async def stream_response(
        self, body: JsonObject, headers: Mapping[str, str]
    ) -> UpstreamEventStream:
        """Streaming ``POST /v1/responses``; returns once the upstream accepted the request."""
        ...

    async def list_models(self, headers: Mapping[str, str]) -> RawReply: ...

    async def check_ready(self) -> bool:
        """Whether the upstream answers its health endpoint."""
        ...

    async def aclose(self) -> None: ...
