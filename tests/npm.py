"""npm packages the tests run (server-everything, Codex CLI, Claude Code CLI, json-server,
Prism): each pinned in a
folder of its own with package.json and package-lock.json, installed there by ``npm ci``
(node_modules is git-ignored). ``scripts/provision`` (run by ``.ci/run``) installs them before
the tests; ``ensure_npm_package`` does it when they are missing, so a plain ``pytest`` works on a
fresh machine with Node.js."""

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
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path

INSTALL_TIMEOUT = 600.0
START_TIMEOUT = 60.0


class NodeUnavailableError(RuntimeError):
    """node or npm is not installed."""


def ensure_npm_package(folder: Path, entry_point: Path, needed_by: str) -> Path:
    """``entry_point``, running ``npm ci`` in ``folder`` first when it is missing.

    Skip-worthy ``NodeUnavailableError`` without node or npm (``needed_by`` names the package
    for the reason); ``RuntimeError`` with npm's output when the install fails.
    """
    if shutil.which("node") is None or shutil.which("npm") is None:
        raise NodeUnavailableError(f"Node.js (node and npm) is not installed: {needed_by} needs it")
    # One install at a time: each pytest-xdist worker may get here at once.
    with (folder / "package.json").open("rb") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not entry_point.is_file():
            _npm_ci(folder, entry_point)
    return entry_point


def _npm_ci(folder: Path, entry_point: Path) -> None:
    completed = subprocess.run(
        ["npm", "ci", "--no-audit", "--no-fund"],
        cwd=folder,
        capture_output=True,
        text=True,
        timeout=INSTALL_TIMEOUT,
        check=False,
    )
    if completed.returncode != 0 or not entry_point.is_file():
        raise RuntimeError(
            f"npm ci in {folder} failed (exit code {completed.returncode}):\n"
            f"{completed.stdout[-2000:]}\n{completed.stderr[-4000:]}"
        )


def _port_answers(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=0.5):
            return True
    except OSError:
        return False


@contextlib.contextmanager
def serve_node(
    argv: Sequence[str], *, port: int, name: str, cwd: Path, env: Mapping[str, str]
) -> Iterator[None]:
    """``node argv`` (in ``cwd``, with ``env`` added to this process's environment, in a
    session of its own) until it answers on 127.0.0.1:``port``; stopped afterwards, its whole
    process group. ``RuntimeError`` with the server's output when it does not start."""
    with tempfile.TemporaryFile(mode="w+") as log:
        process = subprocess.Popen(
            ["node", *argv],
            cwd=cwd,
            env={**os.environ, **env},
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
                        f"{name} did not start on port {port}:\n{log.read()[-4000:]}"
                    )
                time.sleep(0.05)
            yield
        finally:
            _stop(process)


def _stop(process: subprocess.Popen[str]) -> None:
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
