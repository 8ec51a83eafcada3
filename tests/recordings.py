"""Where the recorded upstream traffic the tests replay lives.

- ``FIXTURES`` (``tests/fixtures/upstream``): a small copied set, always present. Tests of pure
  modules read only these (see tests/fixtures/README.md for where each file comes from).
- ``SHARED`` (``../shared/cassettes/upstream``, or ``RESPGATE_SHARED_CASSETTES``): the full set,
  beside the repository, optional. Tests that need it skip with ``SHARED_MISSING`` without it.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = ROOT / "tests" / "fixtures" / "upstream"
SHARED = Path(
    os.environ.get("RESPGATE_SHARED_CASSETTES", ROOT.parent / "shared" / "cassettes" / "upstream")
)
SHARED_MISSING = f"../shared recordings not found at {SHARED} (set RESPGATE_SHARED_CASSETTES)"

# For whole modules of recorded end-to-end tests: ``pytestmark = needs_shared``.
needs_shared = pytest.mark.skipif(not SHARED.is_dir(), reason=SHARED_MISSING)

_SIDECARS = {"tools.json", "tool_outputs.json"}


def fixture(relative: str) -> Path:
    """A copied recording under tests/fixtures/upstream (same relative path as in ../shared)."""
    path = FIXTURES / relative
    if not path.is_file():
        raise FileNotFoundError(f"{path}: copy it from ../shared and list it in the README")
    return path


def shared(relative: str) -> Path:
    """A recording of ../shared; skips the calling test when ../shared is absent."""
    if not SHARED.is_dir():
        pytest.skip(SHARED_MISSING)
    return SHARED / relative


def cassette_files(root: Path) -> list[Path]:
    """Every recorded cassette (*.yaml / *.json) below ``root``, sidecars and docs excluded."""
    files = []
    for path in sorted(root.rglob("*")):
        if not path.is_file() or path.suffix not in (".yaml", ".yml", ".json"):
            continue
        if path.name in _SIDECARS or path.name.startswith("pipeline_"):
            continue
        files.append(path)
    return files
