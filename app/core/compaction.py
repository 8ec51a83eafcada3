"""Compaction items: the gateway's opaque ``encrypted_content``, and lowering them for upstreams.

A ``compaction`` item (``POST /v1/responses/compact``) carries a summary of the conversation
the client must not need to read, and that the gateway must be able to read back when the item
returns as input. The gateway writes ``encrypted_content`` as a versioned, signed token:

    rgc1.<base64url(zlib(JSON {"summary": ...}))>.<base64url(HMAC-SHA256(key, "rgc1." + body))>

It is signed, not encrypted: the summary is opaque by contract, not secret from whoever can
decode base64 (it is the client's own conversation). A token whose signature does not match
(edited, or written under another key) is refused with a 400; an item with another prefix is
not the gateway's (OpenAI's own, say) and passes through only to an upstream that compacts
natively (``NativeCompactor``).

Before a round goes upstream, ``CompactionLowering`` replaces each of the gateway's compaction
items by a user message that carries the summary, what every upstream kind understands; the
stored input and history keep the items as the client sent them.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import json
import secrets
import zlib
from collections.abc import Mapping
from typing import Protocol, runtime_checkable

from app.errors import InvalidRequestError
from app.protocol.json_types import JsonObject

COMPACTION_TYPE = "compaction"
TOKEN_VERSION = "rgc1"
# The text that introduces a summary where an upstream sees it (a user message).
SUMMARY_PREFIX = (
    "The earlier part of this conversation was compacted. Summary of it, written for you to "
    "continue from:\n\n"
)


class InvalidCompactionError(ValueError):
    """A token the gateway did not write, or one modified since."""


@runtime_checkable
class NativeCompactor(Protocol):
    """An upstream (or the router over several) that may serve ``/v1/responses/compact``
    itself, per model (``native_compact`` in ``[[upstreams]]``)."""

    def compacts_natively(self, model: str | None) -> bool:
        """Whether the upstream serving ``model`` serves ``/v1/responses/compact``."""
        ...

    async def compact_natively(self, body: JsonObject, headers: Mapping[str, str]) -> JsonObject:
        """Forward the compact request as it came; the upstream's answer as it came."""
        ...


class CompactionCodec:
    """Writes and reads the ``encrypted_content`` of the gateway's compaction items."""

    __slots__ = ("_key",)

    def __init__(self, key: bytes) -> None:
        if len(key) < 16:
            raise ValueError("the compaction key must be at least 16 bytes")
        self._key = key

    @classmethod
    def ephemeral(cls) -> CompactionCodec:
        """A codec with a random key: its tokens do not survive the process (tests, and a
        service built without a configured key)."""
        return cls(secrets.token_bytes(32))

    def seal(self, summary: str) -> str:
        payload = zlib.compress(json.dumps({"summary": summary}).encode())
        body = f"{TOKEN_VERSION}.{_b64(payload)}"
        return f"{body}.{_b64(self._mac(body))}"

    def open(self, token: str) -> str:
        """The summary a token carries; ``InvalidCompactionError`` when it is not one the
        gateway wrote under this key, unmodified."""
        version, _, rest = token.partition(".")
        payload, _, signature = rest.partition(".")
        if version != TOKEN_VERSION or not payload or not signature:
            raise InvalidCompactionError("not a compaction token of this gateway")
        body = f"{version}.{payload}"
        try:
            valid = hmac.compare_digest(_unb64(signature), self._mac(body))
            data = json.loads(zlib.decompress(_unb64(payload))) if valid else None
        except (binascii.Error, zlib.error, ValueError) as exc:
            raise InvalidCompactionError("malformed compaction token") from exc
        if not valid:
            raise InvalidCompactionError("the compaction token's signature does not match")
        summary = data.get("summary") if isinstance(data, dict) else None
        if not isinstance(summary, str):
            raise InvalidCompactionError("the compaction token carries no summary")
        return summary

    def _mac(self, body: str) -> bytes:
        return hmac.new(self._key, body.encode(), hashlib.sha256).digest()


def is_gateway_token(token: object) -> bool:
    """Whether ``token`` claims to be one of the gateway's (its version prefix)."""
    return isinstance(token, str) and token.startswith(f"{TOKEN_VERSION}.")


def summary_message(summary: str) -> JsonObject:
    """What an upstream sees in place of a compaction item."""
    return {
        "type": "message",
        "role": "user",
        "content": [{"type": "input_text", "text": SUMMARY_PREFIX + summary}],
    }


class CompactionLowering:
    """Checks the compaction items of a request and lowers them for its upstream.

    The gateway's latest compaction item stands for everything before it but the user's
    messages (what ``/v1/responses/compact`` keeps): those earlier items are pruned, then each
    of the gateway's compaction items is replaced by its summary. ``native``: the upstream that
    serves the request's model compacts natively, so compaction items that are not the
    gateway's are passed on to it untouched (and prune nothing: the upstream reads them).
    """

    __slots__ = ("_codec", "_native")

    def __init__(self, codec: CompactionCodec, *, native: bool) -> None:
        self._codec = codec
        self._native = native

    @property
    def native(self) -> bool:
        return self._native

    def check(self, items: list[JsonObject], param: str) -> bool:
        """Whether ``items`` hold a compaction item; a 400 naming ``param[index]`` for one the
        gateway cannot use."""
        found = False
        for index, item in enumerate(items):
            if item.get("type") == COMPACTION_TYPE:
                found = True
                self._summary(item, f"{param}[{index}]")
        return found

    def lower(self, items: list[JsonObject], param: str) -> list[JsonObject]:
        """``items`` pruned and with the gateway's compaction items replaced by summaries."""
        return self.lower_split([], items, "", param)[1]

    def lower_split(
        self, history: list[JsonObject], new: list[JsonObject], history_param: str, param: str
    ) -> tuple[list[JsonObject], list[JsonObject]]:
        """``lower`` over the history then the new input, kept apart (a compaction item in
        either prunes the history too)."""
        sides = [*((item, False, i) for i, item in enumerate(history))]
        sides += [(item, True, i) for i, item in enumerate(new)]
        last = max((k for k, side in enumerate(sides) if self._prunes(side[0])), default=-1)
        if last < 0 and not any(side[0].get("type") == COMPACTION_TYPE for side in sides):
            return history, new
        lowered: tuple[list[JsonObject], list[JsonObject]] = ([], [])
        for position, (item, is_new, index) in enumerate(sides):
            if position < last and not is_user_message(item):
                continue
            if item.get("type") == COMPACTION_TYPE:
                where = f"{param if is_new else history_param}[{index}]"
                summary = self._summary(item, where)
                item = item if summary is None else summary_message(summary)
            lowered[is_new].append(item)
        return lowered

    def prune(self, items: list[JsonObject]) -> list[JsonObject]:
        """``items`` without what the latest of the gateway's compaction items stands for (the
        compaction items themselves kept, unlowered)."""
        last = max((k for k, item in enumerate(items) if self._prunes(item)), default=-1)
        return [item for k, item in enumerate(items) if k >= last or is_user_message(item)]

    def _prunes(self, item: JsonObject) -> bool:
        return item.get("type") == COMPACTION_TYPE and is_gateway_token(
            item.get("encrypted_content")
        )

    def _summary(self, item: JsonObject, where: str) -> str | None:
        """The item's summary; ``None`` for a foreign item passed on to a native upstream."""
        token = item.get("encrypted_content")
        if not is_gateway_token(token):
            if self._native and isinstance(token, str):
                return None
            raise InvalidRequestError(
                f"Invalid '{where}': the compaction item was not written by this gateway's "
                "/v1/responses/compact.",
                param=f"{where}.encrypted_content",
                code="invalid_encrypted_content",
            )
        assert isinstance(token, str)
        try:
            return self._codec.open(token)
        except InvalidCompactionError as exc:
            raise InvalidRequestError(
                f"Invalid '{where}.encrypted_content': the compaction item was modified or "
                f"written under another key ({exc}).",
                param=f"{where}.encrypted_content",
                code="invalid_encrypted_content",
            ) from None


def has_compaction(items: list[JsonObject]) -> bool:
    """Whether any of ``items`` is a compaction item (the cheap test of the hot path)."""
    return any(item.get("type") == COMPACTION_TYPE for item in items)


def is_user_message(item: JsonObject) -> bool:
    return item.get("type", "message") == "message" and item.get("role") == "user"


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def _unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))
