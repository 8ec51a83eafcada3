"""Fixtures shared by every test, and the rule that CI runs every test.

A test that needs something this machine lacks (PostgreSQL, pgvector, Node.js, ``../shared``,
the local embedding model) calls ``pytest.skip("<what is missing>")``. When the environment
variable ``CI`` is true (``1``, ``true``, ``yes``, ``on``), :func:`pytest_runtest_makereport`
turns every such skip into a failure that keeps the reason, so CI proves every path.
"""

from __future__ import annotations

import os
from collections.abc import Generator, Iterator
from pathlib import Path

import pytest

from tests.recordings import ROOT, SHARED_MISSING
from tests.recordings import SHARED as SHARED_CASSETTES

__all__ = ["ROOT", "SHARED_CASSETTES"]

pytest_plugins = ("pytester",)


def running_in_ci() -> bool:
    """Whether ``CI`` is set to a true value (``CI=false`` / ``CI=0`` / ``CI=`` are not)."""
    return os.environ.get("CI", "").strip().lower() in ("1", "true", "yes", "on")


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None]
) -> Generator[None, pytest.TestReport, pytest.TestReport]:
    """Under CI a skipped test fails, with the skip's reason; an xfail stays an xfail."""
    report = yield
    if report.skipped and not hasattr(report, "wasxfail") and running_in_ci():
        reason = report.longrepr[2] if isinstance(report.longrepr, tuple) else report.longrepr
        report.outcome = "failed"
        report.longrepr = f"CI is set, so a skip is a failure: {reason}"
    return report


@pytest.fixture(scope="session")
def shared_cassettes() -> Path:
    """The full set of recordings of ../shared (tests/recordings.py); skips without it."""
    if not SHARED_CASSETTES.is_dir():
        pytest.skip(SHARED_MISSING)
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

    Runs ``npm ci`` first when needed; skipped without Node.js/npm.
    """
    from tests.mcp_servers.everything import (
        NodeUnavailableError,
        ensure_installed,
        serve_everything,
    )

    try:
        ensure_installed()
    except NodeUnavailableError as exc:
        pytest.skip(str(exc))
    with serve_everything() as url:
        yield url
