"""npm packages the tests run (server-everything, Codex CLI, Claude Code CLI): each pinned in a
folder of its own with package.json and package-lock.json, installed there by ``npm ci``
(node_modules is git-ignored). ``scripts/provision`` (run by ``.ci/run``) installs them before
the tests; ``ensure_npm_package`` does it when they are missing, so a plain ``pytest`` works on a
fresh machine with Node.js."""

from __future__ import annotations

import fcntl
import shutil
import subprocess
from pathlib import Path

INSTALL_TIMEOUT = 600.0


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
