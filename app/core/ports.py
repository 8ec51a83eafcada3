"""Interfaces the core depends on; adapters in upstream/, store/ implement them (the tool
interface, which tools/ implements, is ``core.tools``)."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

from app.protocol.json_types import JsonObject


@dataclass(frozen=True, slots=True)
class RawReply:
    """An upstream answer passed to the client as it came (``GET /v1/models``)."""

    status_code: int
    content_type: str
    body: bytes


@dataclass(frozen=True, slots=True)
class RawStream:
    """An upstream answer streamed to the client as it comes (``/v1/chat/completions``);
    ``close`` releases the connection, and stops the upstream when the body was not read out."""

    status_code: int
    content_type: str
    chunks: AsyncIterator[bytes]
    close: Callable[[], Awaitable[None]]


@runtime_checkable
class ChatCompletionsForwarder(Protocol):
    """An upstream that takes ``POST /v1/chat/completions`` bodies unchanged: ``body`` as the
    client sent it, ``parsed`` its JSON."""

    async def forward_chat_completions(
        self, body: bytes, parsed: JsonObject, headers: Mapping[str, str]
    ) -> RawStream: ...


@runtime_checkable
class UpstreamReadiness(Protocol):
    """Several upstreams behind one: whether each answers, by name."""

    async def readiness(self) -> dict[str, bool]: ...


@dataclass(frozen=True, slots=True)
class CircuitReport:
    """One upstream's circuit breaker as ``/ready`` shows it: ``state`` "closed", "open" (its
    requests fail fast) or "half_open" (the next one is a trial), and the seconds until it lets
    a request through again."""

    state: str
    retry_after: float


@runtime_checkable
class UpstreamCircuits(Protocol):
    """Upstreams with circuit breakers: each one's circuit, by name."""

    def circuits(self) -> dict[str, CircuitReport]: ...


@dataclass(frozen=True, slots=True)
class PoolReport:
    """One upstream's connection pool: its ``limit`` (``max_connections``; 0: none) and how
    many requests wait for a connection now, the pool full."""

    limit: int
    waiting: int


# Told the upstream's name and the seconds a request waited for a connection of its pool.
PoolWaitObserver = Callable[[str, float], None]


@runtime_checkable
class UpstreamPools(Protocol):
    """Upstreams with connection pools: each one's pool by name, and its waits as they end."""

    def pools(self) -> dict[str, PoolReport]: ...

    def watch_pool_waits(self, observer: PoolWaitObserver) -> Callable[[], None]:
        """Call ``observer`` after every wait for a connection; returns what stops it."""
        ...


@runtime_checkable
class StoreReadiness(Protocol):
    """A store that can say whether it can serve (``GET /ready``): a cheap round trip, bounded
    in time; ``None`` when it can, else a short reason an operator may be shown (never a
    driver's error text)."""

    async def readiness_problem(self) -> str | None: ...


class UpstreamEventStream(Protocol):
    """Parsed upstream stream events; ``aclose`` releases the connection (and cancels upstream)."""

    def __aiter__(self) -> AsyncIterator[JsonObject]: ...

    async def aclose(self) -> None: ...


class SingleResponseStream:
    """A complete Response (a non-streaming answer) as the one terminal event of a stream."""

    def __init__(self, response: JsonObject) -> None:
        self._response = response

    def __aiter__(self) -> AsyncIterator[JsonObject]:
        return self._events()

    async def _events(self) -> AsyncIterator[JsonObject]:
        status = self._response.get("status") or "completed"
        kind = {"incomplete": "response.incomplete", "failed": "response.failed"}.get(
            status, "response.completed"
        )
        yield {"type": kind, "response": self._response}

    async def aclose(self) -> None:
        return None


class Upstream(Protocol):
    """An inference server that answers Responses API requests.

    ``headers`` carries tracing headers and, as ``authorization``, the client's own credential
    when it has one (``Principal.client_credential``: never a gateway key); an upstream sends
    that credential only when it is configured to (``forward_client_key``), else its own key.
    Errors are raised as ``app.errors.UpstreamError`` subclasses before any event is yielded;
    a failure after that surfaces from the iterator as the same exceptions.
    """

    async def create_response(self, body: JsonObject, headers: Mapping[str, str]) -> JsonObject:
        """Non-streaming ``POST /v1/responses``: the upstream's Response object."""
        ...

    async def stream_response(
        self, body: JsonObject, headers: Mapping[str, str]
    ) -> UpstreamEventStream:
        """Streaming ``POST /v1/responses``; returns once the upstream accepted the request."""
        ...

    async def list_models(self, headers: Mapping[str, str]) -> RawReply: ...

    async def check_ready(self) -> bool:
        """Whether the upstream answers its health endpoint."""
        ...

    async def aclose(self) -> None: ...


@dataclass(frozen=True, slots=True)
class TokenCount:
    """The input tokens of a request: ``exact`` when the upstream's own tokenizer counted them
    (vLLM's and SGLang's ``POST /tokenize``), else an estimate (tiktoken)."""

    tokens: int
    exact: bool


@runtime_checkable
class TokenCounter(Protocol):
    """An upstream that counts a request's input tokens and knows its models' context windows
    (``core.context_window`` uses it for ``truncation`` and ``/v1/responses/input_tokens``)."""

    async def count_input_tokens(self, body: JsonObject, headers: Mapping[str, str]) -> TokenCount:
        """The tokens of ``body`` (a Responses request whose ``input`` is a list of items) as
        the model would see them: instructions, input and tools, rendered by its template."""
        ...

    def configured_window(self, model: str) -> int | None:
        """The context window configured for ``model`` (no I/O); None when none is."""
        ...

    async def context_window(self, model: str, headers: Mapping[str, str]) -> int | None:
        """The context window of ``model``: the configured one, else the upstream's
        ``max_model_len``, cached per model; None when unknown."""
        ...


# ----------------------------------------------------------------------------- state


@dataclass(frozen=True, slots=True)
class StoredResponse:
    """A persisted response: the object returned to the client and its continuation checkpoint.

    ``checkpoint_ids`` is the ordered list of item ids a continuation starts from: the history
    the response was generated from, then its own input, then its output. ``input_item_ids`` is
    its own input only (``GET /v1/responses/{id}/input_items``). ``root_id`` is the first
    response of its ``previous_response_id`` chain (its own id for a root): the chain's tool
    engine session id.
    """

    id: str
    response: JsonObject
    checkpoint_ids: list[str]
    input_item_ids: list[str]
    conversation_id: str | None
    created_at: int
    root_id: str


@dataclass(frozen=True, slots=True)
class StoredConversation:
    id: str
    created_at: int
    metadata: dict[str, str]

    def to_object(self) -> JsonObject:
        return {
            "id": self.id,
            "object": "conversation",
            "created_at": self.created_at,
            "metadata": self.metadata,
        }


@dataclass(frozen=True, slots=True)
class NewResponse:
    """What ``ResponseStore.save_response`` persists, in one transaction.

    ``new_items`` are items not stored yet (the request's input items that did not reference an
    existing item, and the output); every id in ``input_item_ids`` and ``output`` is either in
    ``new_items`` or already stored. With ``conversation_id``, the input then the output item
    ids are appended to that conversation. ``root_id`` is the first response of the chain it
    continues (``previous_response_id``; None: it is its own root).
    """

    response: JsonObject
    history_ids: list[str]
    input_item_ids: list[str]
    new_items: list[JsonObject]
    conversation_id: str | None
    root_id: str | None = None


@dataclass(frozen=True, slots=True)
class Page:
    """One page of a list endpoint, in the order asked for."""

    items: list[JsonObject]
    has_more: bool


class ResponseStore(Protocol):
    """Persistence of responses, items and conversations (``store.sql.SqlResponseStore``).

    Items are stored once, by id; a response keeps its checkpoint as an ordered list of item
    ids and a conversation its ordered list of item ids, so rehydration is one bulk read.
    Methods that name a missing response or conversation return ``None`` / ``False``; the
    other outcomes a caller handles are raised as the ``app.core.store_errors`` each method
    names, never as ``KeyError`` or ``ValueError`` (those are bugs). ``aclose`` releases the
    store's connections.

    Tenancy (``core.tenancy``): every method takes the caller's ``tenant``; what it writes
    belongs to that tenant, and it reads only that tenant's objects: another tenant's response,
    conversation or item is missing, exactly as an unknown id is. Item ids are the tenant's own
    (two tenants may each store an item ``msg_1``); id lists (checkpoints, conversations)
    resolve within the tenant.
    """

    async def get_response(self, response_id: str, *, tenant: str) -> StoredResponse | None: ...

    async def load_items(self, item_ids: list[str], *, tenant: str) -> list[JsonObject]:
        """The items with these ids, in this order (one query); missing ids are skipped."""
        ...

    async def existing_item_ids(self, item_ids: list[str], *, tenant: str) -> set[str]:
        """Which of these ids are already stored."""
        ...

    async def save_response(self, new: NewResponse, *, tenant: str) -> None:
        """Raises ``ConversationNotFoundError`` when ``new.conversation_id`` is gone (or is
        another tenant's; nothing is written)."""
        ...

    async def delete_response(self, response_id: str, *, tenant: str) -> bool: ...

    async def list_input_items(
        self, response_id: str, *, tenant: str, after: str | None, limit: int, order: str
    ) -> Page | None:
        """``None`` when the response does not exist; raises ``UnknownCursorError`` for an
        unknown ``after`` id."""
        ...

    async def create_conversation(
        self, metadata: dict[str, str], items: list[JsonObject], *, tenant: str
    ) -> StoredConversation:
        """``items`` are complete (ids assigned); ids already stored are referenced, not copied."""
        ...

    async def get_conversation(
        self, conversation_id: str, *, tenant: str
    ) -> StoredConversation | None: ...

    async def update_conversation(
        self, conversation_id: str, metadata: dict[str, str], *, tenant: str
    ) -> StoredConversation | None: ...

    async def delete_conversation(self, conversation_id: str, *, tenant: str) -> bool: ...

    async def conversation_items(
        self, conversation_id: str, *, tenant: str
    ) -> list[JsonObject] | None:
        """Every item of the conversation in order (one query); ``None`` if it does not exist."""
        ...

    async def append_conversation_items(
        self, conversation_id: str, items: list[JsonObject], *, tenant: str
    ) -> list[JsonObject] | None:
        """Append items (complete, ids assigned; already-stored ids are referenced); returns the
        stored items in order; ``None`` when the conversation does not exist. Raises
        ``ItemAlreadyInConversationError`` when an item is already in the conversation
        (OpenAI's ``item_already_in_conversation``; nothing is written)."""
        ...

    async def list_conversation_items(
        self, conversation_id: str, *, tenant: str, after: str | None, limit: int, order: str
    ) -> Page | None:
        """``None`` when the conversation does not exist; raises ``UnknownCursorError`` for an
        unknown ``after`` id."""
        ...

    async def get_conversation_item(
        self, conversation_id: str, item_id: str, *, tenant: str
    ) -> JsonObject | None: ...

    async def delete_conversation_item(
        self, conversation_id: str, item_id: str, *, tenant: str
    ) -> bool: ...

    async def aclose(self) -> None: ...
