"""The Vector Stores API: ``/v1/vector_stores``, their files, file batches and search.

Every call is the caller's tenant's (``api.tenancy.principal_of``): another tenant's vector
store, batch or file answers the 404 of an unknown one.
"""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request
from starlette.responses import Response

from app.api.body import validate
from app.api.pagination import page_params
from app.api.replies import json_reply, list_reply, request_object
from app.api.tenancy import principal_of
from app.errors import InvalidRequestError
from app.files.attach import FileEntry
from app.files.paging import Cursor
from app.files.requests import (
    CreateFileBatchRequest,
    CreateVectorStoreFileRequest,
    CreateVectorStoreRequest,
    SearchRequest,
    UpdateVectorStoreFileRequest,
    UpdateVectorStoreRequest,
    check_attributes,
)
from app.files.vector_stores import VectorStoresService
from app.protocol.conversations import reject_unknown_fields
from app.protocol.metadata import check_metadata

router = APIRouter()

FILE_STATUSES = ("in_progress", "completed", "failed", "cancelled")


def _service(request: Request) -> VectorStoresService:
    service: VectorStoresService = request.app.state.gateway.vector_stores
    return service


def _tenant(request: Request) -> str:
    return principal_of(request).tenant


def _cursor(request: Request) -> Cursor:
    params = page_params(request)
    before = request.query_params.get("before") or None
    return Cursor(after=params.after, before=before, limit=params.limit, order=params.order)


def _status_filter(request: Request) -> str | None:
    status = request.query_params.get("filter") or None
    if status is not None and status not in FILE_STATUSES:
        supported = ", ".join(f"'{s}'" for s in FILE_STATUSES[:-1])
        raise InvalidRequestError(
            f"Invalid value: '{status}'. Supported values are: {supported}, and "
            f"'{FILE_STATUSES[-1]}'.",
            param="filter",
            code="invalid_value",
        )
    return status


# ---------------------------------------------------------------------------- stores


@router.post("/v1/vector_stores")
async def create_vector_store(request: Request) -> Response:
    body = await request_object(request, optional=True)
    reject_unknown_fields(CreateVectorStoreRequest, body)
    parsed = validate(CreateVectorStoreRequest, body)
    metadata = check_metadata(parsed.metadata, "metadata")
    # ``description`` is accepted (OpenAI's SDK sends it) but not part of the object.
    created = await _service(request).stores.create(
        tenant=_tenant(request),
        name=parsed.name,
        metadata=metadata,
        expires_after=parsed.expires_after.model_dump() if parsed.expires_after else None,
        file_ids=parsed.file_ids or [],
        chunking_strategy=parsed.chunking_strategy,
    )
    return json_reply(created)


@router.get("/v1/vector_stores")
async def list_vector_stores(request: Request) -> Response:
    stores = _service(request).stores
    return list_reply(await stores.list_stores(_cursor(request), tenant=_tenant(request)))


@router.get("/v1/vector_stores/{vector_store_id}")
async def get_vector_store(request: Request, vector_store_id: str) -> Response:
    return json_reply(await _service(request).stores.get(vector_store_id, tenant=_tenant(request)))


@router.post("/v1/vector_stores/{vector_store_id}")
async def update_vector_store(request: Request, vector_store_id: str) -> Response:
    body = await request_object(request, optional=True)
    reject_unknown_fields(UpdateVectorStoreRequest, body)
    parsed = validate(UpdateVectorStoreRequest, body)
    changes: dict[str, Any] = {}
    if "name" in parsed.model_fields_set:
        changes["name"] = parsed.name
    if "metadata" in parsed.model_fields_set:
        changes["metadata"] = check_metadata(parsed.metadata, "metadata")
    if "expires_after" in parsed.model_fields_set:
        expires = parsed.expires_after
        changes["expires_after"] = expires.model_dump() if expires else None
    stores = _service(request).stores
    return json_reply(await stores.update(vector_store_id, changes, tenant=_tenant(request)))


@router.delete("/v1/vector_stores/{vector_store_id}")
async def delete_vector_store(request: Request, vector_store_id: str) -> Response:
    stores = _service(request).stores
    return json_reply(await stores.delete(vector_store_id, tenant=_tenant(request)))


@router.post("/v1/vector_stores/{vector_store_id}/search")
async def search_vector_store(request: Request, vector_store_id: str) -> Response:
    body = await request_object(request)
    reject_unknown_fields(SearchRequest, body)
    parsed = validate(SearchRequest, body)  # parsed once, with precise errors
    searcher = _service(request).searcher
    return json_reply(await searcher.search(vector_store_id, parsed, tenant=_tenant(request)))


# ---------------------------------------------------------------------------- files of a store


@router.post("/v1/vector_stores/{vector_store_id}/files")
async def create_vector_store_file(request: Request, vector_store_id: str) -> Response:
    body = await request_object(request)
    reject_unknown_fields(CreateVectorStoreFileRequest, body)
    parsed = validate(CreateVectorStoreFileRequest, body)
    entry = FileEntry(
        file_id=parsed.file_id,
        attributes=check_attributes(parsed.attributes, "attributes"),
        chunking_strategy=parsed.chunking_strategy,
    )
    store_files = _service(request).store_files
    return json_reply(await store_files.add_file(vector_store_id, entry, tenant=_tenant(request)))


@router.get("/v1/vector_stores/{vector_store_id}/files")
async def list_vector_store_files(request: Request, vector_store_id: str) -> Response:
    page = await _service(request).store_files.list_files(
        vector_store_id, _cursor(request), status=_status_filter(request), tenant=_tenant(request)
    )
    return list_reply(page)


@router.get("/v1/vector_stores/{vector_store_id}/files/{file_id}")
async def get_vector_store_file(request: Request, vector_store_id: str, file_id: str) -> Response:
    store_files = _service(request).store_files
    return json_reply(await store_files.get_file(vector_store_id, file_id, tenant=_tenant(request)))


@router.post("/v1/vector_stores/{vector_store_id}/files/{file_id}")
async def update_vector_store_file(
    request: Request, vector_store_id: str, file_id: str
) -> Response:
    body = await request_object(request)
    reject_unknown_fields(UpdateVectorStoreFileRequest, body)
    parsed = validate(UpdateVectorStoreFileRequest, body)
    attributes = check_attributes(parsed.attributes, "attributes")
    return json_reply(
        await _service(request).store_files.update_file(
            vector_store_id, file_id, attributes, tenant=_tenant(request)
        )
    )


@router.delete("/v1/vector_stores/{vector_store_id}/files/{file_id}")
async def delete_vector_store_file(
    request: Request, vector_store_id: str, file_id: str
) -> Response:
    store_files = _service(request).store_files
    return json_reply(
        await store_files.remove_file(vector_store_id, file_id, tenant=_tenant(request))
    )


@router.get("/v1/vector_stores/{vector_store_id}/files/{file_id}/content")
async def vector_store_file_content(
    request: Request, vector_store_id: str, file_id: str
) -> Response:
    store_files = _service(request).store_files
    return json_reply(
        await store_files.file_content(vector_store_id, file_id, tenant=_tenant(request))
    )


# ---------------------------------------------------------------------------- file batches


@router.post("/v1/vector_stores/{vector_store_id}/file_batches")
async def create_file_batch(request: Request, vector_store_id: str) -> Response:
    body = await request_object(request)
    reject_unknown_fields(CreateFileBatchRequest, body)
    parsed = validate(CreateFileBatchRequest, body)
    return json_reply(
        await _service(request).batches.create_batch(
            vector_store_id, _batch_entries(parsed), tenant=_tenant(request)
        )
    )


@router.get("/v1/vector_stores/{vector_store_id}/file_batches/{batch_id}")
async def get_file_batch(request: Request, vector_store_id: str, batch_id: str) -> Response:
    batches = _service(request).batches
    return json_reply(await batches.get_batch(vector_store_id, batch_id, tenant=_tenant(request)))


@router.post("/v1/vector_stores/{vector_store_id}/file_batches/{batch_id}/cancel")
async def cancel_file_batch(request: Request, vector_store_id: str, batch_id: str) -> Response:
    batches = _service(request).batches
    return json_reply(
        await batches.cancel_batch(vector_store_id, batch_id, tenant=_tenant(request))
    )


@router.get("/v1/vector_stores/{vector_store_id}/file_batches/{batch_id}/files")
async def list_file_batch_files(request: Request, vector_store_id: str, batch_id: str) -> Response:
    page = await _service(request).batches.list_batch_files(
        vector_store_id,
        batch_id,
        _cursor(request),
        status=_status_filter(request),
        tenant=_tenant(request),
    )
    return list_reply(page)


def _batch_entries(parsed: CreateFileBatchRequest) -> list[FileEntry]:
    """``file_ids`` (sharing ``attributes`` and ``chunking_strategy``) or ``files`` (each with
    its own): one of them."""
    if parsed.file_ids is not None and parsed.files is not None:
        raise InvalidRequestError(
            "'file_ids' and 'files' are mutually exclusive: send one of them.",
            param="files",
            code="invalid_value",
        )
    if parsed.files is not None:
        # As with OpenAI, the batch-wide attributes and chunking strategy are then ignored.
        entries = [
            FileEntry(
                file_id=item.file_id,
                attributes=check_attributes(item.attributes, f"files[{index}].attributes"),
                chunking_strategy=item.chunking_strategy,
                param=f"files[{index}].chunking_strategy",
            )
            for index, item in enumerate(parsed.files)
        ]
    else:
        attributes = check_attributes(parsed.attributes, "attributes")
        entries = [
            FileEntry(file_id, dict(attributes), parsed.chunking_strategy)
            for file_id in parsed.file_ids or []
        ]
    if not entries:
        raise InvalidRequestError(
            "Missing required parameter: 'file_ids'.",
            param="file_ids",
            code="missing_required_parameter",
        )
    return entries
