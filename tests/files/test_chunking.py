from __future__ import annotations

from typing import Any

import pytest

from app.files.chunking import (
    Chunk,
    ChunkingStrategyError,
    chunk_text,
    chunk_with_strategy,
    count_tokens,
    get_encoding,
    normalize_chunking_strategy,
)

AUTO = {"type": "static", "static": {"max_chunk_size_tokens": 800, "chunk_overlap_tokens": 400}}


def numbered_text(count: int) -> str:
    """`count` words that are one cl100k token each (" w0 w1 ..." is not: digits split)."""
    words = [" apple", " river", " stone", " cloud", " green", " house", " table", " water"]
    return "".join(words[i % len(words)] for i in range(count))


def test_encoding_is_cl100k_offline_and_cached() -> None:
    encoding = get_encoding()
    assert encoding is get_encoding()
    assert encoding.n_vocab == 100277
    assert encoding.encode_ordinary("hello world") == [15339, 1917]


def test_count_tokens() -> None:
    assert count_tokens("") == 0
    assert count_tokens(numbered_text(57)) == 57
    # Special tokens are plain text, not an error.
    assert count_tokens("<|endoftext|>") > 1


def test_windows_sizes_and_overlap() -> None:
    text = numbered_text(1000)
    chunks = chunk_text(text, max_tokens=300, overlap=100)
    # Windows start at 0, 200, 400, 600, 800 (the last one reaches the end).
    assert [c.tokens for c in chunks] == [300, 300, 300, 300, 200]
    assert [c.position for c in chunks] == [0, 1, 2, 3, 4]
    encoding = get_encoding()
    tokens = encoding.encode_ordinary(text)
    for index, chunk in enumerate(chunks):
        start = index * 200
        assert encoding.encode_ordinary(chunk.text) == tokens[start : start + 300]
    # Consecutive chunks share exactly `overlap` tokens.
    first, second = (encoding.encode_ordinary(c.text) for c in chunks[:2])
    assert first[-100:] == second[:100]


def test_no_overlap_partitions_the_text() -> None:
    text = numbered_text(1000)
    chunks = chunk_text(text, max_tokens=250, overlap=0)
    assert [c.tokens for c in chunks] == [250, 250, 250, 250]
    assert "".join(c.text for c in chunks) == text


def test_short_text_is_one_chunk() -> None:
    assert chunk_text("Just a sentence.", max_tokens=800, overlap=400) == [
        Chunk(text="Just a sentence.", tokens=4, position=0)
    ]


def test_text_exactly_one_window_is_one_chunk() -> None:
    chunks = chunk_text(numbered_text(800), max_tokens=800, overlap=400)
    assert [c.tokens for c in chunks] == [800]


@pytest.mark.parametrize("text", ["", "   \n\t  "])
def test_blank_text_has_no_chunks(text: str) -> None:
    assert chunk_text(text, max_tokens=100, overlap=0) == []


def test_multibyte_characters_cut_by_a_window_do_not_give_garbage() -> None:
    text = "日本語のテキストと絵文字🙂が混ざった文章です。" * 40
    chunks = chunk_text(text, max_tokens=100, overlap=30)
    assert len(chunks) > 3
    for chunk in chunks:
        assert "\ufffd" not in chunk.text
        assert chunk.text.strip()
        assert chunk.text in text


def test_long_text_with_auto_strategy() -> None:
    paragraph = (
        "The harbor authority publishes tide tables, berth assignments and crane schedules. "
        "Vessels larger than forty meters must request a pilot two hours before arrival. "
    )
    text = "\n\n".join(f"Section {i}. {paragraph * 3}" for i in range(300))
    total = count_tokens(text)
    assert total > 20_000
    chunks = chunk_with_strategy(text, None)
    assert all(c.tokens == 800 for c in chunks[:-1])
    assert 400 < chunks[-1].tokens <= 800
    # Windows every 400 tokens until one reaches the end.
    assert len(chunks) == -(-(total - 800) // 400) + 1
    assert chunks[0].text.startswith("Section 0.")
    assert chunks[-1].text.endswith(text[-50:])


def test_chunk_with_a_static_strategy() -> None:
    strategy = {
        "type": "static",
        "static": {"max_chunk_size_tokens": 100, "chunk_overlap_tokens": 0},
    }
    assert [c.tokens for c in chunk_with_strategy(numbered_text(250), strategy)] == [100, 100, 50]


@pytest.mark.parametrize(("max_tokens", "overlap"), [(0, 0), (10, 10), (10, -1)])
def test_chunk_text_rejects_bad_arguments(max_tokens: int, overlap: int) -> None:
    with pytest.raises(ValueError):
        chunk_text("text", max_tokens=max_tokens, overlap=overlap)


# ----------------------------------------------------------------------------- strategy


@pytest.mark.parametrize(
    ("value", "stored"),
    [
        (None, AUTO),
        ({"type": "auto"}, AUTO),
        (AUTO, AUTO),
        (
            {"type": "static", "static": {"max_chunk_size_tokens": 100, "chunk_overlap_tokens": 0}},
            {"type": "static", "static": {"max_chunk_size_tokens": 100, "chunk_overlap_tokens": 0}},
        ),
        (
            {
                "type": "static",
                "static": {"max_chunk_size_tokens": 4096, "chunk_overlap_tokens": 2048},
            },
            {
                "type": "static",
                "static": {"max_chunk_size_tokens": 4096, "chunk_overlap_tokens": 2048},
            },
        ),
        (
            {
                "type": "static",
                "static": {"max_chunk_size_tokens": 301.0, "chunk_overlap_tokens": 150},
            },
            {
                "type": "static",
                "static": {"max_chunk_size_tokens": 301, "chunk_overlap_tokens": 150},
            },
        ),
    ],
)
def test_normalize_valid_strategies(value: Any, stored: Any) -> None:
    assert normalize_chunking_strategy(value) == stored


def static(**fields: Any) -> dict[str, Any]:
    return {"type": "static", "static": fields}


@pytest.mark.parametrize(
    ("value", "param", "message"),
    [
        ("auto", "chunking_strategy", "expected an object, but got a string"),
        ({}, "chunking_strategy.type", "Missing required parameter: 'chunking_strategy.type'"),
        ({"type": "semantic"}, "chunking_strategy.type", "Supported values are: 'auto' and"),
        ({"type": "auto", "static": {}}, "chunking_strategy.static", "Unknown parameter"),
        ({"type": "static"}, "chunking_strategy.static", "Missing required parameter"),
        ({"type": "static", "static": []}, "chunking_strategy.static", "got an array"),
        (
            static(chunk_overlap_tokens=0),
            "chunking_strategy.static.max_chunk_size_tokens",
            "Missing required parameter",
        ),
        (
            static(max_chunk_size_tokens=200),
            "chunking_strategy.static.chunk_overlap_tokens",
            "Missing required parameter",
        ),
        (
            static(max_chunk_size_tokens=99, chunk_overlap_tokens=0),
            "chunking_strategy.static.max_chunk_size_tokens",
            "integer below minimum value. Expected a value >= 100, but got 99 instead.",
        ),
        (
            static(max_chunk_size_tokens=4097, chunk_overlap_tokens=0),
            "chunking_strategy.static.max_chunk_size_tokens",
            "integer above maximum value. Expected a value <= 4096, but got 4097 instead.",
        ),
        (
            static(max_chunk_size_tokens=200, chunk_overlap_tokens=101),
            "chunking_strategy.static.chunk_overlap_tokens",
            "must not exceed half of max_chunk_size_tokens (100)",
        ),
        (
            static(max_chunk_size_tokens=200, chunk_overlap_tokens=-1),
            "chunking_strategy.static.chunk_overlap_tokens",
            "integer below minimum value",
        ),
        (
            static(max_chunk_size_tokens="800", chunk_overlap_tokens=0),
            "chunking_strategy.static.max_chunk_size_tokens",
            "expected an integer, but got a string instead",
        ),
        (
            static(max_chunk_size_tokens=True, chunk_overlap_tokens=0),
            "chunking_strategy.static.max_chunk_size_tokens",
            "expected an integer, but got a boolean instead",
        ),
        (
            static(max_chunk_size_tokens=200, chunk_overlap_tokens=1.5),
            "chunking_strategy.static.chunk_overlap_tokens",
            "expected an integer, but got a decimal instead",
        ),
        (
            static(max_chunk_size_tokens=200, chunk_overlap_tokens=0, extra=1),
            "chunking_strategy.static.extra",
            "Unknown parameter: 'chunking_strategy.static.extra'",
        ),
    ],
)
def test_normalize_invalid_strategies(value: Any, param: str, message: str) -> None:
    with pytest.raises(ChunkingStrategyError) as info:
        normalize_chunking_strategy(value)
    assert info.value.param == param
    assert message in str(info.value)
    assert f"'{param}'" in str(info.value)
    assert isinstance(info.value, ValueError)
