"""Configuration precedence: flags > RESPGATE_* environment > TOML file > defaults."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest
from pydantic import ValidationError

from app.core.loop import LoopLimits
from app.options.egress import EgressSettings
from app.settings import Settings, load_settings
from app.tool_settings import McpServerConfig, McpSettings

ROOT = Path(__file__).resolve().parent.parent


def test_defaults(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("RESPGATE_DATA_DIR", raising=False)
    settings = Settings()
    assert settings.host == "127.0.0.1"  # loopback: [auth] mode "auto" is off there
    assert settings.port == 9000
    assert settings.data_dir == Path("./data")
    assert settings.max_body_bytes == 10 * 1024 * 1024


def test_environment_overrides_defaults(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RESPGATE_PORT", "9100")
    monkeypatch.setenv("RESPGATE_UPSTREAM_URL", "http://vllm:8000/v1/")
    monkeypatch.setenv("RESPGATE_UPSTREAM_API_KEY", "sk-env")
    settings = load_settings()
    assert settings.port == 9100
    assert settings.upstream_url == "http://vllm:8000"
    assert settings.upstream_api_key == "sk-env"


def test_toml_file_then_environment_then_flags(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    config = tmp_path / "respgate.toml"
    config.write_text('port = 9200\nupstream_url = "http://toml:1"\nlog_level = "debug"\n')
    settings = load_settings(config)
    assert (settings.port, settings.upstream_url, settings.log_level) == (
        9200,
        "http://toml:1",
        "debug",
    )
    monkeypatch.setenv("RESPGATE_PORT", "9300")
    assert load_settings(config).port == 9300
    assert load_settings(config, port=9400).port == 9400
    # the file is not remembered by later loads
    monkeypatch.delenv("RESPGATE_PORT")
    assert load_settings().port == 9000


def test_example_config_documents_every_key() -> None:
    example = ROOT / "config" / "respgate.example.toml"
    text = example.read_text()
    for name in Settings.model_fields:
        documented = f"{name} =" in text or f"[{name}]" in text
        assert documented, f"{name} is not documented in {example.name}"
    for name in McpSettings.model_fields:
        documented = f"{name} =" in text or f"[[mcp.{name}]]" in text
        assert documented, f"mcp.{name} is not documented in {example.name}"
    for name in EgressSettings.model_fields:
        assert f"{name} =" in text, f"egress.{name} is not documented in {example.name}"
    for name in McpServerConfig.model_fields:
        assert f"#   {name} " in text, f"mcp.servers {name} is not documented in {example.name}"
    assert load_settings(example) == Settings()


def test_invalid_values_are_rejected(tmp_path: Path) -> None:
    config = tmp_path / "bad.toml"
    config.write_text("port = 'nine'\n")
    with pytest.raises(ValidationError):
        load_settings(config)
    with pytest.raises(FileNotFoundError):
        load_settings(tmp_path / "missing.toml")


def test_tool_loop_defaults_and_bounds(monkeypatch: pytest.MonkeyPatch) -> None:
    settings = Settings()
    assert (settings.tool_max_rounds, settings.tool_call_timeout) == (10, 60.0)
    assert (settings.tool_max_concurrency, settings.tool_round_timeout) == (5, None)
    assert settings.mcp == McpSettings()
    assert settings.mcp.connect_timeout == 10.0
    monkeypatch.setenv("RESPGATE_TOOL_ROUND_TIMEOUT", "30")
    assert load_settings().tool_round_timeout == 30.0
    for key, value in [
        ("tool_max_rounds", "many"),
        ("tool_call_timeout", 0),
        ("tool_max_concurrency", 65),
        ("tool_round_timeout", -1),
    ]:
        with pytest.raises(ValidationError):
            Settings(**{key: value})
    # The tool loop's iteration cap is clamped to [1, 32] wherever it is set.
    assert [Settings(tool_max_rounds=n).tool_max_rounds for n in (-5, 0, 1, 32, 33, 101)] == [
        1,
        1,
        1,
        32,
        32,
        32,
    ]
    assert [LoopLimits(max_rounds=n).max_rounds for n in (0, 7, 100)] == [1, 7, 32]


def test_mcp_servers_from_toml(tmp_path: Path) -> None:
    config = tmp_path / "respgate.toml"
    config.write_text(
        textwrap.dedent(
            """
            tool_max_rounds = 4

            [mcp]
            connect_timeout = 3.5

            [[mcp.servers]]
            label = "docs"
            url = "https://mcp.example.com/mcp"
            headers = { "X-Team" = "search" }
            headers_from_env = { "Authorization" = "DOCS_TOKEN" }
            allowed_tools = ["search"]
            description = "Documentation search"

            [[mcp.servers]]
            label = "legacy"
            url = "http://127.0.0.1:8080/sse"

            [[mcp.servers]]
            label = "files"
            command = ["python", "-m", "files_server", "--stdio"]
            env = { "ROOT" = "/srv" }
            require_approval = { never = { tool_names = ["read"] } }
            """
        )
    )
    settings = load_settings(config)
    assert settings.tool_max_rounds == 4
    mcp = settings.mcp
    assert mcp.connect_timeout == 3.5
    docs, legacy, files = mcp.servers
    assert (docs.require_approval, docs.allowed_tools) == ("never", ["search"])

    spec = docs.to_spec({"DOCS_TOKEN": "Bearer s3cret"})
    assert (spec.label, spec.url, spec.transport) == (
        "docs",
        "https://mcp.example.com/mcp",
        "streamable_http",
    )
    assert dict(spec.headers) == {"X-Team": "search", "Authorization": "Bearer s3cret"}
    with pytest.raises(ValueError, match="DOCS_TOKEN"):
        docs.to_spec({})

    assert legacy.to_spec({}).transport == "sse"

    stdio = files.to_spec({})
    assert (stdio.transport, stdio.url) == ("stdio", None)
    assert stdio.command == ("python", "-m", "files_server", "--stdio")
    assert dict(stdio.env) == {"ROOT": "/srv"}
    assert files.require_approval == {"never": {"tool_names": ["read"]}}


def test_nested_environment_keys(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RESPGATE_EGRESS__ALLOW_HOSTS", '["a.example.com", "b.example.com"]')
    monkeypatch.setenv("RESPGATE_MCP__CONNECT_TIMEOUT", "3.5")
    settings = load_settings()
    assert settings.egress.allow_hosts == ["a.example.com", "b.example.com"]
    assert settings.egress.allow_public is True
    assert settings.mcp.connect_timeout == 3.5

    # the environment overrides the file key by key; the file's other keys stay
    config = tmp_path / "respgate.toml"
    config.write_text('[egress]\nresolve_timeout = 1.5\nallow_hosts = ["toml.example.com"]\n')
    settings = load_settings(config)
    assert settings.egress.allow_hosts == ["a.example.com", "b.example.com"]
    assert settings.egress.resolve_timeout == 1.5

    monkeypatch.setenv(
        "RESPGATE_MCP__SERVERS", '[{"label": "env", "url": "http://127.0.0.1:9/mcp"}]'
    )
    assert [server.label for server in load_settings().mcp.servers] == ["env"]


@pytest.mark.parametrize(
    ("server", "message"),
    [
        ({"label": "both", "url": "http://h/mcp", "command": ["x"]}, "exactly one of url"),
        ({"label": "neither"}, "exactly one of url"),
        ({"label": "bad label!", "url": "http://h/mcp"}, "pattern"),
        ({"label": "x" * 65, "url": "http://h/mcp"}, "pattern"),
        ({"label": "ftp", "url": "ftp://h/mcp"}, "http"),
        ({"label": "empty", "command": []}, "command"),
        ({"label": "stdio-sse", "command": ["x"], "transport": "sse"}, "url servers only"),
        ({"label": "t", "url": "http://h/mcp", "transport": "stdio"}, "transport"),
        ({"label": "a", "url": "http://h/mcp", "require_approval": "sometimes"}, "approval"),
        ({"label": "typo", "url": "http://h/mcp", "header": {}}, "header"),
    ],
)
def test_invalid_mcp_servers_are_rejected(server: dict[str, object], message: str) -> None:
    with pytest.raises(ValidationError, match=message):
        McpSettings(servers=[server])  # type: ignore[list-item]


def test_mcp_labels_are_unique(tmp_path: Path) -> None:
    config = tmp_path / "dup.toml"
    config.write_text(
        '[[mcp.servers]]\nlabel = "a"\nurl = "http://h/mcp"\n'
        '[[mcp.servers]]\nlabel = "a"\ncommand = ["x"]\n'
    )
    with pytest.raises(ValidationError, match="used more than once"):
        load_settings(config)
    with pytest.raises(ValidationError):
        load_settings(tmp_path / "dup.toml", mcp={"unknown": 1})


def test_mcp_server_config_defaults() -> None:
    server = McpServerConfig(label="x", url="http://127.0.0.1:1/mcp")
    assert server.require_approval == "never"
    assert (server.allowed_tools, server.description, server.transport) == (None, None, None)
    assert (server.env, server.headers, server.headers_from_env) == ({}, {}, {})


def test_web_search_provider_needs_its_url_or_key() -> None:
    import pydantic

    from app.settings import Settings

    with pytest.raises(pydantic.ValidationError, match="web_search_base_url"):
        Settings(web_search_provider="searxng")
    with pytest.raises(pydantic.ValidationError, match="web_search_api_key"):
        Settings(web_search_provider="brave")
    assert Settings(
        web_search_provider="searxng", web_search_base_url="http://s"
    ).web_search_provider


# ---------------------------------------------------------------------------- upstreams


def test_single_upstream_kind_from_env_and_flag(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RESPGATE_UPSTREAM_KIND", "chat")
    monkeypatch.setenv("RESPGATE_UPSTREAM_URL", "http://ollama:11434/v1")
    settings = load_settings()
    (only,) = settings.resolved_upstreams()
    assert (only.name, only.kind, only.url, only.default) == (
        "default",
        "chat",
        "http://ollama:11434",
        True,
    )
    assert load_settings(upstream_kind="responses").upstream_kind == "responses"
    monkeypatch.setenv("RESPGATE_UPSTREAM_KIND", "messages")
    with pytest.raises(ValidationError, match="upstream_kind"):
        load_settings()


def test_cli_passes_upstream_kind(monkeypatch: pytest.MonkeyPatch) -> None:
    from app.cli import build_parser

    args = build_parser().parse_args(
        ["serve", "--upstream-url", "http://127.0.0.1:11434", "--upstream-kind", "chat"]
    )
    assert (args.upstream_url, args.upstream_kind) == ("http://127.0.0.1:11434", "chat")
    with pytest.raises(SystemExit):
        build_parser().parse_args(["serve", "--upstream-kind", "anthropic"])


def test_named_upstreams_from_toml(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    config = tmp_path / "respgate.toml"
    config.write_text(
        textwrap.dedent(
            """
            [[upstreams]]
            name = "vllm"
            url = "http://vllm:8000/v1/"
            models = ["Qwen/*"]

            [[upstreams]]
            name = "ollama"
            url = "http://ollama:11434"
            kind = "chat"
            api_key_env = "OLLAMA_KEY"
            read_timeout = 30
            models = ["llama3.2", "qwen3:*"]
            model_map = { small = "qwen3:0.6b" }
            default = true
            reasoning_history = "reasoning"
            stream_usage = false
            """
        )
    )
    settings = load_settings(config)
    default, other = settings.resolved_upstreams()
    assert (default.name, default.kind, default.read_timeout) == ("ollama", "chat", 30)
    assert default.model_map == {"small": "qwen3:0.6b"}
    assert (default.reasoning_history, default.stream_usage) == ("reasoning", False)
    assert (other.name, other.url, other.kind) == ("vllm", "http://vllm:8000", "responses")
    with pytest.raises(ValueError, match="OLLAMA_KEY"):
        default.resolved_api_key({})
    assert default.resolved_api_key({"OLLAMA_KEY": "k"}) == "k"
    assert other.resolved_api_key({}) is None


def test_first_upstream_is_the_default_when_none_is_marked() -> None:
    settings = Settings(
        upstreams=[{"name": "a", "url": "http://a"}, {"name": "b", "url": "http://b"}]
    )
    assert [u.name for u in settings.resolved_upstreams()] == ["a", "b"]


@pytest.mark.parametrize(
    ("values", "message"),
    [
        (
            {"upstreams": [{"name": "a", "url": "http://a"}], "upstream_url": "http://x"},
            "not both",
        ),
        (
            {"upstreams": [{"name": "a", "url": "http://a"}, {"name": "a", "url": "http://b"}]},
            "more than once",
        ),
        (
            {
                "upstreams": [
                    {"name": "a", "url": "http://a", "default": True},
                    {"name": "b", "url": "http://b", "default": True},
                ]
            },
            "only one upstream can be the default",
        ),
        ({"upstreams": [{"name": "a b", "url": "http://a"}]}, "name"),
        ({"upstreams": [{"name": "a", "url": "http://a", "kind": "grpc"}]}, "kind"),
        ({"upstreams": [{"name": "a", "url": "http://a", "typo": 1}]}, "typo"),
    ],
)
def test_invalid_upstreams_are_rejected(values: dict[str, object], message: str) -> None:
    with pytest.raises(ValidationError, match=message):
        Settings(**values)  # type: ignore[arg-type]


def test_tool_set_paths_are_relative_to_the_config_file(tmp_path: Path) -> None:
    folder = tmp_path / "conf"
    folder.mkdir()
    config = folder / "respgate.toml"
    config.write_text(
        '[tool_engines.api]\nkind = "rest"\n'
        '[[tool_sets]]\nnamespace = "crm"\nengine = "api"\nfile = "tools/crm.yaml"\n'
        '[[tool_sets]]\nnamespace = "pets"\nengine = "api"\nopenapi = "/srv/petstore.yaml"\n'
    )
    crm, pets = load_settings(config).tool_sets
    assert crm.file == folder.resolve() / "tools" / "crm.yaml"
    assert pets.openapi == Path("/srv/petstore.yaml")
