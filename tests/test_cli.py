"""The ``respgate`` command line: start-up errors as one ``respgate:`` line, help, version."""

from __future__ import annotations

import argparse
import logging
import socket
from collections.abc import Iterator
from pathlib import Path

import pytest

from app import __version__, cli
from app.cli import build_parser, main
from app.recording.cassette import QUICKSTART_CASSETTE
from tests.helpers import free_port


def fails_with(capsys: pytest.CaptureFixture[str], argv: list[str], code: int = 2) -> str:
    """Run ``respgate argv``; it must exit ``code`` with one ``respgate: ...`` line on stderr."""
    assert main(argv) == code
    out, err = capsys.readouterr()
    assert "Traceback" not in out + err
    lines = [line for line in err.splitlines() if line.startswith("respgate: ")]
    assert len(lines) == 1, err
    return lines[0]


@pytest.fixture
def listening() -> Iterator[int]:
    """A port another program is listening on."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        yield int(sock.getsockname()[1])


def write(path: Path, text: str) -> Path:
    path.write_text(text)
    return path


def test_a_toml_syntax_error_names_the_file_line_and_column(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = write(tmp_path / "respgate.toml", 'port = 9000\nupstream_url = "http://x\n')
    line = fails_with(capsys, ["serve", "--config", str(config)])
    assert line.startswith(f"respgate: config file {config}, line 2, column ")
    assert "not valid TOML" in line


def test_a_missing_config_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    missing = tmp_path / "nope.toml"
    for command in ("serve", "migrate"):
        line = fails_with(capsys, [command, "--config", str(missing)])
        assert line == f"respgate: config file not found: {missing}"


def test_an_invalid_value_is_one_line_naming_the_key(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = write(tmp_path / "respgate.toml", "port = 'x'\ntool_call_timeout = 0\n")
    line = fails_with(capsys, ["serve", "--config", str(config)])
    assert line.startswith(f"respgate: invalid configuration in {config}: port: ")
    assert "; tool_call_timeout: " in line


@pytest.mark.parametrize("command", ["serve", "migrate"])
def test_an_unsupported_database_url_says_which_are_supported(
    command: str, capsys: pytest.CaptureFixture[str]
) -> None:
    line = fails_with(capsys, [command, "--database-url", "mysql://root@localhost/respgate"])
    assert "unsupported database URL scheme 'mysql://'" in line
    assert "postgresql+asyncpg://" in line and "sqlite://" in line


def test_an_unset_headers_from_env_variable_is_named(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("RESPGATE_TEST_UNSET_TOKEN", raising=False)
    config = write(
        tmp_path / "respgate.toml",
        "[[mcp.servers]]\nlabel = 'docs'\nurl = 'https://mcp.example.com/mcp'\n"
        "headers_from_env = { Authorization = 'RESPGATE_TEST_UNSET_TOKEN' }\n",
    )
    line = fails_with(capsys, ["serve", "--config", str(config)])
    assert line == (
        "respgate: MCP server 'docs': header Authorization comes from the environment variable "
        "RESPGATE_TEST_UNSET_TOKEN, which is not set"
    )


def test_an_unset_api_key_env_variable_is_named(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("RESPGATE_TEST_UNSET_KEY", raising=False)
    config = write(
        tmp_path / "respgate.toml",
        "[[upstreams]]\nname = 'openai'\nurl = 'https://api.openai.com'\n"
        "api_key_env = 'RESPGATE_TEST_UNSET_KEY'\n",
    )
    line = fails_with(capsys, ["serve", "--config", str(config)])
    assert line == (
        "respgate: upstream 'openai': api_key_env names RESPGATE_TEST_UNSET_KEY, which is not set"
    )


@pytest.mark.parametrize("url", ["localhost:8000", "ftp://models.example.com", "http://"])
def test_an_upstream_url_must_be_http(url: str, capsys: pytest.CaptureFixture[str]) -> None:
    line = fails_with(capsys, ["serve", "--upstream-url", url])
    assert line.startswith("respgate: invalid configuration: upstream_url: ")
    assert "is not an http:// or https:// URL" in line
    line = fails_with(capsys, ["record", "--upstream-url", url, "--out", "x.yaml"])
    assert "is not an http:// or https:// URL" in line


def test_waiting_for_an_upstream_that_never_answers(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    upstream = f"http://127.0.0.1:{free_port()}"
    argv = ["serve", "--upstream-url", upstream, "--wait-for-upstream", "0.3"]
    argv += ["--host", "127.0.0.1", "--port", str(free_port()), "--data-dir", str(tmp_path)]
    line = fails_with(capsys, argv, code=1)
    assert line.startswith(f"respgate: upstream {upstream} not ready after 0.3 s")


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ("turns:\n- request: [\n", "cannot parse cassette {path}: line 3, column 1: "),
        ("hello: world\n", "{path}: unrecognized cassette format (no 'turns' or 'sse' key)"),
        ("turns:\n- request: {method: POST}\n  response: {}\n", "{path}: turn 1: "),
        ("turns: []\n", "cassette {path} has no turns to replay"),
    ],
    ids=["bad-yaml", "not-a-cassette", "wrong-turn", "no-turns"],
)
@pytest.mark.parametrize("command", ["replay", "demo"])
def test_a_malformed_cassette(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], command: str, text: str, problem: str
) -> None:
    cassette = write(tmp_path / "cassette.yaml", text)
    argv = (
        ["replay", str(cassette)] if command == "replay" else ["demo", "--cassette", str(cassette)]
    )
    line = fails_with(capsys, argv)
    assert line.startswith("respgate: " + problem.format(path=cassette))


def test_a_missing_cassette(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    line = fails_with(capsys, ["replay", str(tmp_path / "gone.yaml")])
    assert line == f"respgate: cassette not found: {tmp_path / 'gone.yaml'}"


@pytest.mark.parametrize(
    ("argv", "flag"),
    [
        (["replay", str(QUICKSTART_CASSETTE), "--port", "{port}"], "--port"),
        (
            [
                "record",
                "--upstream-url",
                "http://127.0.0.1:1",
                "--out",
                "x.yaml",
                "--port",
                "{port}",
            ],
            "--port",
        ),
        (["demo", "--port", "{port}"], "--port"),
        (["demo", "--port", "0", "--replay-port", "{port}"], "--replay-port"),
    ],
    ids=["replay", "record", "demo", "demo-replay-port"],
)
def test_a_port_in_use(
    listening: int, capsys: pytest.CaptureFixture[str], argv: list[str], flag: str
) -> None:
    line = fails_with(capsys, [arg.format(port=listening) for arg in argv])
    assert line.startswith(f"respgate: cannot listen on 127.0.0.1:{listening}: ")
    assert line.endswith(f"; choose another port with {flag}")


def test_serve_on_a_port_in_use(
    listening: int, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ["serve", "--host", "127.0.0.1", "--port", str(listening), "--data-dir", str(tmp_path)]
    line = fails_with(capsys, argv)
    assert line == (
        f"respgate: cannot listen on 127.0.0.1:{listening}: Address already in use; "
        "choose another port with --port"
    )


def test_version(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as done:
        main(["--version"])
    assert done.value.code == 0
    assert capsys.readouterr().out == f"respgate {__version__}\n"


def test_the_top_level_help_reads_as_prose(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(["--help"])
    text = capsys.readouterr().out
    assert "respgate gives any inference server an OpenAI Responses API endpoint." in text
    for command in ("serve", "demo", "migrate", "record", "replay"):
        assert any(
            line.split()[:1] == [command] and len(line.split()) > 2 for line in text.splitlines()
        )
    assert "examples:\n  respgate demo" in text
    assert "README" in text


def subcommand(name: str) -> argparse.ArgumentParser:
    (choices,) = [
        action.choices
        for action in build_parser()._actions
        if isinstance(action, argparse._SubParsersAction)
    ]
    parser = choices[name]
    assert isinstance(parser, argparse.ArgumentParser)
    return parser


@pytest.mark.parametrize("name", ["record", "replay", "demo"])
def test_every_option_has_help_that_shows_its_default(name: str) -> None:
    parser = subcommand(name)
    formatter = parser.formatter_class(prog=parser.prog)
    for action in parser._actions:
        if not action.option_strings or action.dest == "help":
            continue
        assert action.help, f"{name} {action.option_strings[0]} has no help"
        shown = formatter._get_help_string(action) % {"default": action.default}
        assert "default" in shown or "(required)" in shown, (name, action.option_strings, shown)


@pytest.mark.parametrize(
    ("level", "migrations", "alembic_level"),
    [("info", False, logging.WARNING), ("info", True, logging.INFO), ("debug", False, 0)],
)
def test_alembic_narrates_only_where_it_helps(
    level: str, migrations: bool, alembic_level: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``serve`` leaves alembic's narration out below debug; ``migrate`` keeps the revisions
    it runs, never the plugin set-up."""
    alembic = logging.getLogger("alembic")
    plugins = logging.getLogger("alembic.runtime.plugins")
    monkeypatch.setattr(alembic, "level", logging.NOTSET)
    monkeypatch.setattr(plugins, "level", logging.NOTSET)
    cli._configure_logging(level, migrations=migrations)
    assert alembic.level == alembic_level
    assert plugins.level == (0 if level == "debug" else logging.WARNING)


@pytest.mark.parametrize(
    ("config_text", "expected"),
    [
        ('[tool_engines.x]\nkind = "nosuch"\n', "engine 'x' (kind 'nosuch'): unknown engine kind"),
        (
            '[tool_engines.api]\nkind = "rest"\nbogus = 1\n',
            "engine 'api' (kind 'rest'): rest engine options: bogus",
        ),
        (
            '[tool_engines.api]\nkind = "rest"\n[[tool_sets]]\nnamespace = "crm"\n'
            'engine = "api"\nfile = "TOOLS"\n',
            "tools[0] (bad name!).name",
        ),
    ],
)
def test_a_tool_engine_mistake_is_one_line_before_the_server_starts(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], config_text: str, expected: str
) -> None:
    tools = write(tmp_path / "tools.yaml", "- name: bad name!\n  parameters: {type: object}\n")
    config = write(
        tmp_path / "respgate.toml",
        'upstream_url = "http://127.0.0.1:9"\n' + config_text.replace("TOOLS", str(tools)),
    )
    line = fails_with(capsys, ["serve", "--config", str(config)])
    assert line.startswith("respgate: ") and expected in line
