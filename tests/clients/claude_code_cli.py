"""Claude Code CLI (npm ``@anthropic-ai/claude-code``) for the tests, pinned in
claude_code/package.json and claude_code/package-lock.json; ``npm ci`` installs it into
claude_code/node_modules (git-ignored) when it is missing, as ``codex_cli`` does for Codex.

It runs fully offline: ``ANTHROPIC_BASE_URL`` is the gateway, ``ANTHROPIC_API_KEY`` a dummy,
``CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC`` turns off what phones home, and any other
connection goes to a dead proxy."""

from __future__ import annotations

import os
import subprocess
from dataclasses import dataclass
from pathlib import Path

from tests.npm import ensure_npm_package

PACKAGE_DIR = Path(__file__).resolve().parent / "claude_code"
# The package's postinstall puts the native binary of this platform here.
ENTRY_POINT = PACKAGE_DIR / "node_modules" / "@anthropic-ai" / "claude-code" / "bin" / "claude.exe"

RUN_TIMEOUT = 180.0


def ensure_installed() -> Path:
    """Claude Code's binary, running ``npm ci`` first if node_modules lacks it."""
    return ensure_npm_package(PACKAGE_DIR, ENTRY_POINT, "Claude Code CLI (from npm)")


@dataclass(frozen=True)
class ClaudeRun:
    returncode: int
    stdout: str
    stderr: str


def run_claude_print(
    base_url: str,
    prompt: str,
    home: Path,
    *extra: str,
    api_key: str = "sk-ant-dummy",
    retries: int | None = None,
) -> ClaudeRun:
    """``claude -p PROMPT`` in a fresh ``HOME`` (``home``) and working directory
    (``home/work``), talking only to ``base_url`` with ``api_key`` (sent as ``x-api-key``);
    ``retries``: how often Claude Code retries a failed API call (its default when None)."""
    entry_point = ensure_installed()
    work = home / "work"
    work.mkdir(parents=True, exist_ok=True)
    env = {
        "PATH": os.environ.get("PATH", ""),
        "HOME": str(home),
        "ANTHROPIC_BASE_URL": base_url,
        "ANTHROPIC_API_KEY": api_key,
        "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
        "DISABLE_AUTOUPDATER": "1",
        "HTTPS_PROXY": "http://127.0.0.1:9",
        "HTTP_PROXY": "http://127.0.0.1:9",
        "NO_PROXY": "127.0.0.1,localhost",
    }
    if retries is not None:
        env["CLAUDE_CODE_MAX_RETRIES"] = str(retries)
    completed = subprocess.run(
        [str(entry_point), "-p", *extra, "--", prompt],
        cwd=work,
        env=env,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=RUN_TIMEOUT,
        check=False,
    )
    return ClaudeRun(completed.returncode, completed.stdout, completed.stderr)
