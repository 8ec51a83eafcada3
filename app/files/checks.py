"""The feature's error answers: OpenAI's 404 for an id that names nothing
(``MissingObjectError``), and the 400s of a bad ``chunking_strategy`` or attribute filter,
each naming the field at fault."""

from __future__ import annotations

from typing import Any

from app.errors import GatewayError, InvalidRequestError
from app.files import filters
from app.files.chunking import ChunkingStrategyError, normalize_chunking_strategy
from app.files.filters import FilterError
from app.protocol.json_types import JsonObject


class MissingObjectError(GatewayError):
    """OpenAI's 404 for a file, vector store or batch id that names nothing: a null code."""

    status_code = 404
    type = "invalid_request_error"
    code = None


def file_not_found(file_id: str, param: str = "id") -> MissingObjectError:
    return MissingObjectError(f"No such File object: {file_id}", param=param)


def vector_store_not_found(vector_store_id: str) -> MissingObjectError:
    return MissingObjectError(
        f"No vector store found with id '{vector_store_id}'.", param="vector_store_id"
    )


def chunking_or_400(value: Any, param: str = "chunking_strategy") -> JsonObject:
    """The stored form of a chunking strategy (``None``: ``auto``), or a 400 naming the field
    (``param`` replaces ``chunking_strategy`` in it, for ``files[2].chunking_strategy``)."""
    try:
        return normalize_chunking_strategy(value)
    except ChunkingStrategyError as exc:
        raise _field_error(str(exc), exc.param, "chunking_strategy", param) from None


def check_filter(value: Any) -> JsonObject | None:
    """An attribute filter checked by ``files.filters``, or a 400 naming the field."""
    if value is None:
        return None
    try:
        return filters.validate_filter(value)
    except FilterError as exc:
        raise _field_error(str(exc), exc.param, "filters", "filters") from None


def _field_error(message: str, where: str, prefix: str, param: str) -> InvalidRequestError:
    if param != prefix:
        message = message.replace(f"'{prefix}", f"'{param}")
        where = param + where[len(prefix) :] if where.startswith(prefix) else where
    if message.startswith("Missing required parameter"):
        code = "missing_required_parameter"
    elif message.startswith("Unknown parameter"):
        code = "unknown_parameter"
    elif message.startswith("Invalid type"):
        code = "invalid_type"
    else:
        code = "invalid_value"
    return InvalidRequestError(message, param=where, code=code)
