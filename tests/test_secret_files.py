"""Secrets from files (``app.options.secrets``): ``RESPGATE_<NAME>_FILE`` for every setting,
``<VARIABLE>_FILE`` for every variable the configuration names, one trailing newline dropped,
and a file that cannot be read (or set besides its variable) is one start-up line naming it.

End to end: a gateway whose upstream key, MCP server token and REST tool token all come from
files sends each where it belongs (a real upstream server, the real MCP counter server, a real
REST server), through the tool loop.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from pydantic import BaseModel
from pydantic_settings import BaseSettings, PydanticBaseSettingsSource, SettingsConfigDict
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from app.cli import main
from app.main import create_app
from app.options.secrets import SecretEnviron, SecretFileError, SecretFilesEnvSource
from app.protocol.json_types import JsonObject
from app.settings import load_settings
from app.tools.engines.rest.binding import RestBinding, build_request
from tests.e2e.engine_upstream import EngineUpstream, call, message, tool_outputs
from tests.helpers import in_process, serve_in_thread


@pytest.fixture
def secret(tmp_path: Path) -> Any:
    def write(name: str, contents: str) -> str:
        path = tmp_path / "secrets" / name
        path.parent.mkdir(exist_ok=True)
        path.write_text(contents)
        return str(path)

    return write


# --------------------------------------------------------------------------- settings

SECRET_SETTINGS = {
    "upstream_api_key": "sk-upstream-from-a-file",
    "web_search_api_key": "tvly-from-a-file",
    "redis_url": "redis://:hunter2@redis.internal:6379/0",
    "database_url": "postgresql+asyncpg://respgate:hunter2@db.internal/respgate",
}


@pytest.mark.parametrize(("name", "value"), SECRET_SETTINGS.items())
def test_a_secret_setting_is_read_from_its_file(
    name: str, value: str, secret: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(f"RESPGATE_{name.upper()}_FILE", secret(name, value + "\n"))
    assert getattr(load_settings(), name) == value


def test_the_compaction_key_is_read_from_its_file(
    secret: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("RESPGATE_COMPACTION_KEY_FILE", secret("compaction", "k" * 64 + "\n"))
    key = load_settings().compaction_key
    assert key is not None and key.get_secret_value() == "k" * 64


def test_nested_settings_and_tables_are_read_from_their_files(
    secret: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    servers = [
        {
            "label": "docs",
            "url": "https://mcp.example.com/mcp",
            "headers": {"Authorization": "Bearer from-a-file"},
        }
    ]
    monkeypatch.setenv("RESPGATE_MCP__SERVERS_FILE", secret("servers", json.dumps(servers)))
    monkeypatch.setenv("RESPGATE_RETENTION__RESPONSES_DAYS_FILE", secret("days", "30\n"))
    settings = load_settings()
    assert settings.mcp.servers[0].headers == {"Authorization": "Bearer from-a-file"}
    assert settings.retention.responses_days == 30


def test_only_one_trailing_newline_goes(secret: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RESPGATE_UPSTREAM_API_KEY_FILE", secret("crlf", "sk-1\r\n"))
    assert load_settings().upstream_api_key == "sk-1"
    monkeypatch.setenv("RESPGATE_UPSTREAM_API_KEY_FILE", secret("two", "sk-2\n\n"))
    assert load_settings().upstream_api_key == "sk-2\n"
    monkeypatch.setenv("RESPGATE_UPSTREAM_API_KEY_FILE", secret("none", " sk-3 "))
    assert load_settings().upstream_api_key == " sk-3 "


def test_a_file_overrides_the_toml_file_and_an_option_overrides_the_file(
    tmp_path: Path, secret: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    config = tmp_path / "respgate.toml"
    config.write_text('upstream_api_key = "sk-from-toml"\n')
    monkeypatch.setenv("RESPGATE_UPSTREAM_API_KEY_FILE", secret("key", "sk-from-file"))
    assert load_settings(config).upstream_api_key == "sk-from-file"
    assert load_settings(config, upstream_api_key="sk-option").upstream_api_key == "sk-option"


def fails_with(capsys: pytest.CaptureFixture[str], argv: list[str]) -> str:
    assert main(argv) == 2
    out, err = capsys.readouterr()
    assert "Traceback" not in out + err
    [line] = err.splitlines()
    return line


@pytest.mark.parametrize("command", ["serve", "migrate", "purge"])
def test_a_missing_file_is_one_start_up_line_naming_the_variable(
    command: str, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("RESPGATE_UPSTREAM_API_KEY_FILE", "/run/secrets/absent")
    assert fails_with(capsys, [command]) == (
        "respgate: RESPGATE_UPSTREAM_API_KEY_FILE names /run/secrets/absent, which cannot be "
        "read: No such file or directory"
    )


def test_a_setting_and_its_file_together_are_refused(
    secret: Any, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("RESPGATE_DATABASE_URL", "postgresql://db.internal/respgate")
    monkeypatch.setenv("RESPGATE_DATABASE_URL_FILE", secret("url", "postgresql://x/y"))
    assert fails_with(capsys, ["migrate"]) == (
        "respgate: RESPGATE_DATABASE_URL and RESPGATE_DATABASE_URL_FILE are both set: set one "
        "of them"
    )


def test_a_missing_file_for_a_named_variable_is_one_start_up_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    config = tmp_path / "respgate.toml"
    config.write_text(
        "[[upstreams]]\nname = 'openai'\nurl = 'https://api.openai.com'\n"
        "api_key_env = 'RESPGATE_TEST_KEY'\n"
    )
    monkeypatch.delenv("RESPGATE_TEST_KEY", raising=False)
    monkeypatch.setenv("RESPGATE_TEST_KEY_FILE", str(tmp_path / "absent"))
    assert fails_with(capsys, ["serve", "--config", str(config)]) == (
        f"respgate: RESPGATE_TEST_KEY_FILE names {tmp_path / 'absent'}, which cannot be read: "
        "No such file or directory"
    )


class Inner(BaseModel):
    token: str = ""
    token_file: str = ""
    password: str = ""


class FileNamedSettings(BaseSettings):
    """Settings whose own names end in ``_file``: their variables are theirs, not files."""

    model_config = SettingsConfigDict(env_prefix="RGTEST_", env_nested_delimiter="__")

    keys_file: str = ""
    keys: str = ""
    inner: Inner = Inner()
    tables: dict[str, Inner] = {}

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        return (SecretFilesEnvSource(settings_cls),)


def test_a_setting_named_like_a_file_keeps_its_variable(
    secret: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("RGTEST_KEYS_FILE", "/etc/respgate/keys.txt")
    monkeypatch.setenv("RGTEST_INNER__TOKEN_FILE", "/etc/respgate/token.txt")
    monkeypatch.setenv("RGTEST_TABLES__ONE__TOKEN_FILE", "/etc/respgate/one.txt")
    monkeypatch.setenv("RGTEST_TABLES__ONE__PASSWORD_FILE", secret("one", "pw-one\n"))
    monkeypatch.setenv("RGTEST_NOT_A_SETTING_FILE", "/absent/and/never/read")
    settings = FileNamedSettings()
    assert (settings.keys_file, settings.keys) == ("/etc/respgate/keys.txt", "")
    assert settings.inner == Inner(token_file="/etc/respgate/token.txt")
    assert settings.tables == {"one": Inner(token_file="/etc/respgate/one.txt", password="pw-one")}


# --------------------------------------------------------------------------- named variables


def test_a_named_variable_reads_its_file(secret: Any) -> None:
    environ = SecretEnviron({"PLAIN": "p", "TOKEN_FILE": secret("token", "t\n")})
    assert environ["PLAIN"] == "p"
    assert environ.get("TOKEN") == "t"
    assert environ.get("ABSENT") is None
    assert {"PLAIN", "TOKEN", "TOKEN_FILE"} <= set(environ)
    with pytest.raises(SecretFileError, match=r"^BROKEN_FILE names /absent, which cannot"):
        SecretEnviron({"BROKEN_FILE": "/absent"}).get("BROKEN")
    with pytest.raises(SecretFileError, match=r"^BOTH and BOTH_FILE are both set"):
        SecretEnviron({"BOTH": "1", "BOTH_FILE": secret("both", "2")}).get("BOTH")


def test_rest_engine_secrets_read_their_files(secret: Any) -> None:
    binding = RestBinding.model_validate(
        {
            "url": "https://api.example.com/things",
            "headers_from_env": {"X-Api-Key": "THINGS_KEY"},
            "auth": {"type": "bearer", "token_env": "THINGS_TOKEN"},
        }
    )
    environ = SecretEnviron(
        {"THINGS_KEY_FILE": secret("key", "k-1\n"), "THINGS_TOKEN_FILE": secret("tok", "t-1\n")}
    )
    request = build_request(binding, {}, environ)
    assert request.headers["X-Api-Key"] == "k-1"
    assert request.headers["Authorization"] == "Bearer t-1"


# --------------------------------------------------------------------------- end to end


class KeyRecordingUpstream(EngineUpstream):
    """The scripted model server, recording the Authorization header of every request."""

    def __init__(self, **fields: Any) -> None:
        super().__init__(**fields)
        self.authorizations: list[str | None] = []

    async def _infer(self, request: Request) -> Response:
        self.authorizations.append(request.headers.get("authorization"))
        return await super()._infer(request)


def both_tools(body: JsonObject) -> list[JsonObject]:
    if not tool_outputs(body):
        return [call("mcp__counter__whoami", {}, "c1"), call("mcp__things__whoami", {}, "c2")]
    return [message("done")]


@pytest.fixture
def rest_server() -> Iterator[tuple[str, list[str | None]]]:
    """A REST API answering with the Authorization it got; yields its URL and those headers."""
    seen: list[str | None] = []

    async def whoami(request: Request) -> JSONResponse:
        seen.append(request.headers.get("authorization"))
        return JSONResponse({"authorization": seen[-1]})

    with serve_in_thread(Starlette(routes=[Route("/whoami", whoami)])) as url:
        yield url, seen


def test_keys_from_files_reach_the_upstream_the_mcp_server_and_the_rest_api(
    tmp_path: Path,
    secret: Any,
    counter_url: str,
    rest_server: tuple[str, list[str | None]],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    rest_url, rest_seen = rest_server
    monkeypatch.setenv("RG_TEST_UPSTREAM_KEY_FILE", secret("upstream", "sk-upstream-file\n"))
    monkeypatch.setenv("RG_TEST_MCP_TOKEN_FILE", secret("mcp", "Bearer mcp-file\n"))
    monkeypatch.setenv("RG_TEST_REST_TOKEN_FILE", secret("rest", "rest-file\n"))
    tools = [
        {
            "name": "whoami",
            "parameters": {"type": "object", "properties": {}},
            "binding": {
                "url": f"{rest_url}/whoami",
                "auth": {"type": "bearer", "token_env": "RG_TEST_REST_TOKEN"},
            },
        }
    ]
    (tmp_path / "things.yaml").write_text(yaml.safe_dump(tools))
    upstream = KeyRecordingUpstream(script=both_tools)
    with serve_in_thread(upstream.app()) as upstream_url:
        config = tmp_path / "respgate.toml"
        config.write_text(
            f"""
[[upstreams]]
name = "main"
url = "{upstream_url}"
api_key_env = "RG_TEST_UPSTREAM_KEY"

[tool_engines.api]
kind = "rest"

[[tool_sets]]
namespace = "things"
engine = "api"
file = "things.yaml"

[[mcp.servers]]
label = "counter"
url = "{counter_url}"
headers_from_env = {{ Authorization = "RG_TEST_MCP_TOKEN" }}
"""
        )
        settings = load_settings(config, data_dir=tmp_path / "data")
        with in_process(create_app(settings)) as http:
            # No Authorization from the client: the upstream's configured key is sent.
            reply = http.post(
                "/v1/responses",
                json={
                    "model": "m",
                    "input": "who am I, twice?",
                    "tools": [
                        {"type": "mcp", "server_label": "counter", "require_approval": "never"},
                        {"type": "mcp", "server_label": "things", "require_approval": "never"},
                    ],
                },
            )
    assert reply.status_code == 200, reply.text
    calls = {
        item["server_label"]: json.loads(item["output"])["authorization"]
        for item in reply.json()["output"]
        if item["type"] == "mcp_call"
    }
    # The REST engine hides its secrets wherever it shows text: the server saw the token.
    assert calls == {"counter": "Bearer mcp-file", "things": "***"}
    assert rest_seen == ["Bearer rest-file"]
    assert upstream.authorizations == ["Bearer sk-upstream-file"] * 2
