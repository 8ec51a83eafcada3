"""The Files API: ``/v1/files`` (multipart upload, list, get, delete, content).

Uploads have their own size limit (the ``max_upload_bytes`` setting, on the file's bytes), not
the JSON body limit. An upload streams to the blob store as it arrives (``api.upload``), never
whole in memory: 413 as soon as the file passes the limit, and an upload that fails or is
interrupted leaves neither bytes nor a record.

Every file is its uploader's tenant's (``api.tenancy.principal_of``): another tenant's file id
answers the 404 of an unknown one.
"""

from __future__ import annotations

import logging
import mimetypes
from collections.abc import Mapping
from typing import Any
from urllib.parse import quote

import orjson
from fastapi import APIRouter, Request
from starlette.requests import ClientDisconnect
from starlette.responses import Response

from app.api.replies import json_reply, list_reply
from app.api.tenancy import principal_of
from app.api.upload import UploadForm
from app.errors import InvalidRequestError
from app.files.files import FilesService, check_purpose

router = APIRouter()
logger = logging.getLogger(__name__)

MAX_LIST_LIMIT = 10_000


def _service(request: Request) -> FilesService:
    service: FilesService = request.app.state.gateway.files
    return service


@router.post("/v1/files")
async def create_file(request: Request) -> Response:
    service = _service(request)
    limit = request.app.state.gateway.settings.max_upload_bytes
    form = UploadForm(request, limit, checks={"purpose": check_purpose})
    try:
        received = await service.receive(form.file_chunks())
    except ClientDisconnect:
        logger.info("upload interrupted by the client; nothing was stored")
        raise InvalidRequestError("The upload was interrupted before it completed.") from None
    try:
        if form.filename is None:
            raise _missing("file")
        purpose = form.fields.get("purpose")
        if purpose is None:
            raise _missing("purpose")
        expires_after = _expires_after(form.fields)
    except BaseException:
        await service.discard(received)
        raise
    created = await service.create_received(
        received,
        tenant=principal_of(request).tenant,
        filename=form.filename or "upload",
        purpose=purpose,
        expires_after=expires_after,
    )
    return json_reply(created)


@router.get("/v1/files")
async def list_files(request: Request) -> Response:
    query = request.query_params
    raw_limit = query.get("limit", str(MAX_LIST_LIMIT))
    limit = int(raw_limit) if raw_limit.isdigit() else -1
    if not 1 <= limit <= MAX_LIST_LIMIT:
        raise InvalidRequestError(
            f"Invalid 'limit': integer between 1 and {MAX_LIST_LIMIT} expected, got '{raw_limit}'.",
            param="limit",
            code="invalid_value",
        )
    order = query.get("order", "desc")
    if order not in ("asc", "desc"):
        raise InvalidRequestError(
            f"Invalid 'order': expected 'asc' or 'desc', got '{order}'.",
            param="order",
            code="invalid_value",
        )
    page = await _service(request).list_files(
        tenant=principal_of(request).tenant,
        purpose=query.get("purpose") or None,
        after=query.get("after") or None,
        limit=limit,
        order=order,
    )
    return list_reply(page)


@router.get("/v1/files/{file_id}")
async def get_file(request: Request, file_id: str) -> Response:
    return json_reply(await _service(request).get(file_id, tenant=principal_of(request).tenant))


@router.delete("/v1/files/{file_id}")
async def delete_file(request: Request, file_id: str) -> Response:
    return json_reply(await _service(request).delete(file_id, tenant=principal_of(request).tenant))


@router.get("/v1/files/{file_id}/content")
async def file_content(request: Request, file_id: str) -> Response:
    file, data = await _service(request).content(file_id, tenant=principal_of(request).tenant)
    media_type = mimetypes.guess_type(file.filename)[0] or "application/octet-stream"
    disposition = f"attachment; filename*=UTF-8''{quote(file.filename)}"
    return Response(data, media_type=media_type, headers={"content-disposition": disposition})


def _expires_after(form: Mapping[str, str]) -> Any:
    """``expires_after`` as the SDKs send it (``expires_after[anchor]``, ``…[seconds]``) or as
    one JSON field."""
    raw = form.get("expires_after")
    if isinstance(raw, str):
        try:
            return orjson.loads(raw)
        except orjson.JSONDecodeError:
            raise InvalidRequestError(
                "Invalid 'expires_after': expected a JSON object.",
                param="expires_after",
                code="invalid_value",
            ) from None
    nested = {
        key[len("expires_after[") : -1]: value
        for key, value in form.items()
        if key.startswith("expires_after[") and key.endswith("]")
    }
    return nested or None


def _missing(param: str) -> InvalidRequestError:
    return InvalidRequestError(
        f"Missing required parameter: '{param}'.", param=param, code="missing_required_parameter"
    )
