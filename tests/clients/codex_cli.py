"""Codex CLI (npm ``@openai/codex``) for the tests, pinned in codex/package.json and
codex/package-lock.json; ``npm ci`` installs it into codex/node_modules (git-ignored) when it is
missing, as ``tests/mcp_servers/everything.py`` does for server-everything."""

from __future__ import annotations

import os
import subprocess
from dataclasses import dataclass
from pathlib import Path

from tests.npm import ensure_npm_package

PACKAGE_DIR = Path(__file__).resolve().parent / "codex"
ENTRY_POINT = PACKAGE_DIR / "node_modules" / "@openai" / "codex" / "bin" / "codex.js"

RUN_TIMEOUT = 180.0
API_KEY_ENV = "RESPGATE_CODEX_TEST_KEY"


def ensure_installed() -> Path:
    """Codex's entry point, running ``npm ci`` first if node_modules lacks it."""
    return ensure_npm_package(PACKAGE_DIR, ENTRY_POINT, "Codex CLI (from npm)")


def config_toml(base_url: str) -> str:
    """A Codex config.toml pointing Codex at ``base_url`` (the gateway's ``/v1``), with what
    phones home turned off; Codex's tools are left at their defaults."""
    return f"""\
model_provider = "respgate"
check_for_update_on_startup = false

[model_providers.respgate]
name = "respgate"
base_url = "{base_url}"
env_key = "{API_KEY_ENV}"
wire_api = "responses"

[analytics]
enabled = false

[feedback]
enabled = false

[otel]
exporter = "none"
"""


@dataclass(frozen=True)
class CodexRun:
    returncode: int
    stdout: str
    stderr: str


def run_codex_exec(
    base_url: str,
    prompt: str,
    home: Path,
    model: str | None = None,
    extra_args: tuple[str, ...] = (),
    api_key: str = "sk-dummy",
) -> CodexRun:
    """``codex exec PROMPT`` in a fresh ``CODEX_HOME`` (``home/codex``) and working directory
    (``home/work``), talking only to ``base_url``: any other connection goes to a dead proxy.
    ``extra_args`` go before the prompt (e.g. a sandbox mode); ``api_key`` is the key Codex
    sends (``Authorization: Bearer``)."""
    entry_point = ensure_installed()
    codex_home, work = home / "codex", home / "work"
    codex_home.mkdir(parents=True, exist_ok=True)
    work.mkdir(parents=True, exist_ok=True)
    (codex_home / "config.toml").write_text(config_toml(base_url))
    env = {
        "PATH": os.environ.get("PATH", ""),
        "HOME": str(home),
        "CODEX_HOME": str(codex_home),
        API_KEY_ENV: api_key,
        "HTTPS_PROXY": "http://127.0.0.1:9",
        "HTTP_PROXY": "http://127.0.0.1:9",
        "NO_PROXY": "127.0.0.1,localhost",
    }
    command = ["node", str(entry_point), "exec", "--strict-config", "--skip-git-repo-check"]
    if model is not None:
        command += ["-m", model]
    command += extra_args
    completed = subprocess.run(
        [*command, prompt],
        cwd=work,
        env=env,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=RUN_TIMEOUT,
        check=False,
    )
    return CodexRun(completed.returncode, completed.stdout, completed.stderr)
