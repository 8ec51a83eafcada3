"""``LoopCheckpoint``: where a tool loop stands after a completed round, so that another run
(another process, or this one after a restart) continues from there instead of from round 1.

Upstream inference is stateless: what the next round sends is the loop's model items (the
request's input, the model's items, its calls as ``function_call`` and their results as
``function_call_output``), so a round is the unit of restart. A checkpoint holds those, the
output the client has seen, the number of completed rounds, the usage so far and the gateway
tool calls run so far (``max_tool_calls``). ``core.loop.ToolLoop`` reports one after each round
whose gateway calls all have results (``Checkpoints.on_round``) and starts from one
(``Checkpoints.resume_from``);
``core.job_runner`` stores it in the job record (``JobStore.save_checkpoint``) once the
round's events are logged, with ``sequence_number``: the number of the last logged event it
covers.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass, replace

from app.core.jsoncopy import clone
from app.protocol.json_types import JsonObject

_VERSION = 1


@dataclass(frozen=True, slots=True)
class LoopCheckpoint:
    """A tool loop's state after round ``round`` (0: after the approved calls that run before
    round 1). ``results_fed``: whether a tool result was fed to the model (a forced
    ``tool_choice`` is then relaxed to ``auto``). ``sequence_number``: the last logged event
    the checkpoint covers (-1 until the job run numbers it). ``calls_started``: gateway tool
    calls of the round after it have started (recorded before they start)."""

    output: list[JsonObject]
    model_items: list[JsonObject]
    round: int
    usage: JsonObject | None = None
    calls_run: int = 0
    results_fed: bool = False
    sequence_number: int = -1
    calls_started: bool = False

    def covering(self, sequence_number: int) -> LoopCheckpoint:
        return replace(self, sequence_number=sequence_number)

    def with_calls_started(self) -> LoopCheckpoint:
        """This checkpoint, marked: gateway tool calls of the round after it have started
        (a restart from it could run them twice)."""
        return replace(self, calls_started=True)

    def to_json(self) -> JsonObject:
        return {
            "version": _VERSION,
            "output": clone(self.output),
            "model_items": clone(self.model_items),
            "round": self.round,
            "usage": clone(self.usage),
            "calls_run": self.calls_run,
            "results_fed": self.results_fed,
            "sequence_number": self.sequence_number,
            "calls_started": self.calls_started,
        }

    @classmethod
    def from_json(cls, data: JsonObject) -> LoopCheckpoint | None:
        """The checkpoint stored as ``data``; None when it is not one this version reads (the
        job is then handled as one without a checkpoint)."""
        if data.get("version") != _VERSION:
            return None
        output, items, usage = data.get("output"), data.get("model_items"), data.get("usage")
        number, calls = data.get("round"), data.get("calls_run")
        sequence = data.get("sequence_number")
        if not (isinstance(output, list) and isinstance(items, list)):
            return None
        if not (isinstance(number, int) and isinstance(calls, int) and isinstance(sequence, int)):
            return None
        return cls(
            output=clone(output),
            model_items=clone(items),
            round=number,
            usage=clone(usage) if isinstance(usage, dict) else None,
            calls_run=calls,
            results_fed=data.get("results_fed") is True,
            sequence_number=sequence,
            calls_started=data.get("calls_started") is True,
        )


# Called by the loop at the end of each round whose gateway calls all have results.
RoundHook = Callable[[LoopCheckpoint], Awaitable[None]]
# Awaited by the loop just before gateway tool calls start.
CallsHook = Callable[[], Awaitable[None]]

# Where a loop stands before its first round: what a run that starts calls before it has a
# checkpoint marks as started (it is never continued from: such a job is failed).
START = LoopCheckpoint(output=[], model_items=[], round=0)


@dataclass(frozen=True, slots=True)
class Checkpoints:
    """How a tool loop uses checkpoints (a background run's; a foreground response has none
    and pays nothing): it starts from ``resume_from`` (None: from round 1) and awaits
    ``on_round`` with each new one (None: none is made), and ``before_calls`` before any
    gateway tool call starts."""

    resume_from: LoopCheckpoint | None = None
    on_round: RoundHook | None = None
    before_calls: CallsHook | None = None
