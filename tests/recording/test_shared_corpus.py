"""Every recording of ../shared: it loads, and its streams fold through the accumulator and the
service as the copies under tests/fixtures do (tests/core). Skipped without ../shared."""

from __future__ import annotations

from pathlib import Path

import pytest

from app.recording.cassette import dump_cassette, load_cassette, sse_data_events
from tests.cassette_cases import streaming_cases
from tests.core.test_accumulator import assert_folds_to_the_final_output
from tests.core.test_service import assert_stream_path_equals_json_path, with_final_output
from tests.recordings import cassette_files


def test_every_shared_cassette_loads(shared_cassettes: Path) -> None:
    files = cassette_files(shared_cassettes)
    assert len(files) >= 70
    for path in files:
        cassette = load_cassette(path)
        assert cassette.turns, path
        for turn in cassette.turns:
            where = f"{path.relative_to(shared_cassettes)}:{turn.filename}"
            assert turn.filename
            assert turn.request.method in {"GET", "POST", "DELETE"}, where
            assert turn.request.path.startswith("/v1/"), where
            assert 100 <= turn.response.status_code < 600, where
            if turn.response.sse is not None:
                assert turn.response.sse, f"{where}: an SSE turn has lines"
                assert all(line.endswith("\n") for line in turn.response.sse), where
                assert sse_data_events(turn), f"{where}: an SSE turn has JSON data events"
            else:
                assert turn.response.body is not None, where


@pytest.mark.parametrize(
    "relative",
    [
        "tool_calls/multi_turn/responses_tool_calls_tool_output_only.yaml",
        "async_tools/async-tool-gateway-wait-tool-Qwen-Qwen3.6-35B-A3B-nonstreaming.yaml",
        "text_only/conversation/conv-isolation-gpt-4o-nonstreaming.yaml",
    ],
)
def test_dump_reproduces_recorder_text_byte_for_byte(
    shared_cassettes: Path, relative: str, tmp_path: Path
) -> None:
    out = tmp_path / "copy.yaml"
    dump_cassette(load_cassette(shared_cassettes / relative), out)
    assert out.read_bytes() == (shared_cassettes / relative).read_bytes()


def test_every_shared_stream_folds_to_the_upstreams_final_output(shared_cassettes: Path) -> None:
    cases = streaming_cases(shared_cassettes)
    assert len(cases) >= 15
    for stream_case in cases:
        try:
            assert_folds_to_the_final_output(stream_case)
        except AssertionError as exc:
            raise AssertionError(f"{stream_case.name}: {exc}") from exc


async def test_every_shared_stream_gives_the_json_paths_response(shared_cassettes: Path) -> None:
    cases = with_final_output(streaming_cases(shared_cassettes))
    assert len(cases) >= 10
    for stream_case in cases:
        try:
            await assert_stream_path_equals_json_path(stream_case)
        except AssertionError as exc:
            raise AssertionError(f"{stream_case.name}: {exc}") from exc
