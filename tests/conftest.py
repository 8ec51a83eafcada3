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


@pytest.fixture(autouse=True)
def _isolated_data_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Every test's gateway writes its embedded database under its own temporary directory."""
    data_dir = tmp_path / "respgate-data"
    monkeypatch.setenv("RESPGATE_DATA_DIR", str(data_dir))
    monkeypatch.delenv("RESPGATE_DATABASE_URL", raising=False)
    return data_dir
