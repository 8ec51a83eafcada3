"""Codex CLI (the real one, from npm) over WebSocket mode: ``supports_websockets = true``.

The same shell round trip as tests/e2e/test_codex_cli.py, with the provider's WebSocket
transport on. Every ``/v1/responses`` turn must go over the socket: no refused upgrade, no
fallback to HTTP (a plain ``POST /v1/responses`` would mean Codex gave the socket up).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, MutableMapping
from pathlib import Path
from typing import Any

import pytest

from app.main import create_app
from app.settings import Settings
from tests.clients import codex_cli
from tests.clients.codex_cli import ensure_installed, run_codex_exec
from tests.clients.scripted_upstream import FINAL_TEXT, ScriptedUpstream
from tests.helpers import serve_in_thread
from tests.npm import NodeUnavailableError

PROMPT = "Run `echo respgate-ok` and tell me what it printed."

Scope = MutableMapping[str, Any]
Asgi = Callable[[Scope, Any, Any], Awaitable[None]]


@pytest.fixture(scope="module")
def codex() -> Path:
    try:
        return ensure_installed()
    except NodeUnavailableError as exc:
        pytest.skip(str(exc))


def recording(app: Asgi, seen: list[tuple[str, str]]) -> Asgi:
    """``app``, noting the kind (``http`` or ``websocket``) and path of every connection."""

    async def wrapper(scope: Scope, receive: Any, send: Any) -> None:
        if scope["type"] in ("http", "websocket"):
            seen.append((scope["type"] + ":" + str(scope.get("method", "")), scope["path"]))
        await app(scope, receive, send)

    return wrapper


def test_codex_runs_a_shell_round_trip_over_the_websocket(
    codex: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    plain = codex_cli.config_toml

    def with_websockets(base_url: str) -> str:
        config = plain(base_url)
        line = 'wire_api = "responses"\n'
        assert line in config
        return config.replace(line, line + "supports_websockets = true\n")

    monkeypatch.setattr(codex_cli, "config_toml", with_websockets)
    upstream = ScriptedUpstream()
    seen: list[tuple[str, str]] = []
    with serve_in_thread(upstream.app()) as upstream_url:
        gateway = create_app(Settings(upstream_url=upstream_url, data_dir=tmp_path / "data"))
        with serve_in_thread(recording(gateway, seen)) as gateway_url:
            run = run_codex_exec(f"{gateway_url}/v1", PROMPT, tmp_path)

    report = f"exit {run.returncode}\nstdout:\n{run.stdout}\nstderr:\n{run.stderr[-4000:]}"
    assert run.returncode == 0, report
    assert run.stdout.strip().splitlines()[-1] == FINAL_TEXT, report
    turns = [kind for kind, path in seen if path == "/v1/responses"]
    assert turns and set(turns) == {"websocket:"}, (seen, report)
    first, second = upstream.requests  # one shell call, one answer: nothing retried
    assert any("respgate-ok" in str(item.get("output")) for item in second.get("input") or [])
    assert not any("respgate-ok" in str(item.get("output")) for item in first.get("input") or [])
