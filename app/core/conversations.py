"""ConversationsService: the Conversations API (``/v1/conversations``) over the ResponseStore.

Items added to a conversation get OpenAI's canonical shape and ids from ``core.history`` (a
client-chosen id must carry its type's prefix; an id that is already stored is a reference to
that item, whose stored payload is what the conversation holds). Responses created with
``conversation`` are appended by ``ResponsesService``, not here. Every method acts for the
caller's ``tenant`` (``core.tenancy``): another tenant's conversation or item answers as an
unknown one does.
"""

from __future__ import annotations

from app.core.history import resolve_items
from app.core.paging import page_or_raise
from app.core.ports import Page, ResponseStore
from app.core.store_errors import ItemAlreadyInConversationError
from app.errors import InvalidRequestError, NotFoundError
from app.protocol.json_types import JsonObject


class ConversationsService:
    def __init__(self, store: ResponseStore) -> None:
        self.store = store

    # ------------------------------------------------------------------ conversations

    async def create(
        self, metadata: dict[str, str], raw_items: list[JsonObject], *, tenant: str
    ) -> JsonObject:
        items, _ = await resolve_items(self.store, raw_items, "items", keep_ids=True, tenant=tenant)
        conversation = await self.store.create_conversation(metadata, items, tenant=tenant)
        return conversation.to_object()

    async def get(self, conversation_id: str, *, tenant: str) -> JsonObject:
        conversation = await self.store.get_conversation(conversation_id, tenant=tenant)
        if conversation is None:
            raise conversation_not_found(conversation_id)
        return conversation.to_object()

    async def update(
        self, conversation_id: str, metadata: dict[str, str], *, tenant: str
    ) -> JsonObject:
        conversation = await self.store.update_conversation(
            conversation_id, metadata, tenant=tenant
        )
        if conversation is None:
            raise conversation_not_found(conversation_id)
        return conversation.to_object()

    async def delete(self, conversation_id: str, *, tenant: str) -> JsonObject:
        if not await self.store.delete_conversation(conversation_id, tenant=tenant):
            raise conversation_not_found(conversation_id)
        return {"id": conversation_id, "object": "conversation.deleted", "deleted": True}

    # ------------------------------------------------------------------ items

    async def add_items(
        self, conversation_id: str, raw_items: list[JsonObject], *, tenant: str
    ) -> Page:
        """Append items; the page lists them as stored (a referenced id lists its stored item)."""
        items, _ = await resolve_items(self.store, raw_items, "items", keep_ids=True, tenant=tenant)
        try:
            stored = await self.store.append_conversation_items(
                conversation_id, items, tenant=tenant
            )
        except ItemAlreadyInConversationError:
            raise InvalidRequestError(
                "Item already in conversation",
                param="items",
                code="item_already_in_conversation",
            ) from None
        if stored is None:
            raise conversation_not_found(conversation_id)
        return Page(items=stored, has_more=False)

    async def list_items(
        self, conversation_id: str, *, tenant: str, after: str | None, limit: int, order: str
    ) -> Page:
        lookup = self.store.list_conversation_items(
            conversation_id, tenant=tenant, after=after, limit=limit, order=order
        )
        return await page_or_raise(lookup, after, conversation_not_found(conversation_id))

    async def get_item(self, conversation_id: str, item_id: str, *, tenant: str) -> JsonObject:
        item = await self.store.get_conversation_item(conversation_id, item_id, tenant=tenant)
        if item is None:
            # a missing conversation is the error to report
            await self.get(conversation_id, tenant=tenant)
            raise item_not_found(item_id)
        return item

    async def delete_item(self, conversation_id: str, item_id: str, *, tenant: str) -> JsonObject:
        """Remove an item from the conversation; OpenAI answers with the conversation."""
        if not await self.store.delete_conversation_item(conversation_id, item_id, tenant=tenant):
            await self.get(conversation_id, tenant=tenant)
            raise item_not_found(item_id)
        return await self.get(conversation_id, tenant=tenant)


def conversation_not_found(conversation_id: str) -> NotFoundError:
    return NotFoundError(
        f"Conversation with id '{conversation_id}' not found.", param="conversation_id"
    )


def item_not_found(item_id: str) -> NotFoundError:
    return NotFoundError(f"Item with id '{item_id}' not found.", param="item_id")
