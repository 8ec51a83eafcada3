"""Codex CLI (the real one, from npm) through the gateway, in front of a scripted upstream.

Codex runs with its default configuration (its tools untouched; only the model provider and
what phones home are set) and asks the model to run ``echo respgate-ok``. The scripted upstream
answers the first round with a call of Codex's shell tool and the round that carries the
command's output with a final message. Codex sends a hosted ``web_search`` tool the gateway
cannot run (no ``web_search_provider``), which must not fail the turn.

Three models, three shapes of Codex's request (Codex 0.169.0):
- Codex's own default model: its tools in an ``additional_tools`` input item, the shell reached
  through the ``exec`` custom tool (JavaScript calling ``tools.exec_command``);
- ``gpt-5.5``: ``exec_command``, a ``custom`` ``apply_patch`` tool with a lark grammar,
  ``tool_search`` with ``"execution": "client"`` and ``web_search``;
- ``Qwen/Qwen3-8B``, a model Codex does not know (any model vLLM serves): ``exec_command``, a
  ``namespace`` tool and ``web_search``.
"""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from app.main import create_app
from app.protocol.json_types import JsonObject
from app.settings import Settings
from tests.clients.codex_cli import ensure_installed, run_codex_exec
from tests.clients.scripted_upstream import FINAL_TEXT, ScriptedUpstream
from tests.helpers import serve_in_thread
from tests.npm import NodeUnavailableError

PROMPT = "Run `echo respgate-ok` and tell me what it printed."


@pytest.fixture(scope="module")
def codex() -> Path:
    try:
        return ensure_installed()
    except NodeUnavailableError as exc:
        pytest.skip(str(exc))


def tool_types(body: JsonObject) -> list[str]:
    """The types of the tools offered, in ``tools`` or an ``additional_tools`` input item, and
    inside ``namespace`` tools."""
    offered = list(body.get("tools") or [])
    for item in body.get("input") or []:
        if item.get("type") == "additional_tools":
            offered += item.get("tools") or []
    types: list[str] = []
    for tool in offered:
        types.append(str(tool.get("type")))
        if tool.get("type") == "namespace":
            types += [str(inner.get("type")) for inner in tool.get("tools") or []]
    return types


def outputs(body: JsonObject) -> list[str]:
    return [
        str(item.get("output"))
        for item in body.get("input") or []
        if item.get("type") in ("function_call_output", "custom_tool_call_output")
    ]


@pytest.mark.parametrize(
    ("model", "expected", "web_search"),
    [
        (None, {"namespace", "custom"}, False),
        ("gpt-5.5", {"function", "custom", "tool_search"}, True),
        ("Qwen/Qwen3-8B", {"function", "namespace"}, True),
    ],
    ids=["codex-default-model", "gpt-5.5", "unknown-model"],
)
def test_one_shell_round_trip_completes_through_the_gateway(
    codex: Path,
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
    model: str | None,
    expected: set[str],
    web_search: bool,
) -> None:
    upstream = ScriptedUpstream()
    with (
        caplog.at_level(logging.WARNING),
        serve_in_thread(upstream.app()) as upstream_url,
        serve_in_thread(
            create_app(Settings(upstream_url=upstream_url, data_dir=tmp_path / "data"))
        ) as gateway_url,
    ):
        run = run_codex_exec(f"{gateway_url}/v1", PROMPT, tmp_path, model=model)

    report = f"exit {run.returncode}\nstdout:\n{run.stdout}\nstderr:\n{run.stderr[-4000:]}"
    assert run.returncode == 0, report
    assert run.stdout.strip().splitlines()[-1] == FINAL_TEXT, report
    assert "ERROR" not in run.stderr, report

    first, second = upstream.requests  # one shell call, one answer: nothing retried
    for sent in (first, second):
        types = tool_types(sent)
        assert not any(t.startswith("web_search") for t in types), types
        assert expected <= set(types), types
    assert outputs(first) == []
    [output] = outputs(second)
    assert "respgate-ok" in output

    records = [r for r in caplog.records if r.name.startswith("app")]
    assert not [r for r in records if r.levelno >= logging.ERROR], records
    # The dropped web_search is logged once (per process and tool type), not per request.
    warned = [r.getMessage() for r in records if r.name == "app.tools.hosted"]
    assert len(warned) == (1 if web_search else 0), warned
    assert all("web_search" in w and "hosted_tools" in w for w in warned)
