"""Read and check request bodies: size limit (413), JSON (400), shape (400 naming the field)."""

from __future__ import annotations

import re
from typing import Any, TypeVar

import orjson
from pydantic import BaseModel, ValidationError
from pydantic_core import ErrorDetails
from starlette.requests import HTTPConnection, Request

from app.api.json_depth import exceeds_depth
from app.errors import InvalidRequestError, RequestTooLargeError

ModelT = TypeVar("ModelT", bound=BaseModel)


# How deep a body may nest when the app's settings do not say ([limits] max_json_depth).
DEFAULT_MAX_JSON_DEPTH = 128


async def read_json_object(request: Request, limit: int) -> dict[str, Any]:
    return parse_json_object(await read_body(request, limit), max_json_depth(request))


def max_json_depth(connection: HTTPConnection) -> int:
    """The app's ``[limits] max_json_depth``."""
    gateway = getattr(connection.app.state, "gateway", None)
    return gateway.settings.limits.max_json_depth if gateway is not None else DEFAULT_MAX_JSON_DEPTH


def parse_json_object(raw: bytes, max_depth: int = DEFAULT_MAX_JSON_DEPTH) -> dict[str, Any]:
    """``raw`` as a JSON object, or the 400 OpenAI answers for a body that is not one (or that
    nests deeper than ``max_depth``: checked before anything else reads it)."""
    try:
        data = orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        if "depth limit" in str(exc):  # orjson's own ceiling, 1,024 levels
            raise _too_deep(max_depth) from None
        raise InvalidRequestError(
            "We could not parse the JSON body of your request. The API expects a JSON "
            f"payload ({exc}).",
            code="invalid_json",
        ) from exc
    if not isinstance(data, dict):
        raise InvalidRequestError("The request body must be a JSON object.", code="invalid_json")
    if exceeds_depth(data, max_depth):
        raise _too_deep(max_depth)
    return data


def _too_deep(limit: int) -> InvalidRequestError:
    return InvalidRequestError(
        f"The JSON body of your request nests more than {limit} levels deep (objects and "
        "arrays inside each other), which is more than this server accepts.",
        code="json_too_deeply_nested",
    )


async def read_body(request: Request, limit: int) -> bytes:
    """The request body, or a 413 as soon as it is known to exceed ``limit`` bytes."""
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
    return raw


def validate(model: type[ModelT], data: dict[str, Any]) -> ModelT:
    """Validate ``data`` against ``model``; the first problem becomes a 400 naming the field.

    Strict, as OpenAI is (``"stream": "yes"`` is a 400): the body is forwarded as the client
    sent it, so a value accepted only after coercion would reach the upstream uncoerced.
    """
    try:
        return model.model_validate(data, strict=True)
    except ValidationError as exc:
        error = _most_specific(exc.errors(include_url=False))
        param = format_loc(error["loc"])
        if error["type"] == "missing":
            message = f"Missing required parameter: '{param}'."
            code = "missing_required_parameter"
        else:
            detail = str(error["msg"])
            cause = (error.get("ctx") or {}).get("error")
            if error["type"] == "value_error" and cause is not None:
                # Validators name the list element at fault ("tools[0] needs ..."): point at it.
                detail = str(cause)
                element = re.match(re.escape(param) + r"((?:\[\d+\])+)", detail)
                if element is not None:
                    param += element.group(1)
            # pydantic names the gateway's model classes ("… or instance of ReasoningParam").
            detail = re.sub(r" or instance of \w+", "", detail)
            message = f"Invalid value for '{param}': {detail.rstrip('.')}."
            code = "invalid_value"
        raise InvalidRequestError(message, param=param, code=code) from exc


def _most_specific(errors: list[ErrorDetails]) -> ErrorDetails:
    """Of the errors about the first bad field, the deepest one.

    A union reports one error per member; the deepest is from the member whose shape matched
    (``input: [1]`` is a list whose element 0 is wrong, not "a string expected").
    """
    field = errors[0]["loc"][:1]
    candidates = [e for e in errors if e["loc"][:1] == field]
    return max(candidates, key=lambda e: len(_path(e["loc"])))


def format_loc(loc: tuple[int | str, ...]) -> str:
    """``("input", 0, "content")`` -> ``input[0].content`` (union member names dropped)."""
    out = ""
    for part in _path(loc):
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            out += f".{part}" if out else part
    return out or "body"


# How pydantic names the member of a union in ``loc``: its type (``str``, ``list[...]``,
# ``literal[...]``, ``function-after[...]``) or its model class (``ConversationRef``).
_SCALAR_TAGS = frozenset({"str", "int", "float", "bool", "bytes", "none", "dict", "list"})


def _path(loc: tuple[int | str, ...]) -> list[int | str]:
    return [
        part
        for part in loc
        if isinstance(part, int)
        or not (part in _SCALAR_TAGS or "[" in part or (part[:1].isupper() and part.isidentifier()))
    ]


def _too_large(limit: int) -> RequestTooLargeError:
    return RequestTooLargeError(f"The request body exceeds the limit of {limit} bytes.")
