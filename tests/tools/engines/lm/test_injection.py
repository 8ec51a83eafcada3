"""Error injection of the ``lm`` engine: the frequency of each category within statistical bounds
over 2,000 seeded calls, no model call for an injected outcome, identical outcomes for the same
seed whatever the interleaving of sessions, and a restored session continuing its sequence."""

from __future__ import annotations

import itertools
import json
import math

import pytest

from app.core.engines import EngineResult
from app.tools.engines.lm import ErrorInjection, InjectedError, LmEngine
from app.tools.engines.lm.injection import CATEGORIES, Category, Injector
from tests.tools.engines.lm.helpers import CREATE_CUSTOMER, GET_CUSTOMER, SimulatorUpstream, call

CALLS = 2000
SESSIONS = 40  # 40 sessions of 50 calls: short prompts, and several sessions drawn from
RATES: dict[Category, float] = {
    "network_error": 0.10,
    "unparseable_result": 0.15,
    "schema_violation": 0.05,
}


def injection(seed: int, rates: dict[Category, float] = RATES) -> ErrorInjection:
    return ErrorInjection.model_validate(
        {name: {"probability": p} for name, p in rates.items()} | {"seed": seed}
    )


def outcome(result: EngineResult) -> str:
    """The category a result shows (``ok``: the model's answer)."""
    if result.error is not None:
        return result.error.kind
    return "unparseable_result" if result.output.startswith("<garbled: ") else "ok"


def chosen_probability(rates: dict[Category, float], category: Category) -> float:
    """P(the category is the injected one): each subset that fires, times 1/|subset| when the
    category is in it (one of the fired categories is chosen at random)."""
    total = 0.0
    names = list(rates)
    for fired in itertools.product([False, True], repeat=len(names)):
        p = math.prod(rates[n] if f else 1 - rates[n] for n, f in zip(names, fired, strict=True))
        chosen = [n for n, f in zip(names, fired, strict=True) if f]
        if category in chosen:
            total += p / len(chosen)
    return total


async def run(engine: LmEngine, order: list[tuple[str, int]]) -> dict[str, list[EngineResult]]:
    """Runs one call per (session, n) of ``order``; the results by session."""
    results: dict[str, list[EngineResult]] = {}
    for session, n in order:
        if session not in results:
            await engine.setup(session)
            results[session] = []
        [result] = await engine.execute(
            session, [call(GET_CUSTOMER, '{"id": 1}', f"{session}-{n}")]
        )
        results[session].append(result)
    return results


def sequential_order() -> list[tuple[str, int]]:
    per = CALLS // SESSIONS
    return [(f"conv_{s}", n) for s in range(SESSIONS) for n in range(per)]


def interleaved_order() -> list[tuple[str, int]]:
    per = CALLS // SESSIONS
    return [(f"conv_{s}", n) for n in range(per) for s in reversed(range(SESSIONS))]


async def seeded_run(
    seed: int, order: list[tuple[str, int]]
) -> tuple[dict[str, list[EngineResult]], SimulatorUpstream]:
    upstream = SimulatorUpstream(default='{"id": 1, "name": "Ada"}')
    engine = LmEngine(upstream, "m", injection=injection(seed), max_history=4)
    return await run(engine, order), upstream


def shown(results: dict[str, list[EngineResult]]) -> dict[str, list[tuple[str, str, str]]]:
    """What each result says (the duration aside)."""
    return {
        session: [
            (r.output, r.error.kind if r.error else "", r.error.message if r.error else "")
            for r in rs
        ]
        for session, rs in results.items()
    }


async def test_frequencies_are_within_statistical_bounds() -> None:
    results, upstream = await seeded_run(20261125, sequential_order())
    outcomes = [outcome(r) for rs in results.values() for r in rs]
    assert len(outcomes) == CALLS
    for category in CATEGORIES:
        p = chosen_probability(RATES, category)
        count = outcomes.count(category)
        sd = math.sqrt(CALLS * p * (1 - p))
        assert abs(count - CALLS * p) <= 5 * sd, (category, count, CALLS * p, sd)
    # The model is asked exactly for the calls nothing was injected into.
    assert outcomes.count("ok") == len(upstream.requests)
    p_none = math.prod(1 - p for p in RATES.values())
    sd = math.sqrt(CALLS * p_none * (1 - p_none))
    assert abs(outcomes.count("ok") - CALLS * p_none) <= 5 * sd


async def test_categories_fire_independently() -> None:
    """With every probability at 1 all three fire each time, and the choice among them is even."""
    injector = Injector(injection(3, dict.fromkeys(CATEGORIES, 1.0)))
    drawn = [injector.draw("s", n) for n in range(CALLS)]
    counts = {
        name: sum(1 for d in drawn if d is not None and d.category == name) for name in CATEGORIES
    }
    p, sd = 1 / 3, math.sqrt(CALLS * (1 / 3) * (2 / 3))
    assert all(abs(c - CALLS * p) <= 5 * sd for c in counts.values()), counts


async def test_the_same_seed_gives_the_same_results_whatever_the_interleaving() -> None:
    first, _ = await seeded_run(42, sequential_order())
    again, _ = await seeded_run(42, interleaved_order())
    other, _ = await seeded_run(43, sequential_order())
    assert shown(again) == shown(first)
    assert shown(other) != shown(first)
    # Per session too: another seed moves most sessions' outcomes.
    moved = sum(shown(other)[s] != shown(first)[s] for s in first)
    assert moved > SESSIONS // 2


async def test_a_restored_session_continues_its_sequence() -> None:
    whole = LmEngine(SimulatorUpstream(default="{}"), "m", injection=injection(9))
    await whole.setup("s")
    straight = await whole.execute("s", [call(GET_CUSTOMER, "{}", str(n)) for n in range(60)])

    first = LmEngine(SimulatorUpstream(default="{}"), "m", injection=injection(9))
    await first.setup("s")
    head = await first.execute("s", [call(GET_CUSTOMER, "{}", str(n)) for n in range(30)])
    second = LmEngine(SimulatorUpstream(default="{}"), "m", injection=injection(9))
    await second.setup("s", first.get_session_state("s"))
    tail = await second.execute("s", [call(GET_CUSTOMER, "{}", str(n)) for n in range(30, 60)])

    assert [outcome(r) for r in head + tail] == [outcome(r) for r in straight]
    assert {outcome(r) for r in straight} > {"ok"}


async def test_simulate_draws_what_execute_then_draws() -> None:
    """A simulated batch puts the position back too: the same calls then executed get the
    same injected outcomes (a dry run shows what the real run will meet)."""
    engine = LmEngine(SimulatorUpstream(default="{}"), "m", injection=injection(5))
    await engine.setup("s")
    calls = [call(GET_CUSTOMER, "{}", str(n)) for n in range(40)]
    simulated = await engine.simulate("s", calls)
    executed = await engine.execute("s", calls)
    assert [outcome(r) for r in simulated] == [outcome(r) for r in executed]


async def test_a_network_error_never_asks_the_model() -> None:
    upstream = SimulatorUpstream()  # any model call fails the test
    rates: dict[Category, float] = {"network_error": 1.0}
    engine = LmEngine(upstream, "m", injection=injection(1, rates))
    await engine.setup("s")
    results = await engine.execute("s", [call(CREATE_CUSTOMER, "{}", str(n)) for n in range(20)])
    assert upstream.requests == []
    assert {(r.error.kind, r.error.message) for r in results if r.error} == {
        ("network_error", "Network error: the connection to the tool was reset.")
    }
    assert len(engine.get_session_state("s")["history"]) == 20


async def test_injected_results_and_their_messages() -> None:
    config = ErrorInjection(
        unparseable_result=InjectedError(probability=1.0),
        schema_violation=InjectedError(probability=1.0, message="expected an id"),
        seed=11,
    )
    engine = LmEngine(SimulatorUpstream(), "m", injection=config)
    await engine.setup("s")
    results = await engine.execute("s", [call(CREATE_CUSTOMER, "{}", str(n)) for n in range(50)])
    garbled = [r for r in results if r.ok]
    violated = [r for r in results if not r.ok]
    assert garbled and violated
    # An injected unparseable result is an ok result: malformed, non-empty text.
    for result in garbled:
        assert result.output.startswith("<garbled: ") and result.output.endswith(">")
        with pytest.raises(ValueError):
            json.loads(result.output)
    assert len({r.output for r in garbled}) == len(garbled)
    assert {(r.error.kind, r.error.message) for r in violated if r.error} == {
        ("schema_violation", "expected an id")
    }


def test_a_configured_unparseable_message_is_the_output() -> None:
    config = ErrorInjection(
        unparseable_result=InjectedError(probability=1.0, message="<html>502 Bad Gateway</html>"),
        seed=1,
    )
    drawn = Injector(config).draw("s", 0)
    assert drawn is not None and drawn.text == "<html>502 Bad Gateway</html>"


def test_no_injection_draws_nothing() -> None:
    injector = Injector(ErrorInjection(seed=1))
    assert all(injector.draw("s", n) is None for n in range(100))


def test_an_unseeded_injector_picks_a_seed() -> None:
    rates: dict[Category, float] = {"network_error": 0.5}
    a = Injector(injection(0, rates).model_copy(update={"seed": None}))
    b = Injector(injection(0, rates).model_copy(update={"seed": None}))
    assert a.seed != b.seed
