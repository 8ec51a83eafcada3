from __future__ import annotations

import os
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
SHARED_CASSETTES = Path(
    os.environ.get("RESPGATE_SHARED_CASSETTES", ROOT.parent / "shared" / "cassettes" / "upstream")
)


@pytest.fixture(scope="session")
def shared_cassettes() -> Path:
    if not SHARED_CASSETTES.is_dir():
        pytest.skip(f"shared cassettes not found at {SHARED_CASSETTES}")
    return SHARED_CASSETTES
