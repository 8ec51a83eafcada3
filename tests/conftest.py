from __future__ import annotations

import os
from collections.abc import Iterator
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


# --- real MCP servers (tests/mcp_servers); imported lazily: the MCP SDK is slow to import ---------


@pytest.fixture(scope="session")
def counter_url() -> Iterator[str]:
    """The counter MCP server (Python MCPServer) over streamable HTTP: its /mcp endpoint."""
    from tests.mcp_servers.counter import serve_counter

    with serve_counter("streamable_http") as url:
        yield url


@pytest.fixture(scope="session")
def counter_sse_url() -> Iterator[str]:
    """The counter MCP server over SSE: its /sse endpoint."""
    from tests.mcp_servers.counter import serve_counter

    with serve_counter("sse") as url:
        yield url


@pytest.fixture(scope="session")
def everything_url() -> Iterator[str]:
    """@modelcontextprotocol/server-everything over streamable HTTP: its /mcp endpoint.

    Runs ``npm ci`` first when needed. Without node/npm: skipped, or failed when CI is set.
    """
    from tests.mcp_servers.everything import (
        NodeUnavailableError,
        ensure_installed,
        serve_everything,
    )

    try:
        ensure_installed()
    except NodeUnavailableError as exc:
        if os.environ.get("CI"):
            pytest.fail(f"{exc} (CI is set, so this is a failure)")
        pytest.skip(str(exc))
    with serve_everything() as url:
        yield url
