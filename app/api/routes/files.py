"""The Files API: ``/v1/files`` (multipart upload, list, get, delete, content).

Uploads have their own size limit (the ``max_upload_bytes`` setting), not the JSON body limit:
the body is counted as it arrives and the multipart parser spools the file to disk past 1 MB.

Every file is its uploader's tenant's (``api.tenancy.principal_of``): another tenant's file id
answers the 404 of an unknown one.
"""

from __future__ import annotations

import mimetypes
from typing import Any
from urllib.parse import quote

import orjson
from fastapi import APIRouter, Request
from starlette.datastructures import FormData, UploadFile
from starlette.exceptions import HTTPException
from starlette.responses import Response
from starlette.types import Message

from app.api.replies import json_reply, list_reply
from app.api.tenancy import principal_of
from app.errors import InvalidRequestError, RequestTooLargeError
from app.files.files import FilesService

router = APIRouter()

MAX_LIST_LIMIT = 10_000
# Form fields other than the file itself (``purpose``, ``expires_after[...]``) are small.
_MAX_FIELD_BYTES = 64 * 1024


def _service(request: Request) -> FilesService:
    service: FilesService = request.app.state.gateway.files
    return service


@router.post("/v1/files")
async def create_file(request: Request) -> Response:
    form = await _read_form(request, request.app.state.gateway.settings.max_upload_bytes)
    try:
        upload = form.get("file")
        if not isinstance(upload, UploadFile):
            raise _missing("file")
        purpose = form.get("purpose")
        if not isinstance(purpose, str):
            raise _missing("purpose")
        data = await upload.read()
        created = await _service(request).create(
            tenant=principal_of(request).tenant,
            filename=upload.filename or "upload",
            data=data,
            purpose=purpose,
            expires_after=_expires_after(form),
        )
    finally:
        await form.close()
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


async def _read_form(request: Request, limit: int) -> FormData:
    """The multipart form, the body counted as it arrives (413 past ``limit``)."""
    length = request.headers.get("content-length")
    if length is not None and length.isdigit() and int(length) > limit:
        raise _too_large(limit)
    content_type = request.headers.get("content-type", "")
    if not content_type.startswith("multipart/form-data"):
        raise InvalidRequestError(
            "The request must be multipart/form-data with a 'file' and a 'purpose'.",
            code="invalid_content_type",
        )
    received = 0

    async def receive() -> Message:
        nonlocal received
        message = await request.receive()
        if message["type"] == "http.request":
            received += len(message.get("body", b""))
            if received > limit:
                raise _too_large(limit)
        return message

    counted = Request(request.scope, receive)
    try:
        return await counted.form(max_files=1, max_fields=32, max_part_size=_MAX_FIELD_BYTES)
    except HTTPException as exc:  # malformed multipart
        raise InvalidRequestError(f"Invalid multipart body: {exc.detail}") from None


def _expires_after(form: FormData) -> Any:
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
        if key.startswith("expires_after[") and key.endswith("]") and isinstance(value, str)
    }
    return nested or None


def _missing(param: str) -> InvalidRequestError:
    return InvalidRequestError(
        f"Missing required parameter: '{param}'.", param=param, code="missing_required_parameter"
    )


def _too_large(limit: int) -> RequestTooLargeError:
    return RequestTooLargeError(f"The file exceeds the upload limit of {limit} bytes.")
