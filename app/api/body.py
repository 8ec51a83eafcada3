"""Read and check request bodies: size limit (413), JSON (400), shape (400 naming the field)."""

from __future__ import annotations

from typing import Any, TypeVar

import orjson
from pydantic import BaseModel, ValidationError
from starlette.requests import Request

from app.errors import InvalidRequestError, RequestTooLargeError

ModelT = TypeVar("ModelT", bound=BaseModel)


async def read_json_object(request: Request, limit: int) -> dict[str, Any]:
    length = request.headers.get("content-length")
    if length is not None and length.isdigit() and int(length) > limit:
        raise _too_large(limit)
    if length is not None and length.isdigit():
        raw = await request.body()
    else:
        chunks: list[bytes] = []
        size = 0
        async for chunk in request.stream():
            size += len(chunk)
            if size > limit:
                raise _too_large(limit)
            chunks.append(chunk)
        raw = b"".join(chunks)
    if len(raw) > limit:
        raise _too_large(limit)
    try:
        data = orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        raise InvalidRequestError(
            "We could not parse the JSON body of your request. The API expects a JSON "
            f"payload ({exc}).",
            code="invalid_json",
        ) from exc
    if not isinstance(data, dict):
        raise InvalidRequestError("The request body must be a JSON object.", code="invalid_json")
    return data


def validate(model: type[ModelT], data: dict[str, Any]) -> ModelT:
    """Validate ``data`` against ``model``; the first problem becomes a 400 naming the field."""
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        error = exc.errors(include_url=False)[0]
        param = format_loc(error["loc"])
        if error["type"] == "missing":
            message = f"Missing required parameter: '{param}'."
            code = "missing_required_parameter"
        else:
            message = f"Invalid value for '{param}': {error['msg']}."
            code = "invalid_value"
        raise InvalidRequestError(message, param=param, code=code) from exc


def format_loc(loc: tuple[int | str, ...]) -> str:
    """``("input", 0, "content")`` -> ``input[0].content`` (union branch names dropped)."""
    out = ""
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        elif part.startswith(("list[", "dict[", "str", "function-", "literal[")) or "[" in part:
            continue
        else:
            out += f".{part}" if out else part
    return out or "body"


def _too_large(limit: int) -> RequestTooLargeError:
    return RequestTooLargeError(f"The request body exceeds the limit of {limit} bytes.")
