"""What the tool loop does after a round: ``decide_next`` (pure, no I/O)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from app.protocol.items import FunctionCallItem, is_function_call
from app.protocol.json_types import JsonObject


@dataclass(frozen=True, slots=True)
class Continue:
    """Gateway calls to run, then another round."""

    calls: list[FunctionCallItem]


@dataclass(frozen=True, slots=True)
class RequiresClientAction:
    """The client must act: run the round's gateway calls, then return the client's calls
    (``function_call``) and the approval requests."""

    calls: list[FunctionCallItem]
    client_calls: list[FunctionCallItem]
    approvals: list[FunctionCallItem] = field(default_factory=list)


@dataclass(frozen=True, slots=True)
class Done:
    """The model answered: the response is complete."""


@dataclass(frozen=True, slots=True)
class Incomplete:
    """The round cap is reached while the model still wants tools: ``calls`` are not run."""

    calls: list[FunctionCallItem]
    reason: str


LoopDecision = Continue | RequiresClientAction | Done | Incomplete

MAX_ROUNDS_REASON = "max_tool_rounds"


def decide_next(
    round_output: list[JsonObject],
    gateway_names: Mapping[str, Any],
    round_number: int,
    max_rounds: int,
    *,
    needs_approval: frozenset[str] = frozenset(),
) -> LoopDecision:
    """Classify the function calls of a finished round.

    ``round_output`` is the round's output as the upstream produced it (function calls still
    ``function_call`` items); ``gateway_names`` are the function names the gateway owns,
    ``needs_approval`` the item ids of gateway calls that wait for the client's approval.
    ``round_number`` counts from 1.
    """
    calls: list[FunctionCallItem] = []
    client_calls: list[FunctionCallItem] = []
    approvals: list[FunctionCallItem] = []
    for item in round_output:
        if not is_function_call(item):
            continue
        if item["name"] not in gateway_names:
            client_calls.append(item)
        elif item["id"] in needs_approval:
            approvals.append(item)
        else:
            calls.append(item)
    if client_calls or approvals:
        return RequiresClientAction(calls, client_calls, approvals)
    if not calls:
        return Done()
    if round_number >= max_rounds:
        return Incomplete(calls, MAX_ROUNDS_REASON)
    return Continue(calls)
