"""``@modelcontextprotocol/server-everything`` (npm) over streamable HTTP, for the tests.

The package is pinned in node/package.json and node/package-lock.json; ``npm ci`` installs it
into node/node_modules (git-ignored). ``.ci/run`` does that before the tests; ``serve_everything``
does it too when node_modules is missing, so a plain ``pytest`` works on a fresh machine.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

from tests.helpers import free_port

NODE_DIR = Path(__file__).resolve().parent / "node"
PACKAGE_DIR = NODE_DIR / "node_modules" / "@modelcontextprotocol" / "server-everything"
ENTRY_POINT = PACKAGE_DIR / "dist" / "index.js"

INSTALL_TIMEOUT = 600.0
START_TIMEOUT = 30.0


class NodeUnavailableError(RuntimeError):
    """node or npm is not installed."""


def ensure_installed() -> Path:
    """The server's entry point, running ``npm ci`` first if node_modules lacks it."""
    if shutil.which("node") is None or shutil.which("npm") is None:
        raise NodeUnavailableError(
            "Node.js (node and npm) is not installed: the npm MCP server server-everything needs it"
        )
    # One install at a time: each pytest-xdist worker may get here at once.
    with (NODE_DIR / "package.json").open("rb") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not ENTRY_POINT.is_file():
            _npm_ci()
    return ENTRY_POINT


def _npm_ci() -> None:
    completed = subprocess.run(
        ["npm", "ci", "--no-audit", "--no-fund"],
        cwd=NODE_DIR,
        capture_output=True,
        text=True,
        timeout=INSTALL_TIMEOUT,
        check=False,
    )
    if completed.returncode != 0 or not ENTRY_POINT.is_file():
        raise RuntimeError(
            f"npm ci in {NODE_DIR} failed (exit code {completed.returncode}):\n"
            f"{completed.stdout[-2000:]}\n{completed.stderr[-4000:]}"
        )


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
