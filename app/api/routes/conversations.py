"""The Conversations API: ``/v1/conversations`` and its items, with OpenAI's pagination."""

from __future__ import annotations

from typing import Any

import orjson
from fastapi import APIRouter, Request
from starlette.responses import Response

from app.api.body import read_json_object, validate
from app.api.pagination import list_object, page_params
from app.api.state import gateway_state
from app.core.conversations import ConversationsService
from app.core.ports import Page
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


async def _body(request: Request, *, optional: bool = False) -> dict[str, Any]:
    """The JSON body (size-limited); an empty body is ``{}`` where every field is optional."""
    if optional and request.headers.get("content-length") == "0":
        return {}
    return await read_json_object(request, gateway_state(request).settings.max_body_bytes)


def _json(data: Any) -> Response:
    return Response(orjson.dumps(data), media_type="application/json")


def _list(page: Page) -> Response:
    return _json(list_object(page))


@router.post("/v1/conversations")
async def create_conversation(request: Request) -> Response:
    body = await _body(request, optional=True)
    reject_unknown_fields(CreateConversationRequest, body)
    parsed = validate(CreateConversationRequest, body)
    items = parsed.items or []
    check_items(items)
    metadata = check_metadata(parsed.metadata, "metadata")
    return _json(await _service(request).create(metadata, items))


@router.get("/v1/conversations/{conversation_id}")
async def get_conversation(request: Request, conversation_id: str) -> Response:
    return _json(await _service(request).get(conversation_id))


@router.post("/v1/conversations/{conversation_id}")
async def update_conversation(request: Request, conversation_id: str) -> Response:
    body = await _body(request)
    reject_unknown_fields(UpdateConversationRequest, body)
    parsed = validate(UpdateConversationRequest, body)
    metadata = check_metadata(parsed.metadata, "metadata")
    return _json(await _service(request).update(conversation_id, metadata))


@router.delete("/v1/conversations/{conversation_id}")
async def delete_conversation(request: Request, conversation_id: str) -> Response:
    return _json(await _service(request).delete(conversation_id))


@router.post("/v1/conversations/{conversation_id}/items")
async def create_items(request: Request, conversation_id: str) -> Response:
    body = await _body(request)
    reject_unknown_fields(CreateItemsRequest, body)
    parsed = validate(CreateItemsRequest, body)
    check_items(parsed.items)
    return _list(await _service(request).add_items(conversation_id, parsed.items))


@router.get("/v1/conversations/{conversation_id}/items")
async def list_items(request: Request, conversation_id: str) -> Response:
    # ``include`` (e.g. ``message.output_text.logprobs``) changes nothing: items are stored
    # whole, with whatever the upstream returned.
    params = page_params(request)
    page = await _service(request).list_items(
        conversation_id, after=params.after, limit=params.limit, order=params.order
    )
    return _list(page)


@router.get("/v1/conversations/{conversation_id}/items/{item_id}")
async def get_item(request: Request, conversation_id: str, item_id: str) -> Response:
    return _json(await _service(request).get_item(conversation_id, item_id))


@router.delete("/v1/conversations/{conversation_id}/items/{item_id}")
async def delete_item(request: Request, conversation_id: str, item_id: str) -> Response:
    return _json(await _service(request).delete_item(conversation_id, item_id))
