"""``@modelcontextprotocol/server-everything`` (npm) over streamable HTTP, for the tests.

The package is pinned in node/package.json and node/package-lock.json; ``npm ci`` installs it
into node/node_modules (git-ignored). ``scripts/provision`` (run by ``.ci/run``) does that before
the tests; ``serve_everything`` does it too when node_modules is missing, so a plain ``pytest``
works on a fresh machine.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path

from tests.helpers import free_port
from tests.npm import NodeUnavailableError, ensure_npm_package, serve_node

__all__ = ["NodeUnavailableError", "ensure_installed", "serve_everything"]

NODE_DIR = Path(__file__).resolve().parent / "node"
PACKAGE_DIR = NODE_DIR / "node_modules" / "@modelcontextprotocol" / "server-everything"
ENTRY_POINT = PACKAGE_DIR / "dist" / "index.js"


def ensure_installed() -> Path:
    """The server's entry point, running ``npm ci`` first if node_modules lacks it."""
    return ensure_npm_package(NODE_DIR, ENTRY_POINT, "the npm MCP server server-everything")


@contextlib.contextmanager
def serve_everything() -> Iterator[str]:
    """Run server-everything's streamable HTTP server on a free port; yields its /mcp URL."""
    entry_point = ensure_installed()
    port = free_port()
    argv = [str(entry_point), "streamableHttp"]
    with serve_node(
        argv, port=port, name="server-everything", cwd=NODE_DIR, env={"PORT": str(port)}
    ):
        yield f"http://127.0.0.1:{port}/mcp"
