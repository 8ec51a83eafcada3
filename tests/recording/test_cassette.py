from __future__ import annotations

import json
from pathlib import Path

import pytest

from app.recording.cassette import (
    Cassette,
    CassetteError,
    RecordedRequest,
    RecordedResponse,
    Turn,
    dump_cassette,
    load_cassette,
    mask_headers,
    recorded_models,
    split_sse_lines,
    sse_data_events,
)
from tests.recordings import FIXTURES, cassette_files, fixture

# The copies of tests/fixtures/upstream (tests/recording/test_shared_corpus.py loads ../shared).
FILES = cassette_files(FIXTURES)


def relative_name(path: Path) -> str:
    return str(path.relative_to(FIXTURES))


def test_the_fixtures_are_found() -> None:
    assert len(FILES) >= 15
    assert {"tools.json", "pipeline_tools.json"}.isdisjoint(p.name for p in FILES)


@pytest.mark.parametrize("path", FILES, ids=relative_name)
def test_every_fixture_cassette_loads(path: Path) -> None:
    cassette = load_cassette(path)
    assert cassette.turns
    for turn in cassette.turns:
        assert turn.filename
        assert turn.request.method in {"GET", "POST", "DELETE"}
        assert turn.request.path.startswith("/v1/")
        assert 100 <= turn.response.status_code < 600
        if turn.response.sse is not None:
            assert turn.response.sse, "an SSE turn has lines"
            assert all(line.endswith("\n") for line in turn.response.sse)
            assert sse_data_events(turn), "an SSE turn has JSON data events"
        else:
            assert turn.response.body is not None


@pytest.mark.parametrize("path", FILES, ids=relative_name)
def test_dump_load_round_trip_preserves_turns(path: Path, tmp_path: Path) -> None:
    original = load_cassette(path)
    out = tmp_path / "nested" / "copy.yaml"
    dump_cassette(original, out)
    again = load_cassette(out)
    assert again.turns == original.turns
    assert again.extra == original.extra
    assert [p.name for p in out.parent.iterdir()] == ["copy.yaml"], "no temp file left behind"


@pytest.mark.parametrize(
    "relative",
    [
        "text_only/responses/resp-single-gpt-4o-streaming.yaml",
        "text_only/conversation/conv-two-turn-gpt-4o-streaming.yaml",
        "conversations/conversations-edge-cases-gateway.yaml",
        "tool_calls/tool-call-required-Qwen-Qwen3-30B-A3B-FP8-streaming.yaml",
        "web_search/gpt_oss_web_search_streaming.yaml",
    ],
)
def test_dump_reproduces_recorder_text_byte_for_byte(relative: str, tmp_path: Path) -> None:
    out = tmp_path / "copy.yaml"
    dump_cassette(load_cassette(fixture(relative)), out)
    assert out.read_bytes() == fixture(relative).read_bytes()


def test_sglang_provider_block_is_kept() -> None:
    cassette = load_cassette(fixture("sglang/sglang-stateful-Qwen-Qwen3-8B-nonstreaming.yaml"))
    assert cassette.extra["provider"]["name"] == "sglang"
    assert len(cassette.turns) == 2


def test_event_fixture_becomes_one_valid_sse_turn() -> None:
    cassette = load_cassette(fixture("events/text-only-vllm-gemma4.yaml"))
    (turn,) = cassette.turns
    assert (turn.request.method, turn.request.path) == ("POST", "/v1/responses")
    body = turn.request.body
    assert isinstance(body, dict)
    assert body["model"] == "google/gemma-4-26B-A4B-it"
    assert body["stream"] is True
    sse = turn.response.sse
    assert sse is not None
    assert sse[0].startswith("data: {") and sse[0].endswith("}\n")
    assert sse[1] == "\n"
    assert len(sse) % 2 == 0 and all(line == "\n" for line in sse[1::2])
    events = sse_data_events(turn)
    assert events[0]["type"] == "response.created"
    assert events[-1]["type"] == "response.completed"
    assert cassette.extra["expected_text"] == "HELLO"
    assert recorded_models(cassette) == ["google/gemma-4-26B-A4B-it"]


def test_json_cassette_without_headers_loads() -> None:
    cassette = load_cassette(fixture("file_search/vllm-file-search-openai-gpt-oss-20b.json"))
    assert [t.filename for t in cassette.turns] == ["t1", "t2"]
    assert all(t.request.headers == {} and t.request.query_params == {} for t in cassette.turns)
    assert "metadata" in cassette.extra
    assert cassette.turns[0].response.content_type == "application/json"


def test_missing_status_code_defaults_to_200(tmp_path: Path) -> None:
    path = tmp_path / "c.json"
    path.write_text(
        json.dumps(
            {
                "turns": [
                    {
                        "request": {"method": "post", "path": "/v1/responses", "body": {}},
                        "response": {"body": {"id": "resp_1"}},
                    }
                ]
            }
        )
    )
    (turn,) = load_cassette(path).turns
    assert turn.response.status_code == 200
    assert turn.request.method == "POST"


@pytest.mark.parametrize(
    "text",
    ["- just a list\n", "turns: 3\n", "sessions: []\n", "other: 1\n", "turns:\n- request: {}\n"],
)
def test_malformed_cassettes_raise_cassette_error(text: str, tmp_path: Path) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text(text)
    with pytest.raises(CassetteError):
        load_cassette(path)


def test_missing_file_raises_cassette_error(tmp_path: Path) -> None:
    with pytest.raises(CassetteError):
        load_cassette(tmp_path / "absent.yaml")


def test_mask_headers_keeps_subset_and_masks_authorization() -> None:
    masked = mask_headers(
        {
            "Authorization": "Bearer sk-secret",
            "Content-Type": "application/json",
            "Accept": "*/*",
            "User-Agent": "OpenAI/Python 1.0",
            "OpenAI-Beta": "responses=v1",
            "X-Run-Id": "scenario/step",
            "Host": "example.com",
            "Cookie": "a=b",
            "X-Stainless-Lang": "python",
        }
    )
    assert masked == {
        "authorization": "Bearer ***",
        "content-type": "application/json",
        "accept": "*/*",
        "user-agent": "OpenAI/Python 1.0",
        "openai-beta": "responses=v1",
        "x-run-id": "scenario/step",
    }


def test_split_sse_lines_keeps_endings_and_only_splits_on_newline() -> None:
    text = 'event: a\ndata: {"t":"x\u2028y"}\n\ndata: [DONE]\n\n'
    lines = split_sse_lines(text)
    assert lines == ["event: a\n", 'data: {"t":"x\u2028y"}\n', "\n", "data: [DONE]\n", "\n"]
    assert "".join(lines) == text
    assert split_sse_lines("data: 1\ndata: partial") == ["data: 1\n", "data: partial"]


def test_sse_data_events_joins_multiline_data_and_skips_done() -> None:
    response = RecordedResponse(
        sse=[
            "event: one\n",
            'data: {"a":\n',
            "data: 1}\n",
            "\n",
            ": comment\n",
            'data: {"b": 2}\n',
            "\n",
            "data: [DONE]\n",
            "\n",
        ]
    )
    assert sse_data_events(response) == [{"a": 1}, {"b": 2}]


def test_dump_of_constructed_cassette_uses_recorder_layout(tmp_path: Path) -> None:
    cassette = Cassette(
        turns=[
            Turn(
                filename="t1",
                request=RecordedRequest(
                    method="POST", path="/v1/responses", body={"model": "m", "input": "héllo"}
                ),
                response=RecordedResponse(
                    headers={"content-type": "text/event-stream; charset=utf-8"},
                    sse=["event: x\n", 'data: {"type":"x"}\n', "\n"],
                ),
            )
        ]
    )
    out = tmp_path / "c.yaml"
    dump_cassette(cassette, out)
    text = out.read_text(encoding="utf-8")
    assert text.startswith("turns:\n- filename: t1\n  request:\n    body:\n")
    assert "héllo" in text
    assert "    sse:\n    - 'event: x\n\n      '\n" in text
    assert load_cassette(out).turns == cassette.turns
