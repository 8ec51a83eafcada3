"""``@modelcontextprotocol/server-everything`` (npm) over streamable HTTP, for the tests.

The package is pinned in node/package.json and node/package-lock.json; ``npm ci`` installs it
into node/node_modules (git-ignored). ``scripts/provision`` (run by ``.ci/run``) does that before
the tests; ``serve_everything`` does it too when node_modules is missing, so a plain ``pytest``
works on a fresh machine.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

from tests.helpers import free_port
from tests.npm import NodeUnavailableError, ensure_npm_package

__all__ = ["NodeUnavailableError", "ensure_installed", "serve_everything"]

NODE_DIR = Path(__file__).resolve().parent / "node"
PACKAGE_DIR = NODE_DIR / "node_modules" / "@modelcontextprotocol" / "server-everything"
ENTRY_POINT = PACKAGE_DIR / "dist" / "index.js"

START_TIMEOUT = 30.0


def ensure_installed() -> Path:
    """The server's entry point, running ``npm ci`` first if node_modules lacks it."""
    return ensure_npm_package(NODE_DIR, ENTRY_POINT, "the npm MCP server server-everything")


def _port_answers(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=0.5):
            return True
    except OSError:
        return False


@contextlib.contextmanager
def serve_everything() -> Iterator[str]:
    """Run server-everything's streamable HTTP server on a free port; yields its /mcp URL."""
    entry_point = ensure_installed()
    port = free_port()
    env = {**os.environ, "PORT": str(port)}
    with tempfile.TemporaryFile(mode="w+") as log:
        process = subprocess.Popen(
            ["node", str(entry_point), "streamableHttp"],
            cwd=NODE_DIR,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        try:
            deadline = time.monotonic() + START_TIMEOUT
            while not _port_answers(port):
                if process.poll() is not None or time.monotonic() > deadline:
                    log.seek(0)
                    raise RuntimeError(
                        f"server-everything did not start on port {port}:\n{log.read()[-4000:]}"
                    )
                time.sleep(0.05)
            yield f"http://127.0.0.1:{port}/mcp"
        finally:
            _stop(process)


def _stop(process: subprocess.Popen[bytes]) -> None:
    if process.poll() is not None:
        return
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, signal.SIGTERM)
    try:
        process.wait(timeout=10)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)
        process.wait(timeout=10)
