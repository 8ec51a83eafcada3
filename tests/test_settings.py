"""Configuration precedence: flags > RESPGATE_* environment > TOML file > defaults."""

from __future__ import annotations

from pathlib import Path

import pytest
from pydantic import ValidationError

from app.settings import Settings, load_settings

ROOT = Path(__file__).resolve().parent.parent


def test_defaults(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("RESPGATE_DATA_DIR", raising=False)
    settings = Settings()
    assert settings.host == "0.0.0.0"
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
        assert f"{name} =" in text, f"{name} is not documented in {example.name}"
    assert load_settings(example) == Settings()


def test_invalid_values_are_rejected(tmp_path: Path) -> None:
    config = tmp_path / "bad.toml"
    config.write_text("port = 'nine'\n")
    with pytest.raises(ValidationError):
        load_settings(config)
    with pytest.raises(FileNotFoundError):
        load_settings(tmp_path / "missing.toml")
