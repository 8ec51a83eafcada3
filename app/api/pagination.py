"""OpenAI's cursor pagination: ``after``, ``limit``, ``order`` in; a ``list`` object out."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from starlette.requests import Request

from app.core.ports import Page
from app.errors import InvalidRequestError

MAX_LIMIT = 100


@dataclass(frozen=True, slots=True)
class PageParams:
    after: str | None
    limit: int
    order: str


def page_params(request: Request, *, default_order: str = "desc") -> PageParams:
    query = request.query_params
    raw_limit = query.get("limit", "20")
    try:
        limit = int(raw_limit)
    except ValueError:
        limit = -1
    if not 1 <= limit <= MAX_LIMIT:
        raise InvalidRequestError(
            f"Invalid 'limit': integer between 1 and {MAX_LIMIT} expected, got '{raw_limit}'.",
            param="limit",
            code="invalid_value",
        )
    order = query.get("order", default_order)
    if order not in ("asc", "desc"):
        raise InvalidRequestError(
            f"Invalid 'order': expected 'asc' or 'desc', got '{order}'.",
            param="order",
            code="invalid_value",
        )
    return PageParams(after=query.get("after") or None, limit=limit, order=order)


def list_object(page: Page) -> dict[str, Any]:
    data = page.items
    return {
        "object": "list",
        "data": data,
        "first_id": data[0].get("id") if data else None,
        "last_id": data[-1].get("id") if data else None,
        "has_more": page.has_more,
    }
