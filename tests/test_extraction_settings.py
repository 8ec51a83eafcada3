"""``[extraction]`` (``app/options/extraction.py``): the TOML table, the nested environment
keys, the bounds, and the budget it gives the files feature. That the budget reaches the
extraction child through ``create_app`` is shown by tests/api/test_hostile_uploads.py (its
messages name the configured page limit and time budget)."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest
from pydantic import ValidationError

from app.files.extract import MIB, ExtractionLimits
from app.options.extraction import ExtractionSettings
from app.settings import Settings, load_settings


def test_the_defaults_are_the_extractors_defaults() -> None:
    assert Settings().extraction.limits() == ExtractionLimits()
    assert ExtractionLimits().memory_bytes == 1024 * MIB


def test_toml_table_then_environment(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    config = tmp_path / "respgate.toml"
    config.write_text(
        textwrap.dedent(
            """
            [extraction]
            timeout_seconds = 30
            memory_mb = 512
            max_pdf_pages = 100
            max_unzipped_mb = 64
            """
        )
    )
    monkeypatch.setenv("RESPGATE_EXTRACTION__MAX_CONCURRENCY", "4")
    monkeypatch.setenv("RESPGATE_EXTRACTION__MEMORY_MB", "768")
    limits = load_settings(config).extraction.limits()
    assert limits == ExtractionLimits(
        timeout_seconds=30.0,
        memory_bytes=768 * MIB,
        max_concurrency=4,
        max_pdf_pages=100,
        max_unzipped_bytes=64 * MIB,
    )


@pytest.mark.parametrize(
    "values",
    [
        {"timeout_seconds": 0},
        {"memory_mb": 16},
        {"max_concurrency": 0},
        {"max_text_concurrency": 65},
        {"max_output_chars": 0},
        {"unknown_key": 1},
    ],
)
def test_invalid_values_are_rejected(values: dict[str, object]) -> None:
    with pytest.raises(ValidationError):
        ExtractionSettings.model_validate(values)


def test_limits_travel_to_the_child_as_json() -> None:
    limits = ExtractionSettings(timeout_seconds=5, max_zip_entries=7).limits()
    assert ExtractionLimits.from_json(limits.to_json()) == limits
    assert ExtractionLimits.from_json({**limits.to_json(), "from_a_newer_gateway": 1}) == limits
