"""Kept for older imports; tests/recordings.py says where the recordings are."""

from __future__ import annotations

from pathlib import Path

from tests.recordings import SHARED, cassette_files, shared

__all__ = ["SHARED", "shared", "shared_cassette_files"]


def shared_cassette_files() -> list[Path]:
    """Every recorded cassette below SHARED (none when ../shared is absent)."""
    return cassette_files(SHARED) if SHARED.is_dir() else []
