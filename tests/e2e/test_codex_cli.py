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

An upstream takes only function tools by default (vLLM and SGLang run no others): the gateway
lowers the others and raises the calls back (``app/upstream/tool_lowering.py``); one configured
with every type (``native_tool_types``, as for OpenAI) gets them as they are. The same three
models in front of a scripted chat-completions upstream (``scripted_chat_upstream``); an
``apply_patch`` round trip (a ``custom`` tool call) that creates a file over a chat upstream, a
default responses upstream and one that takes custom tools; and a client ``tool_search`` round
trip over a chat upstream.
"""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from app.main import create_app
from app.protocol.json_types import JsonObject
from app.settings import Settings, UpstreamConfig
from tests.clients.codex_cli import ensure_installed, run_codex_exec
from tests.clients.scripted_chat_upstream import (
    SEARCH_DONE_TEXT,
    SEARCH_QUERY,
    ScriptedChatUpstream,
)
from tests.clients.scripted_upstream import (
    FINAL_TEXT,
    PATCH_DONE_TEXT,
    PATCH_FILE,
    PATCH_TEXT,
    ScriptedUpstream,
)
from tests.helpers import serve_in_thread
from tests.npm import NodeUnavailableError
from tests.tenants import keyed, tenant_key

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


# What OpenAI runs: an upstream configured so gets Codex's tools as they are.
ALL_TOOL_TYPES = ["function", "custom", "namespace", "tool_search"]


@pytest.mark.parametrize("native", [None, ALL_TOOL_TYPES], ids=["lowered", "native"])
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
    native: list[str] | None,
) -> None:
    """By default (vLLM, SGLang) the upstream sees only function tools; configured with every
    type (OpenAI), Codex's tools as they are."""
    upstream = ScriptedUpstream()
    with caplog.at_level(logging.WARNING), serve_in_thread(upstream.app()) as upstream_url:
        config = UpstreamConfig(name="scripted", url=upstream_url, native_tool_types=native)
        settings = Settings(upstreams=[config], data_dir=tmp_path / "data")
        with serve_in_thread(create_app(settings)) as gateway_url:
            run = run_codex_exec(f"{gateway_url}/v1", PROMPT, tmp_path, model=model)

    report = f"exit {run.returncode}\nstdout:\n{run.stdout}\nstderr:\n{run.stderr[-4000:]}"
    assert run.returncode == 0, report
    assert run.stdout.strip().splitlines()[-1] == FINAL_TEXT, report
    assert "ERROR" not in run.stderr, report

    first, second = upstream.requests  # one shell call, one answer: nothing retried
    for sent in (first, second):
        types = tool_types(sent)
        assert not any(t.startswith("web_search") for t in types), types
        assert (expected <= set(types)) if native else (set(types) == {"function"}), types
    assert outputs(first) == []
    [output] = outputs(second)
    assert "respgate-ok" in output

    records = [r for r in caplog.records if r.name.startswith("app")]
    assert not [r for r in records if r.levelno >= logging.ERROR], records
    # The dropped web_search is logged once (per process and tool type), not per request.
    warned = [r.getMessage() for r in records if r.name == "app.tools.hosted"]
    assert len(warned) == (1 if web_search else 0), warned
    assert all("web_search" in w and "hosted_tools" in w for w in warned)


def chat_tool_names(body: JsonObject) -> list[str]:
    return [str(t["function"]["name"]) for t in body.get("tools") or []]


def tool_messages(body: JsonObject) -> list[str]:
    return [str(m.get("content")) for m in body.get("messages") or [] if m.get("role") == "tool"]


@pytest.mark.parametrize(
    ("model", "lowered"),
    [
        (None, "exec"),
        ("gpt-5.5", "apply_patch"),
        ("Qwen/Qwen3-8B", "multi_agent_v1__spawn_agent"),
    ],
    ids=["codex-default-model", "gpt-5.5", "unknown-model"],
)
def test_shell_round_trip_through_a_chat_upstream(
    codex: Path, tmp_path: Path, model: str | None, lowered: str
) -> None:
    """Codex with its default tools (``namespace``, ``custom``, ``tool_search``) in front of a
    chat-completions server: the gateway offers them as functions and raises the calls back."""
    upstream = ScriptedChatUpstream()
    settings = Settings(upstream_url="http://unused", upstream_kind="chat", data_dir=tmp_path / "d")
    with serve_in_thread(upstream.app()) as upstream_url:
        settings = settings.model_copy(update={"upstream_url": upstream_url})
        with serve_in_thread(create_app(settings)) as gateway_url:
            run = run_codex_exec(f"{gateway_url}/v1", PROMPT, tmp_path, model=model)

    report = f"exit {run.returncode}\nstdout:\n{run.stdout}\nstderr:\n{run.stderr[-4000:]}"
    assert run.returncode == 0, report
    assert run.stdout.strip().splitlines()[-1] == FINAL_TEXT, report
    assert "ERROR" not in run.stderr, report
    first, second = upstream.requests
    # A lowered tool (a namespace's function, or a custom tool) is offered as a function.
    names = chat_tool_names(first)
    assert any(lowered in (name, name.split("__")[-1]) for name in names), names
    assert tool_messages(first) == []
    [output] = tool_messages(second)
    assert "respgate-ok" in output


PATCH_PROMPT = f"Create {PATCH_FILE} containing the line {PATCH_TEXT!r}."


@pytest.mark.parametrize("upstream_kind", ["chat", "responses", "responses-native"])
def test_apply_patch_round_trip_creates_the_file(
    codex: Path, tmp_path: Path, upstream_kind: str
) -> None:
    """Codex's ``custom`` ``apply_patch`` tool (a lark grammar) with a model Codex knows: over a
    chat upstream and a responses upstream with the default (only functions: vLLM, SGLang) the
    gateway lowers it to a function and raises the call back to a ``custom_tool_call``; a
    responses upstream configured to take custom tools (OpenAI) gets it as it is."""
    scripted: ScriptedChatUpstream | ScriptedUpstream = (
        ScriptedChatUpstream() if upstream_kind == "chat" else ScriptedUpstream()
    )
    with serve_in_thread(scripted.app()) as upstream_url:
        config = UpstreamConfig(
            name="scripted",
            url=upstream_url,
            kind="chat" if upstream_kind == "chat" else "responses",
            native_tool_types=ALL_TOOL_TYPES if upstream_kind == "responses-native" else None,
        )
        settings = Settings(upstreams=[config], data_dir=tmp_path / "data")
        with serve_in_thread(create_app(settings)) as gateway_url:
            run = run_codex_exec(
                f"{gateway_url}/v1",
                PATCH_PROMPT,
                tmp_path,
                model="gpt-5.5",
                extra_args=("--sandbox", "workspace-write"),  # read-only refuses the write
            )

    report = f"exit {run.returncode}\nstdout:\n{run.stdout}\nstderr:\n{run.stderr[-4000:]}"
    assert run.returncode == 0, report
    assert run.stdout.strip().splitlines()[-1] == PATCH_DONE_TEXT, report
    assert (tmp_path / "work" / PATCH_FILE).read_text() == f"{PATCH_TEXT}\n", report
    first, second = scripted.requests
    if isinstance(scripted, ScriptedChatUpstream):
        assert "apply_patch" in chat_tool_names(first)
        [output] = tool_messages(second)
    else:
        offered = {t.get("name"): t.get("type") for t in first.get("tools") or []}
        native = upstream_kind == "responses-native"
        assert offered["apply_patch"] == ("custom" if native else "function")
        history = {str(item.get("type")) for item in second.get("input") or []}
        assert ("custom_tool_call" in history) is native, history
        [output] = outputs(second)
    assert PATCH_FILE in output


def test_tool_search_round_trip_through_a_chat_upstream(codex: Path, tmp_path: Path) -> None:
    """Codex's client-run ``tool_search`` (``-m gpt-5.5``) offered to a chat upstream as a
    function: the call comes back to Codex as a ``tool_search_call``, Codex runs the search and
    its ``tool_search_output`` goes up as the function's output."""
    upstream = ScriptedChatUpstream()
    with serve_in_thread(upstream.app()) as upstream_url:
        config = UpstreamConfig(name="scripted", url=upstream_url, kind="chat")
        settings = Settings(upstreams=[config], data_dir=tmp_path / "data")
        with serve_in_thread(create_app(settings)) as gateway_url:
            prompt = f"Search your tools for {SEARCH_QUERY}."
            run = run_codex_exec(f"{gateway_url}/v1", prompt, tmp_path, model="gpt-5.5")

    report = f"exit {run.returncode}\nstdout:\n{run.stdout}\nstderr:\n{run.stderr[-4000:]}"
    assert run.returncode == 0, report
    assert run.stdout.strip().splitlines()[-1] == SEARCH_DONE_TEXT, report
    first, second = upstream.requests
    assert "tool_search" in chat_tool_names(first)
    calls = [
        call["function"]["name"]
        for message in second["messages"]
        for call in message.get("tool_calls") or []
    ]
    assert calls == ["tool_search"]
    # Codex's tool_search_output (no deferred tools match: none are configured).
    assert tool_messages(second) == ["No tools found."]


def test_gateway_keys_through_codex(codex: Path, tmp_path: Path) -> None:
    """Authentication on: the key Codex sends (its provider's ``env_key``, as ``Authorization:
    Bearer``) is the tenant's gateway key and never reaches the upstream; a wrong one is refused
    before anything does."""
    upstream = ScriptedUpstream()
    with serve_in_thread(upstream.app()) as upstream_url:
        config = UpstreamConfig(name="scripted", url=upstream_url, api_key="sk-upstream")
        settings = keyed(Settings(upstreams=[config], data_dir=tmp_path / "data"), "team-a")
        with serve_in_thread(create_app(settings)) as gateway_url:
            good = run_codex_exec(
                f"{gateway_url}/v1", PROMPT, tmp_path / "a", api_key=tenant_key("team-a")
            )
            asked = list(upstream.requests)
            bad = run_codex_exec(f"{gateway_url}/v1", PROMPT, tmp_path / "b", api_key="sk-wrong")

    assert good.returncode == 0, f"stdout:\n{good.stdout}\nstderr:\n{good.stderr[-4000:]}"
    assert good.stdout.strip().splitlines()[-1] == FINAL_TEXT
    assert len(asked) == 2  # one shell call, one answer
    assert set(upstream.authorizations) == {"Bearer sk-upstream"}
    assert bad.returncode != 0, bad.stdout
    assert "401" in bad.stderr, bad.stderr[-4000:]
    assert upstream.requests == asked  # the refused run reached no upstream
