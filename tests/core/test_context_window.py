"""``core.context_window``: where the input may be cut (never between a call and its output, an
approval request and its response), what is kept (system and developer messages), and how
``ContextWindow.fit`` decides with a counter: not at all without a window, not counting a
request that fits by its size, the fewest items dropped with ``auto``, the 400 otherwise."""

from __future__ import annotations

from collections.abc import Mapping

import pytest

from app.core.context_window import ContextWindow, allowed_cuts, kept_items
from app.core.ports import TokenCount
from app.errors import InvalidRequestError
from app.protocol.json_types import JsonObject


def user(text: str) -> JsonObject:
    return {"type": "message", "role": "user", "content": text}


def call(call_id: str) -> JsonObject:
    return {"type": "function_call", "call_id": call_id, "name": "f", "arguments": "{}"}


def output(call_id: str) -> JsonObject:
    return {"type": "function_call_output", "call_id": call_id, "output": "ok"}


def test_parallel_calls_block_every_cut_until_the_last_output() -> None:
    items = [user("a"), call("1"), call("2"), output("1"), output("2"), user("b")]
    assert allowed_cuts(items) == [1, 5]


def test_an_approval_request_stays_with_its_response() -> None:
    items = [
        user("a"),
        {"type": "mcp_approval_request", "id": "mcpr_1", "name": "t", "arguments": "{}"},
        {"type": "mcp_approval_response", "approval_request_id": "mcpr_1", "approve": True},
        user("b"),
    ]
    assert allowed_cuts(items) == [1, 3]


def test_the_last_item_is_never_cut_and_one_item_has_no_cut() -> None:
    assert allowed_cuts([user("a"), user("b"), user("c")]) == [1, 2]
    assert allowed_cuts([user("only")]) == []


def test_system_and_developer_messages_are_kept() -> None:
    items = [
        {"type": "message", "role": "system", "content": "s"},
        user("a"),
        {"type": "message", "role": "developer", "content": "d"},
        user("b"),
        user("c"),
    ]
    assert kept_items(items, 4) == [items[0], items[2], items[4]]


class WordCounter:
    """Counts words of the input's text; ``window`` as configured (or discovered)."""

    def __init__(self, window: int | None, *, discovered: int | None = None) -> None:
        self.window = window
        self.discovered = discovered
        self.counted: list[list[JsonObject]] = []

    async def count_input_tokens(self, body: JsonObject, headers: Mapping[str, str]) -> TokenCount:
        self.counted.append(body["input"])
        return TokenCount(sum(len(str(i.get("content", "")).split()) for i in body["input"]), True)

    def configured_window(self, model: str) -> int | None:
        return self.window

    async def context_window(self, model: str, headers: Mapping[str, str]) -> int | None:
        return self.window if self.window is not None else self.discovered


BODY: JsonObject = {"model": "m"}


async def test_no_window_checks_nothing() -> None:
    counter = WordCounter(None, discovered=10)
    fitted = await ContextWindow(counter).fit(
        BODY, [user("x " * 50)], {}, truncation="disabled", max_output_tokens=None
    )
    assert fitted is None
    assert counter.counted == []


async def test_a_request_small_for_its_window_is_not_counted() -> None:
    counter = WordCounter(100_000)
    fitted = await ContextWindow(counter).fit(
        BODY, [user("hello")], {}, truncation=None, max_output_tokens=None
    )
    assert fitted is not None
    assert fitted.dropped == 0
    assert counter.counted == []


async def test_auto_drops_the_fewest_oldest_items() -> None:
    items = [user(f"turn{n} " * 10) for n in range(16)]
    counter = WordCounter(None, discovered=35)
    fitted = await ContextWindow(counter).fit(
        BODY, items, {}, truncation="auto", max_output_tokens=None
    )
    assert fitted is not None
    assert fitted.items == items[-3:]
    assert fitted.dropped == 13
    assert fitted.count == TokenCount(30, True)
    # The whole input once, then a binary search over the 15 cuts: 4 counts.
    assert len(counter.counted) == 5


async def test_disabled_over_the_window_is_context_length_exceeded() -> None:
    counter = WordCounter(20)
    with pytest.raises(InvalidRequestError) as refused:
        await ContextWindow(counter).fit(
            BODY, [user("w " * 10), user("w " * 15)], {}, truncation=None, max_output_tokens=None
        )
    assert refused.value.code == "context_length_exceeded"
    assert refused.value.param == "input"
