"""The Conversations API: ``/v1/conversations`` and its items, with OpenAI's pagination; each
call runs for the caller's tenant (another tenant's conversation or item is a 404)."""

from __future__ import annotations

from fastapi import APIRouter, Request
from starlette.responses import Response

from app.api.body import validate
from app.api.pagination import page_params
from app.api.replies import json_reply, list_reply, request_object
from app.api.state import gateway_state
from app.api.tenancy import principal_of
from app.core.conversations import ConversationsService
from app.protocol.conversations import (
    CreateConversationRequest,
    CreateItemsRequest,
    UpdateConversationRequest,
    check_items,
    reject_unknown_fields,
)
from app.protocol.metadata import check_metadata

router = APIRouter()


def _service(request: Request) -> ConversationsService:
    return ConversationsService(gateway_state(request).store)


def _tenant(request: Request) -> str:
    return principal_of(request).tenant


@router.post("/v1/conversations")
async def create_conversation(request: Request) -> Response:
    body = await request_object(request, optional=True)
    reject_unknown_fields(CreateConversationRequest, body)
    parsed = validate(CreateConversationRequest, body)
    items = parsed.items or []
    check_items(items)
    metadata = check_metadata(parsed.metadata, "metadata")
    return json_reply(await _service(request).create(metadata, items, tenant=_tenant(request)))


@router.get("/v1/conversations/{conversation_id}")
async def get_conversation(request: Request, conversation_id: str) -> Response:
    return json_reply(await _service(request).get(conversation_id, tenant=_tenant(request)))


@router.post("/v1/conversations/{conversation_id}")
async def update_conversation(request: Request, conversation_id: str) -> Response:
    body = await request_object(request)
    reject_unknown_fields(UpdateConversationRequest, body)
    parsed = validate(UpdateConversationRequest, body)
    metadata = check_metadata(parsed.metadata, "metadata")
    tenant = _tenant(request)
    return json_reply(await _service(request).update(conversation_id, metadata, tenant=tenant))


@router.delete("/v1/conversations/{conversation_id}")
async def delete_conversation(request: Request, conversation_id: str) -> Response:
    return json_reply(await _service(request).delete(conversation_id, tenant=_tenant(request)))


@router.post("/v1/conversations/{conversation_id}/items")
async def create_items(request: Request, conversation_id: str) -> Response:
    body = await request_object(request)
    reject_unknown_fields(CreateItemsRequest, body)
    parsed = validate(CreateItemsRequest, body)
    check_items(parsed.items)
    tenant = _tenant(request)
    return list_reply(
        await _service(request).add_items(conversation_id, parsed.items, tenant=tenant)
    )


@router.get("/v1/conversations/{conversation_id}/items")
async def list_items(request: Request, conversation_id: str) -> Response:
    # ``include`` (e.g. ``message.output_text.logprobs``) changes nothing: items are stored
    # whole, with whatever the upstream returned.
    params = page_params(request)
    page = await _service(request).list_items(
        conversation_id,
        tenant=_tenant(request),
        after=params.after,
        limit=params.limit,
        order=params.order,
    )
    return list_reply(page)


@router.get("/v1/conversations/{conversation_id}/items/{item_id}")
async def get_item(request: Request, conversation_id: str, item_id: str) -> Response:
    tenant = _tenant(request)
    return json_reply(await _service(request).get_item(conversation_id, item_id, tenant=tenant))


@router.delete("/v1/conversations/{conversation_id}/items/{item_id}")
async def delete_item(request: Request, conversation_id: str, item_id: str) -> Response:
    tenant = _tenant(request)
    return json_reply(await _service(request).delete_item(conversation_id, item_id, tenant=tenant))
