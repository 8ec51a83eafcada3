"""Claude Code CLI (the real one, from npm) through ``/v1/messages``, in front of a scripted
Responses upstream: ``claude -p`` answers, and a Bash tool round trip completes.

The upstream answers by what it is sent: a request with a tool's output gets a final message
quoting it; one offering Claude Code's ``Bash`` tool for the round-trip prompt gets a ``Bash``
call; anything else (a plain prompt, Claude Code's side requests) gets a plain message.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from pathlib import Path

import pytest

from app.main import create_app
from app.protocol.json_types import JsonObject
from app.settings import Settings
from tests.clients.claude_code_cli import ensure_installed, run_claude_print
from tests.fakes import ListEventStream, ScriptedUpstream, function_call, message, round_events
from tests.helpers import serve_in_thread
from tests.npm import NodeUnavailableError
from tests.tenants import keyed, tenant_key

HELLO = "Hello from the gateway."
BASH_PROMPT = "Run `echo respgate-ok` with Bash and tell me what it printed."
COMMAND = "echo respgate-ok"


@pytest.fixture(scope="module")
def claude() -> Path:
    try:
        return ensure_installed()
    except NodeUnavailableError as exc:
        pytest.skip(str(exc))


def outputs(body: JsonObject) -> list[str]:
    return [
        str(item.get("output"))
        for item in body.get("input") or []
        if item.get("type") == "function_call_output"
    ]


def asks_for_bash(body: JsonObject) -> bool:
    tools = {tool.get("name") for tool in body.get("tools") or []}
    return "Bash" in tools and BASH_PROMPT in str(body.get("input"))


class AnsweringUpstream(ScriptedUpstream):
    def __init__(self) -> None:
        super().__init__([])

    def answer(self, body: JsonObject) -> list[JsonObject]:
        done = outputs(body)
        if done:
            return [message(f"It printed: {done[-1].strip()}")]
        if asks_for_bash(body):
            arguments = f'{{"command": "{COMMAND}", "description": "Print a word"}}'
            return [function_call("Bash", arguments, call_id="toolu_bash1")]
        return [message(HELLO)]

    async def create_response(self, body: JsonObject, headers: Mapping[str, str]) -> JsonObject:
        self.requests.append(copy.deepcopy(body))
        return {"status": "completed", "output": self.answer(body)}

    async def stream_response(
        self, body: JsonObject, headers: Mapping[str, str]
    ) -> ListEventStream:
        self.requests.append(copy.deepcopy(body))
        return ListEventStream(round_events(self.answer(body)))


def test_print_answers(claude: Path, tmp_path: Path) -> None:
    upstream = AnsweringUpstream()
    with serve_in_thread(create_app(Settings(), upstream=upstream)) as url:
        run = run_claude_print(url, "Say hello.", tmp_path)
    assert run.returncode == 0, run.stderr
    assert run.stdout.strip() == HELLO
    assert upstream.requests


def test_bash_round_trip(claude: Path, tmp_path: Path) -> None:
    upstream = AnsweringUpstream()
    with serve_in_thread(create_app(Settings(), upstream=upstream)) as url:
        run = run_claude_print(url, BASH_PROMPT, tmp_path, "--allowedTools", "Bash")
    assert run.returncode == 0, run.stderr
    assert "It printed: respgate-ok" in run.stdout
    round_trip = [body for body in upstream.requests if outputs(body)]
    assert round_trip, [body.get("input") for body in upstream.requests]
    (output,) = outputs(round_trip[-1])
    assert "respgate-ok" in output
    calls = [i for i in round_trip[-1]["input"] if i.get("type") == "function_call"]
    assert calls[-1]["call_id"] == "toolu_bash1"
    assert calls[-1]["name"] == "Bash"


def test_gateway_keys_through_claude_code(claude: Path, tmp_path: Path) -> None:
    """Authentication on: Claude Code's ``ANTHROPIC_API_KEY`` (sent as ``x-api-key``) is the
    tenant's gateway key; a wrong one is refused before anything reaches the upstream."""
    upstream = AnsweringUpstream()
    settings = keyed(Settings(data_dir=tmp_path / "data"), "team-a")
    with serve_in_thread(create_app(settings, upstream=upstream)) as url:
        good = run_claude_print(url, "Say hello.", tmp_path / "a", api_key=tenant_key("team-a"))
        asked = len(upstream.requests)
        # Claude Code retries a 401 (as it does Anthropic's) with back-off: once is enough here.
        bad = run_claude_print(
            url, "Say hello.", tmp_path / "b", api_key="sk-ant-not-a-key", retries=1
        )
    assert good.returncode == 0, good.stderr
    assert good.stdout.strip() == HELLO
    assert asked > 0
    assert bad.returncode != 0, bad.stdout
    assert "API Error: 401 Incorrect API key provided" in bad.stdout, bad.stdout
    assert len(upstream.requests) == asked  # the refused run reached no upstream
