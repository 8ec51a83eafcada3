"""Turning a store's page lookup into the API's errors, shared by responses and conversations."""

from __future__ import annotations

from collections.abc import Awaitable

from app.core.ports import Page
from app.core.store_errors import UnknownCursorError
from app.errors import CursorNotFoundError, GatewayError


async def page_or_raise(
    lookup: Awaitable[Page | None], after: str | None, missing: GatewayError
) -> Page:
    """The page; ``missing`` when its owner does not exist; OpenAI's 404 for an unknown cursor
    (the store raises ``UnknownCursorError`` for an ``after`` id that is not in the list)."""
    try:
        page = await lookup
    except UnknownCursorError:
        raise CursorNotFoundError(f"No item found with id '{after}'", param="after") from None
    if page is None:
        raise missing
    return page
