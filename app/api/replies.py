"""What the JSON routes share: the request's body and the JSON / list replies."""

from __future__ import annotations

from typing import Any

import orjson
from starlette.requests import Request
from starlette.responses import Response

from app.api.body import read_json_object
from app.api.pagination import list_object
from app.api.state import gateway_state
from app.core.ports import Page


async def request_object(request: Request, *, optional: bool = False) -> dict[str, Any]:
    """The JSON body (size-limited); an empty body is ``{}`` where every field is optional."""
    if optional and request.headers.get("content-length") == "0":
        return {}
    return await read_json_object(request, gateway_state(request).settings.max_body_bytes)


def json_reply(data: Any) -> Response:
    return Response(orjson.dumps(data), media_type="application/json")


def list_reply(page: Page) -> Response:
    return json_reply(list_object(page))
