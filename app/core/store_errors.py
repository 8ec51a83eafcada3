"""The errors the store ports (``app.core.ports``) declare.

A store answers "that does not exist" or "that is already there" with one of these, never with
a ``KeyError`` or a ``ValueError``: the services turn exactly these into the API's 404 and 400,
so a ``KeyError`` raised by a bug anywhere (the store included) stays a bug, a 500.
"""

from __future__ import annotations


class StoreError(Exception):
    """Base of the errors a store port raises by contract."""


class StoredObjectNotFoundError(StoreError):
    """An object a store call needs does not exist: ``kind`` says what was looked for, ``object_id``
    its id."""

    def __init__(self, kind: str, object_id: str) -> None:
        super().__init__(f"{kind} {object_id!r} not found")
        self.kind = kind
        self.object_id = object_id


class UnknownCursorError(StoredObjectNotFoundError):
    """A list's ``after`` (or ``before``) id names no object of that list."""

    def __init__(self, cursor: str) -> None:
        super().__init__("cursor", cursor)


class ConversationNotFoundError(StoredObjectNotFoundError):
    """``save_response``: the conversation to append to is gone (nothing was written)."""

    def __init__(self, conversation_id: str) -> None:
        super().__init__("conversation", conversation_id)


class ItemAlreadyInConversationError(StoreError):
    """``append_conversation_items``: an item is already in the conversation (nothing was
    written)."""

    def __init__(self, conversation_id: str) -> None:
        super().__init__(f"an item is already in conversation {conversation_id!r}")
        self.conversation_id = conversation_id
