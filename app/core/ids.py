"""Sortable, prefixed ids (``resp_…``, ``msg_…``) built on UUIDv7."""

from __future__ import annotations

import os
import time


def uuid7_hex() -> str:
    """A UUIDv7 as 32 hex digits: 48-bit Unix milliseconds, version, 74 random bits."""
    millis = time.time_ns() // 1_000_000
    rand = int.from_bytes(os.urandom(10), "big")
    value = (millis & 0xFFFF_FFFF_FFFF) << 80
    value |= 0x7 << 76  # version 7
    value |= ((rand >> 62) & 0xFFF) << 64  # rand_a
    value |= 0b10 << 62  # variant
    value |= rand & 0x3FFF_FFFF_FFFF_FFFF  # rand_b
    return f"{value:032x}"


def new_id(prefix: str) -> str:
    return f"{prefix}_{uuid7_hex()}"
