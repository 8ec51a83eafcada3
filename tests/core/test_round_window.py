"""``core.context_window.RoundWindow``: the window checked again before a later tool round.
``auto`` drops the fewest oldest items but never the current turn (from the user message that
opened it: ``turn_start``); ``disabled`` and a turn too long by itself end the response with
``context_length_exceeded``; without a known window nothing is counted."""

from __future__ import annotations

from app.core.context_window import ContextWindow, RoundWindow, turn_start
from app.protocol.json_types import JsonObject
from tests.core.test_context_window import BODY, WordCounter, call, output, user

SYSTEM: JsonObject = {"type": "message", "role": "system", "content": "s"}


def conversation() -> list[JsonObject]:
    """Old turns (20 words each), the current turn's user message (2), then the response's
    own call and its output (index 5 on: ``own_from``)."""
    return [
        SYSTEM,
        user("old " * 20),
        {"type": "message", "role": "assistant", "content": "answer " * 20},
        user("old2 " * 20),
        user("do it"),
        call("c1"),
        {**output("c1"), "content": "result " * 20},
    ]


def round_window(counter: WordCounter, truncation: str | None) -> RoundWindow:
    return RoundWindow(ContextWindow(counter), {}, truncation=truncation, max_output_tokens=None)


def test_the_turn_starts_at_its_user_message() -> None:
    items = conversation()
    assert turn_start(items, 5) == 4
    assert turn_start([call("c"), output("c")], 0) == 0
    # No user message before the response's own items: the turn is those items.
    assert turn_start([SYSTEM, call("c"), output("c")], 1) == 1


async def test_auto_drops_old_turns_never_the_current_one() -> None:
    items = conversation()
    counter = WordCounter(None, discovered=45)
    fitted = await round_window(counter, "auto")(BODY, items, 5)
    assert fitted.error is None
    # The fewest oldest items: the first two old turns go (the third still fits).
    assert fitted.items == [SYSTEM, items[3], *items[4:]]


async def test_auto_fails_when_the_turn_alone_does_not_fit() -> None:
    counter = WordCounter(None, discovered=15)  # the turn alone counts 22
    fitted = await round_window(counter, "auto")(BODY, conversation(), 5)
    assert fitted.error is not None
    assert fitted.error["code"] == "context_length_exceeded"
    assert fitted.items == conversation()


async def test_disabled_fails_over_a_configured_window() -> None:
    fitted = await round_window(WordCounter(45), None)(BODY, conversation(), 5)
    assert fitted.error is not None and fitted.error["code"] == "context_length_exceeded"
    under = await round_window(WordCounter(1000), None)(BODY, conversation(), 5)
    assert under.error is None and under.items == conversation()


async def test_without_a_window_nothing_is_counted() -> None:
    counter = WordCounter(None, discovered=10)
    fitted = await round_window(counter, "disabled")(BODY, conversation(), 5)
    assert fitted.error is None and counter.counted == []
