"""Hand-written fakes of the core ports."""

from __future__ import annotations

import copy
from collections.abc import AsyncIterator, Mapping
from typing import Any

from app.core.ports import RawReply

JsonObject = dict[str, Any]


class ListEventStream:
    def __init__(self, events: list[JsonObject], fail_after: Exception | None = None) -> None:
        self._events = events
        self._fail_after = fail_after
        self.closed = False

    def __aiter__(self) -> AsyncIterator[JsonObject]:
        return self._iter()

    async def _iter(self) -> AsyncIterator[JsonObject]:
        for event in self._events:
            yield copy.deepcopy(event)
        if self._fail_after is not None:
            raise self._fail_after

    async def aclose(self) -> None:
        self.closed = True


class FakeUpstream:
    """An Upstream that answers from canned events / bodies and records every request."""

    def __init__(
        self,
        *,
        events: list[JsonObject] | None = None,
        body: JsonObject | None = None,
        fail_after: Exception | None = None,
    ) -> None:
        self.events = events or []
        self.body = body or {}
        self.fail_after = fail_after
        self.requests: list[JsonObject] = []
        self.streams: list[ListEventStream] = []

    async def create_response(self, body: JsonObject, headers: Mapping[str, str]) -> JsonObject:
        self.requests.append(copy.deepcopy(body))
        return copy.deepcopy(self.body)

    async def stream_response(
        self, body: JsonObject, headers: Mapping[str, str]
    ) -> ListEventStream:
        self.requests.append(copy.deepcopy(body))
        stream = ListEventStream(self.events, self.fail_after)
        self.streams.append(stream)
        return stream

    async def list_models(self, headers: Mapping[str, str]) -> RawReply:
        return RawReply(200, "application/json", b'{"object":"list","data":[]}')

    async def check_ready(self) -> bool:
        return True

    async def aclose(self) -> None:
        return None
