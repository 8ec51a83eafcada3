"""Locations of the shared upstream recordings used by the recording tests."""

from __future__ import annotations

import os
from pathlib import Path

SHARED = Path(
    os.environ.get(
        "RESPGATE_SHARED_CASSETTES",
        str(Path(__file__).resolve().parents[3] / "shared" / "cassettes" / "upstream"),
    )
)

_SIDECARS = {"tools.json", "tool_outputs.json"}


def shared_cassette_files() -> list[Path]:
    """Every recorded cassette (*.yaml / *.json) below SHARED, sidecars and docs excluded."""
    if not SHARED.is_dir():
        return []
    files = []
    for path in sorted(SHARED.rglob("*")):
        if not path.is_file() or path.suffix not in (".yaml", ".yml", ".json"):
            continue
        if path.name in _SIDECARS or path.name.startswith("pipeline_"):
            continue
        files.append(path)
    return files


def shared(relative: str) -> Path:
    return SHARED / relative
