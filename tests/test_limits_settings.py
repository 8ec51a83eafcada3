"""The ``[limits]`` settings group: documented key by key, set from the file or the environment,
handed to the tool loop as plain numbers."""

from __future__ import annotations

from pathlib import Path

import pytest
from pydantic import ValidationError

from app.main import loop_limits
from app.options.limits import LimitsSettings
from app.settings import Settings, load_settings

ROOT = Path(__file__).resolve().parents[1]


def test_every_limits_key_is_documented_in_the_example_config() -> None:
    text = (ROOT / "config" / "respgate.example.toml").read_text()
    assert "[limits]" in text
    for name in LimitsSettings.model_fields:
        documented = f"\n{name} =" in text or f"[limits.{name}." in text
        assert documented, f"limits.{name} is not documented in respgate.example.toml"


def test_limits_from_the_file_and_the_environment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    config = tmp_path / "respgate.toml"
    config.write_text("[limits]\nmax_tools = 100\n[limits.keys.key_a]\nrequests_per_minute = 7\n")
    monkeypatch.setenv("RESPGATE_LIMITS__TOKENS_PER_MINUTE", "5000")
    limits = load_settings(config).limits
    assert (limits.max_tools, limits.tokens_per_minute) == (100, 5000)
    assert limits.rate_for("key_a", "default") == (7, 5000)
    assert limits.rate_limited


def test_the_loop_gets_the_limits_and_zero_timeouts_mean_none() -> None:
    settings = Settings(limits={"request_timeout": 0, "max_tool_calls_per_round": 3})
    limits = loop_limits(settings)
    assert limits.request_timeout is None and limits.background_timeout == 14400.0
    assert limits.max_calls_per_round == 3
    assert limits.max_result_bytes == 1024 * 1024
    assert (limits.max_tools, limits.max_mcp_servers) == (512, 32)


@pytest.mark.parametrize(
    "bad",
    [
        {"max_json_depth": 201},  # orjson writes at most 254 levels
        {"max_tool_result_bytes": 10},
        {"requests_per_minute": -1},
        {"unknown": 1},
    ],
)
def test_bad_limits_are_refused(bad: dict[str, int]) -> None:
    with pytest.raises(ValidationError):
        LimitsSettings(**bad)  # type: ignore[arg-type]
