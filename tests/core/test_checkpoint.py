"""``LoopCheckpoint``'s stored form: a round trip, and what it refuses to read (a job whose
checkpoint cannot be read is taken over as one without a checkpoint)."""

from __future__ import annotations

import pytest

from app.core.checkpoint import LoopCheckpoint
from app.protocol.json_types import JsonObject


def test_a_checkpoint_round_trips_through_json() -> None:
    checkpoint = LoopCheckpoint(
        output=[{"type": "mcp_call", "id": "mcp_1", "output": "5 ✓"}],
        model_items=[{"type": "function_call_output", "call_id": "c1", "output": "5"}],
        round=2,
        usage={"input_tokens": 3, "output_tokens": 4, "total_tokens": 7},
        calls_run=3,
        results_fed=True,
    ).covering(41)
    assert checkpoint.sequence_number == 41
    assert LoopCheckpoint.from_json(checkpoint.to_json()) == checkpoint
    marked = checkpoint.with_calls_started()
    assert marked.calls_started and not checkpoint.calls_started
    assert LoopCheckpoint.from_json(marked.to_json()) == marked
    unmarked = {k: v for k, v in checkpoint.to_json().items() if k != "calls_started"}
    assert LoopCheckpoint.from_json(unmarked) == checkpoint  # written before the mark existed


@pytest.mark.parametrize(
    "data",
    [
        {},
        {"version": 2, "output": [], "model_items": [], "round": 1, "calls_run": 0},
        {"version": 1, "output": {}, "model_items": [], "round": 1, "calls_run": 0},
        {"version": 1, "output": [], "model_items": [], "round": "1", "calls_run": 0},
        {"version": 1, "output": [], "model_items": [], "round": 1, "calls_run": 0},
    ],
)
def test_what_is_not_a_checkpoint_of_this_version_reads_as_none(data: JsonObject) -> None:
    assert LoopCheckpoint.from_json(data) is None
