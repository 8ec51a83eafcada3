"""What one WebSocket connection on ``/v1/responses`` keeps: its most recent response.

OpenAI's WebSocket mode keeps the connection's most recent response in memory, so a turn with
``previous_response_id`` continues from it even with ``store: false``. The kernel reads every
parent through the ``ResponseStore`` port, so the connection hands its own copy of the
``ResponsesService`` a ``ConnectionStore``: a read-through wrapper that answers from the
connection's last response and its items first, then from the real store (``StoreDelegate``
passes the rest through). Nothing in ``app.core`` knows about connections.

- A stored turn (``store`` true) passes through ``save_response``, which records it; items of an
  earlier unstored turn that it references (its history, or ids its input names) are written
  with it, so the stored checkpoint is complete.
- An unstored turn never reaches the store: the route calls ``remember`` with the history the
  kernel's own ``rehydrate`` computes (answered from memory: the reads it repeats were just
  made through this wrapper, whose reads are kept for the turn).
- A failed turn calls ``evict``; a new connection starts empty (a reconnect recovers only what
  was stored).

``WarmupUpstream`` answers a ``generate: false`` turn (a warm-up) with an empty completed
response instead of calling the model, so the warm-up goes through the same service: history,
store, conversations and the lifecycle events are the ones a real turn gets.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping

from app.core.history import History
from app.core.jsoncopy import clone
from app.core.ports import (
    NewResponse,
    Page,
    RawReply,
    ResponseStore,
    SingleResponseStream,
    StoredConversation,
    StoredResponse,
    Upstream,
    UpstreamEventStream,
)
from app.protocol.json_types import JsonObject

_EMPTY_USAGE: JsonObject = {
    "input_tokens": 0,
    "input_tokens_details": {"cached_tokens": 0},
    "output_tokens": 0,
    "output_tokens_details": {"reasoning_tokens": 0},
    "total_tokens": 0,
}


class StoreDelegate:
    """A ``ResponseStore`` that passes every call to ``store`` (subclasses override some)."""

    def __init__(self, store: ResponseStore) -> None:
        self._store = store

    async def get_response(self, response_id: str, *, tenant: str) -> StoredResponse | None:
        return await self._store.get_response(response_id, tenant=tenant)

    async def load_items(self, item_ids: list[str], *, tenant: str) -> list[JsonObject]:
        return await self._store.load_items(item_ids, tenant=tenant)

    async def save_response(self, new: NewResponse, *, tenant: str) -> None:
        await self._store.save_response(new, tenant=tenant)

    async def existing_item_ids(self, item_ids: list[str], *, tenant: str) -> set[str]:
        return await self._store.existing_item_ids(item_ids, tenant=tenant)

    async def delete_response(self, response_id: str, *, tenant: str) -> bool:
        return await self._store.delete_response(response_id, tenant=tenant)

    async def list_input_items(
        self, response_id: str, *, tenant: str, after: str | None, limit: int, order: str
    ) -> Page | None:
        return await self._store.list_input_items(
            response_id, tenant=tenant, after=after, limit=limit, order=order
        )

    async def create_conversation(
        self, metadata: dict[str, str], items: list[JsonObject], *, tenant: str
    ) -> StoredConversation:
        return await self._store.create_conversation(metadata, items, tenant=tenant)

    async def get_conversation(
        self, conversation_id: str, *, tenant: str
    ) -> StoredConversation | None:
        return await self._store.get_conversation(conversation_id, tenant=tenant)

    async def update_conversation(
        self, conversation_id: str, metadata: dict[str, str], *, tenant: str
    ) -> StoredConversation | None:
        return await self._store.update_conversation(conversation_id, metadata, tenant=tenant)

    async def delete_conversation(self, conversation_id: str, *, tenant: str) -> bool:
        return await self._store.delete_conversation(conversation_id, tenant=tenant)

    async def conversation_items(
        self, conversation_id: str, *, tenant: str
    ) -> list[JsonObject] | None:
        return await self._store.conversation_items(conversation_id, tenant=tenant)

    async def append_conversation_items(
        self, conversation_id: str, items: list[JsonObject], *, tenant: str
    ) -> list[JsonObject] | None:
        return await self._store.append_conversation_items(conversation_id, items, tenant=tenant)

    async def list_conversation_items(
        self, conversation_id: str, *, tenant: str, after: str | None, limit: int, order: str
    ) -> Page | None:
        return await self._store.list_conversation_items(
            conversation_id, tenant=tenant, after=after, limit=limit, order=order
        )

    async def get_conversation_item(
        self, conversation_id: str, item_id: str, *, tenant: str
    ) -> JsonObject | None:
        return await self._store.get_conversation_item(conversation_id, item_id, tenant=tenant)

    async def delete_conversation_item(
        self, conversation_id: str, item_id: str, *, tenant: str
    ) -> bool:
        return await self._store.delete_conversation_item(conversation_id, item_id, tenant=tenant)

    async def aclose(self) -> None:
        """The real store belongs to the application, not to the connection."""
        return None


class ConnectionStore(StoreDelegate):
    """A ``ResponseStore`` for one connection: its last response first, then ``store``. The
    connection's memory is its tenant's (``tenant``, the principal of the WebSocket): a read
    for another tenant goes to the store only."""

    def __init__(self, store: ResponseStore, tenant: str) -> None:
        super().__init__(store)
        self._tenant = tenant
        self._last: StoredResponse | None = None
        # Items of the last response's checkpoint, and what this turn read, by id.
        self._items: dict[str, JsonObject] = {}
        # Ids among ``_items`` that the real store does not hold (from unstored turns).
        self._unsaved: set[str] = set()

    @property
    def last_response_id(self) -> str | None:
        return self._last.id if self._last is not None else None

    # ----------------------------------------------------------- the connection's memory

    def remember(self, history: History, response: JsonObject) -> None:
        """Keep an unstored turn's response, its history, input and output in memory."""
        output = [item for item in response.get("output") or [] if isinstance(item, dict)]
        input_ids = [str(item["id"]) for item in history.input_items]
        checkpoint = [*history.history_ids, *input_ids, *(str(item["id"]) for item in output)]
        items = {str(item["id"]): item for item in history.history_items}
        items.update((str(item["id"]), item) for item in history.input_items)
        items.update((str(item["id"]), item) for item in output)
        fresh = {str(item["id"]) for item in (*history.new_input_items, *output)}
        self._unsaved = (self._unsaved & set(checkpoint)) | fresh
        self._items = {key: items[key] for key in checkpoint if key in items}
        self._last = StoredResponse(
            id=str(response["id"]),
            response=response,
            checkpoint_ids=checkpoint,
            input_item_ids=input_ids,
            conversation_id=history.conversation_id,
            created_at=int(response.get("created_at") or 0),
            root_id=history.root_id or str(response["id"]),
        )

    def evict(self) -> None:
        """Forget the last response (a failed turn: it cannot be continued in memory)."""
        self._last = None
        self._items = {}
        self._unsaved = set()

    def begin_turn(self) -> None:
        """Drop what the previous turn read but did not keep (its checkpoint stays)."""
        last = self._last
        keep = set(last.checkpoint_ids) if last is not None else set()
        self._items = {key: item for key, item in self._items.items() if key in keep}

    # ----------------------------------------------------------- read-through

    async def get_response(self, response_id: str, *, tenant: str) -> StoredResponse | None:
        last = self._last
        if last is not None and last.id == response_id and tenant == self._tenant:
            return last
        return await self._store.get_response(response_id, tenant=tenant)

    async def load_items(self, item_ids: list[str], *, tenant: str) -> list[JsonObject]:
        if tenant != self._tenant:
            return await self._store.load_items(item_ids, tenant=tenant)
        known = self._items
        missing = [item_id for item_id in item_ids if item_id not in known]
        if missing:
            for item in await self._store.load_items(missing, tenant=tenant):
                known[str(item["id"])] = item
        return [known[item_id] for item_id in item_ids if item_id in known]

    async def save_response(self, new: NewResponse, *, tenant: str) -> None:
        if tenant != self._tenant:
            await self._store.save_response(new, tenant=tenant)
            return
        writing = {str(item["id"]) for item in new.new_items}
        referenced = [*new.history_ids, *new.input_item_ids]
        carried = [
            self._items[item_id]
            for item_id in dict.fromkeys(referenced)
            if item_id in self._unsaved and item_id not in writing
        ]
        if carried:
            new = dataclasses.replace(new, new_items=[*carried, *new.new_items])
        await self._store.save_response(new, tenant=tenant)
        response = new.response
        output_ids = [str(item["id"]) for item in response.get("output") or []]
        self._items.update((str(item["id"]), item) for item in new.new_items)
        self._unsaved = set()
        self._last = StoredResponse(
            id=str(response["id"]),
            response=response,
            checkpoint_ids=[*new.history_ids, *new.input_item_ids, *output_ids],
            input_item_ids=list(new.input_item_ids),
            conversation_id=new.conversation_id,
            created_at=int(response.get("created_at") or 0),
            root_id=new.root_id or str(response["id"]),
        )

    async def delete_response(self, response_id: str, *, tenant: str) -> bool:
        if self.last_response_id == response_id and tenant == self._tenant:
            self.evict()
        return await self._store.delete_response(response_id, tenant=tenant)


class WarmupUpstream:
    """The real upstream, except while ``warmup`` is set: then an empty completed response."""

    def __init__(self, upstream: Upstream) -> None:
        self._upstream = upstream
        self.warmup = False

    async def create_response(self, body: JsonObject, headers: Mapping[str, str]) -> JsonObject:
        if self.warmup:
            return _warmup_response()
        return await self._upstream.create_response(body, headers)

    async def stream_response(
        self, body: JsonObject, headers: Mapping[str, str]
    ) -> UpstreamEventStream:
        if self.warmup:
            return SingleResponseStream(_warmup_response())
        return await self._upstream.stream_response(body, headers)

    async def list_models(self, headers: Mapping[str, str]) -> RawReply:
        return await self._upstream.list_models(headers)

    async def check_ready(self) -> bool:
        return await self._upstream.check_ready()

    async def aclose(self) -> None:
        """The real upstream belongs to the application, not to the connection."""
        return None


def _warmup_response() -> JsonObject:
    return {"status": "completed", "output": [], "usage": clone(_EMPTY_USAGE)}
