"""``core.compaction``: the signed token of compaction items, and their lowering."""

from __future__ import annotations

import pytest

from app.core.compact import compact_threshold
from app.core.compaction import (
    SUMMARY_PREFIX,
    CompactionCodec,
    CompactionLowering,
    InvalidCompactionError,
)
from app.errors import InvalidRequestError

KEY = b"k" * 32


def test_a_token_carries_its_summary_back() -> None:
    codec = CompactionCodec(KEY)
    token = codec.seal("the user is Ada ✓")
    assert token.startswith("rgc1.")
    assert "Ada" not in token
    assert codec.open(token) == "the user is Ada ✓"
    # Another process with the same key reads it.
    assert CompactionCodec(KEY).open(token) == "the user is Ada ✓"


@pytest.mark.parametrize(
    "mangle",
    [
        lambda t: t + "x",
        lambda t: t.replace("rgc1.", "rgc2.", 1),
        lambda t: t.rsplit(".", 1)[0],
        lambda t: "rgc1.!!!.???",
        lambda t: "",
    ],
)
def test_a_modified_token_is_refused(mangle: object) -> None:
    codec = CompactionCodec(KEY)
    token = codec.seal("summary")
    with pytest.raises(InvalidCompactionError):
        codec.open(mangle(token))  # type: ignore[operator]


def test_a_token_under_another_key_is_refused() -> None:
    token = CompactionCodec(KEY).seal("summary")
    with pytest.raises(InvalidCompactionError):
        CompactionCodec(b"z" * 32).open(token)


def test_a_short_key_is_refused() -> None:
    with pytest.raises(ValueError, match="16 bytes"):
        CompactionCodec(b"short")


def test_lowering_replaces_the_gateways_items_and_keeps_foreign_ones_for_native_upstreams() -> None:
    codec = CompactionCodec(KEY)
    ours = {"type": "compaction", "id": "cmp_1", "encrypted_content": codec.seal("S")}
    foreign = {"type": "compaction", "encrypted_content": "gAAAA"}
    user = {"type": "message", "role": "user", "content": "hi"}
    native = CompactionLowering(codec, native=True)
    lowered = native.lower([user, ours, foreign], "input")
    assert lowered[0] is user and lowered[2] is foreign
    assert lowered[1]["role"] == "user"
    assert lowered[1]["content"][0]["text"] == SUMMARY_PREFIX + "S"
    assert native.check([user], "input") is False
    assert native.check([user, ours, foreign], "input") is True
    with pytest.raises(InvalidRequestError) as caught:
        CompactionLowering(codec, native=False).lower([user, ours, foreign], "input")
    assert caught.value.param == "input[2].encrypted_content"


def test_the_latest_compaction_stands_for_all_but_the_users_messages_before_it() -> None:
    codec = CompactionCodec(KEY)
    user = {"type": "message", "role": "user", "content": "u1"}
    reply = {"type": "message", "role": "assistant", "content": "a1"}
    call = {"type": "function_call", "call_id": "c", "name": "f", "arguments": "{}"}
    old = {"type": "compaction", "encrypted_content": codec.seal("old")}
    new = {"type": "compaction", "encrypted_content": codec.seal("new")}
    later = {"type": "message", "role": "assistant", "content": "a2"}
    lowering = CompactionLowering(codec, native=False)
    history, current = lowering.lower_split(
        [user, reply, old, call, new, later], [user], "previous_response_id", "input"
    )
    assert history[0] is user
    assert history[1]["content"][0]["text"] == SUMMARY_PREFIX + "new"
    assert history[2:] == [later]
    assert current == [user]
    assert lowering.prune([user, reply, new, later]) == [user, new, later]
    # A compaction item in the new input prunes the history too.
    history, current = lowering.lower_split([user, reply], [new], "conversation", "input")
    assert history == [user]
    assert current[0]["role"] == "user"
    # Nothing to lower: the same lists.
    plain = [user, reply]
    assert lowering.lower_split(plain, plain, "p", "i") == (plain, plain)


@pytest.mark.parametrize(
    ("entries", "threshold"),
    [
        ([{"type": "compaction", "compact_threshold": 5}], 5),
        ([{"type": "other", "compact_threshold": 5}], None),
        ([{"type": "compaction"}], None),
        ([{"type": "compaction", "compact_threshold": True}], None),
        (None, None),
    ],
)
def test_compact_threshold(entries: object, threshold: int | None) -> None:
    assert compact_threshold({"context_management": entries}) == threshold
