"""Streaming /v1/responses turns of recordings, as test cases: by default the copies under
tests/fixtures/upstream (tests of pure modules never read ../shared)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from app.recording.cassette import load_cassette, sse_data_events
from tests.recordings import FIXTURES


@dataclass(frozen=True)
class StreamCase:
    name: str
    events: list[dict[str, Any]]
    request: dict[str, Any]
    expected_text: str | None

    @property
    def final_response(self) -> dict[str, Any] | None:
        for event in reversed(self.events):
            if event.get("type") in ("response.completed", "response.done"):
                response = event.get("response")
                return response if isinstance(response, dict) else None
        return None


def streaming_cases(root: Path = FIXTURES) -> list[StreamCase]:
    cases: list[StreamCase] = []
    for path in sorted(root.rglob("*.yaml")):
        cassette = load_cassette(path)
        for turn in cassette.turns:
            if turn.request.path != "/v1/responses" or not turn.response.sse:
                continue
            events = sse_data_events(turn)
            if not any(str(e.get("type", "")).startswith("response.") for e in events):
                continue
            body = turn.request.body if isinstance(turn.request.body, dict) else {}
            expected = cassette.extra.get("expected_text")
            cases.append(
                StreamCase(
                    name=f"{path.relative_to(root)}:{turn.filename}",
                    events=events,
                    request=body,
                    expected_text=expected if isinstance(expected, str) else None,
                )
            )
    return cases


def case(name_part: str) -> StreamCase:
    for candidate in streaming_cases():
        if name_part in candidate.name:
            return candidate
    raise LookupError(name_part)
