"""The context window: ``truncation`` and the input token count of a request.

``ContextWindow.fit`` runs before a create goes upstream, on the rehydrated input. It checks
only when a window is known: with ``truncation: "auto"`` the upstream's (configured, else its
``max_model_len``, cached per model), with ``"disabled"`` (the default) only a configured one,
so a request that asks nothing of a gateway without a configured window pays nothing. The
budget is the window less ``max_output_tokens`` (as OpenAI trims "earlier because the API
subtracts the model's maximum output allowance"). Too long: ``"disabled"`` answers OpenAI's 400
``context_length_exceeded``; ``"auto"`` drops the oldest items, never splitting a call from its
output (items sharing a ``call_id``, an approval request and its response) and keeping
``system``/``developer`` messages and ``instructions``, so that the rest fits (a binary search
over the allowed cuts: about log2(items) counts). Counting goes through the ``TokenCounter``
port (the upstream's tokenizer, or an estimate); a request whose serialized size already fits
(a token covers at least one byte) is not counted at all.

``RoundWindow`` checks again before each later round of a tool loop, whose input grows with
the model's calls and their outputs (the loop calls it once tool results were fed, never for
a round-1 input ``fit`` already checked; the service gives the loop one only when ``checks``
says a window may be known, so the hot path pays nothing). Over the window, ``"auto"`` drops
the oldest items as ``fit`` does, but never the current turn's own items: the user message
that opened the turn and everything after it (the client's new input, the model's calls and
their outputs in this response). ``"disabled"``, or a turn too long by itself, ends the
response as failed with OpenAI's ``context_length_exceeded`` (a ``response.failed`` event in
a stream).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass, replace

import orjson

from app.core.history import History
from app.core.ports import TokenCount, TokenCounter
from app.errors import GatewayError, InvalidRequestError, NotFoundError
from app.protocol.json_types import JsonObject
from app.protocol.requests import ParsedRequest

# Tokens a chat template may add around the serialized request (role markers, the tool
# preamble, the generation prompt): fixed, then per item.
_TEMPLATE_MARGIN = 1024
_PER_ITEM_MARGIN = 16
_KEPT_ROLES = frozenset({"system", "developer"})

logger = logging.getLogger(__name__)


def context_length_exceeded() -> InvalidRequestError:
    """OpenAI's answer to an input longer than the model's context window."""
    return InvalidRequestError(
        "Your input exceeds the context window of this model. "
        "Please adjust your input and try again.",
        param="input",
        code="context_length_exceeded",
    )


@dataclass(frozen=True, slots=True)
class Fitted:
    """The input that fits (``items``, a subsequence of the input in order) and its count
    (None when it was not counted: it fits by its size)."""

    items: list[JsonObject]
    count: TokenCount | None
    dropped: int


class ContextWindow:
    """``truncation`` and token counts over one ``TokenCounter`` (None: nothing is counted
    or checked)."""

    def __init__(self, counter: TokenCounter | None) -> None:
        self.counter = counter

    def checks(self, model: object, truncation: str | None) -> bool:
        """Whether ``fit`` may check anything (no I/O): the hot path's one question when the
        request asks no truncation and no window is configured."""
        counter = self.counter
        if counter is None or not isinstance(model, str):
            return False
        return truncation == "auto" or counter.configured_window(model) is not None

    async def count(
        self,
        body: JsonObject,
        items: list[JsonObject],
        headers: Mapping[str, str],
        *,
        truncation: str | None,
    ) -> TokenCount:
        """``POST /v1/responses/input_tokens``: the tokens of ``body`` with ``items`` as its
        input, after ``"auto"`` truncation when a window is known."""
        counter = self.counter
        if counter is None:
            raise NotFoundError(
                "The upstream serving this model cannot count tokens.",
                code="unsupported_endpoint",
            )
        if truncation == "auto":
            fitted = await self.fit(
                body, items, headers, truncation=truncation, max_output_tokens=None
            )
            if fitted is not None and fitted.count is not None:
                return fitted.count
        return await counter.count_input_tokens({**body, "input": items}, headers)

    async def fit(
        self,
        body: JsonObject,
        items: list[JsonObject],
        headers: Mapping[str, str],
        *,
        truncation: str | None,
        max_output_tokens: int | None,
    ) -> Fitted | None:
        """What of ``items`` (the rehydrated input of ``body``) fits the model's window; None
        when nothing is checked (no counter or no known window). Raises OpenAI's
        ``context_length_exceeded`` when it does not fit and may not be truncated (or cannot
        be: what is left after every allowed cut is still too long)."""
        counter = self.counter
        model = body.get("model")
        if counter is None or not isinstance(model, str):
            return None
        auto = truncation == "auto"
        if auto:
            window = await counter.context_window(model, headers)
        else:
            window = counter.configured_window(model)
        if window is None:
            return None
        budget = window - (max_output_tokens or 0)
        body = {**body, "input": items}
        if _fits_by_size(body, len(items), budget):
            return Fitted(items, None, 0)
        count = await counter.count_input_tokens(body, headers)
        if count.tokens <= budget:
            return Fitted(items, count, 0)
        if not auto:
            raise context_length_exceeded()
        return await _truncate(counter, body, headers, budget)


async def fit_history(
    window: ContextWindow, request: ParsedRequest, history: History, headers: Mapping[str, str]
) -> History:
    """``history`` as it fits the model's window: itself, or a copy without the oldest items
    ``truncation: "auto"`` dropped (what the upstream sees; the stored response keeps all)."""
    params = request.params
    fitted = await window.fit(
        request.body,
        history.upstream_input(),
        headers,
        truncation=params.truncation,
        max_output_tokens=params.max_output_tokens,
    )
    if fitted is None or not fitted.dropped:
        return history
    kept = {id(item) for item in fitted.items}
    return replace(
        history,
        history_items=[item for item in history.history_items if id(item) in kept],
        input_items=[item for item in history.input_items if id(item) in kept],
    )


@dataclass(frozen=True, slots=True)
class RoundFit:
    """The input of a later round of a tool loop: ``items`` to send, or the ``error`` that
    ends the response (``failed``)."""

    items: list[JsonObject]
    error: JsonObject | None = None


class RoundWindow:
    """``truncation`` before each later round of one response's tool loop (module docstring)."""

    def __init__(
        self,
        window: ContextWindow,
        headers: Mapping[str, str],
        *,
        truncation: str | None,
        max_output_tokens: int | None,
    ) -> None:
        self._window = window
        self._headers = headers
        self._auto = truncation == "auto"
        self._max_output_tokens = max_output_tokens

    async def __call__(self, body: JsonObject, items: list[JsonObject], own_from: int) -> RoundFit:
        """What of ``items`` (the round's input; the response's own items from ``own_from``)
        goes upstream with ``body``."""
        counter, model = self._window.counter, body.get("model")
        if counter is None or not isinstance(model, str):
            return RoundFit(items)
        if self._auto:
            window = await counter.context_window(model, self._headers)
        else:
            window = counter.configured_window(model)
        if window is None:
            return RoundFit(items)
        budget = window - (self._max_output_tokens or 0)
        full = {**body, "input": items}
        if _fits_by_size(full, len(items), budget):
            return RoundFit(items)
        try:
            count = await counter.count_input_tokens(full, self._headers)
        except GatewayError as exc:  # unchecked: the upstream refuses what does not fit
            logger.warning("no token count before a tool round: %s", exc)
            return RoundFit(items)
        if count.tokens <= budget:
            return RoundFit(items)
        try:
            if not self._auto:
                raise context_length_exceeded()
            start = turn_start(items, own_from)
            cuts = [cut for cut in allowed_cuts(items) if cut <= start]
            fitted = await _truncate(counter, full, self._headers, budget, cuts)
        except InvalidRequestError as exc:
            return RoundFit(items, {"code": exc.code, "message": exc.message})
        logger.info("truncation dropped %d items before a tool round", fitted.dropped)
        return RoundFit(fitted.items)


def turn_start(items: list[JsonObject], own_from: int) -> int:
    """Where the current turn begins: the last user message before the response's own items
    (``own_from``), else ``own_from``."""
    for index in range(min(own_from, len(items)) - 1, -1, -1):
        item = items[index]
        if item.get("role") == "user" and item.get("type", "message") == "message":
            return index
    return own_from


async def _truncate(
    counter: TokenCounter,
    body: JsonObject,
    headers: Mapping[str, str],
    budget: int,
    cuts: list[int] | None = None,
) -> Fitted:
    """The fewest oldest items dropped so that the rest fits (binary search over the cuts:
    ``allowed_cuts`` unless given)."""
    items: list[JsonObject] = body["input"]
    cuts = allowed_cuts(items) if cuts is None else cuts
    best: Fitted | None = None
    low, high = 0, len(cuts) - 1
    while low <= high:
        middle = (low + high) // 2
        kept = kept_items(items, cuts[middle])
        count = await counter.count_input_tokens({**body, "input": kept}, headers)
        if count.tokens <= budget:
            best = Fitted(kept, count, len(items) - len(kept))
            high = middle - 1
        else:
            low = middle + 1
    if best is None:
        raise context_length_exceeded()
    return best


def allowed_cuts(items: list[JsonObject]) -> list[int]:
    """The cut points ``c`` (drop ``items[:c]``), ascending, that split no call from its
    output and leave at least the last item."""
    first: dict[str, int] = {}
    last: dict[str, int] = {}
    for index, item in enumerate(items):
        for key in _pair_keys(item):
            first.setdefault(key, index)
            last[key] = index
    blocked = [0] * (len(items) + 1)
    for key, start in first.items():
        end = last[key]
        if end > start:  # cuts start+1 .. end would split the pair
            blocked[start + 1] += 1
            blocked[end + 1] -= 1
    cuts: list[int] = []
    open_pairs = 0
    for cut in range(1, len(items)):
        open_pairs += blocked[cut]
        if open_pairs == 0:
            cuts.append(cut)
    return cuts


def kept_items(items: list[JsonObject], cut: int) -> list[JsonObject]:
    """``items[cut:]``, after the ``system`` and ``developer`` messages of the dropped part."""
    kept = [item for item in items[:cut] if item.get("role") in _KEPT_ROLES]
    return [*kept, *items[cut:]]


def _pair_keys(item: JsonObject) -> list[str]:
    """What ties an item to its partner: a call's ``call_id``, an MCP approval's request id."""
    keys: list[str] = []
    call_id = item.get("call_id")
    if isinstance(call_id, str) and call_id:
        keys.append(f"call:{call_id}")
    kind = item.get("type")
    if kind == "mcp_approval_request" and isinstance(item.get("id"), str):
        keys.append(f"approval:{item['id']}")
    elif kind == "mcp_approval_response" and isinstance(item.get("approval_request_id"), str):
        keys.append(f"approval:{item['approval_request_id']}")
    return keys


def _fits_by_size(body: JsonObject, item_count: int, budget: int) -> bool:
    """Whether the request fits whatever the tokenizer: a token covers at least one byte of
    text, so the serialized body plus the template's margin bounds the count."""
    limit = budget - _TEMPLATE_MARGIN - _PER_ITEM_MARGIN * item_count
    if limit <= 0:
        return False
    return len(orjson.dumps(body)) <= limit
