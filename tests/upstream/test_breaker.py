"""The circuit breaker's state machine on a clock the test steps by hand (nothing sleeps)."""

from __future__ import annotations

import logging

import pytest

from app.upstream.breaker import CircuitBreaker, CircuitState, Outcome, Pass


class FakeClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def breaker(clock: FakeClock, threshold: int = 3, cooldown: float = 30.0) -> CircuitBreaker:
    return CircuitBreaker("vllm", threshold=threshold, cooldown=cooldown, clock=clock)


def fail(circuit: CircuitBreaker, times: int = 1) -> None:
    for _ in range(times):
        admitted = circuit.admit()
        assert admitted is not None
        circuit.record(admitted, Outcome.FAILURE)


def test_opens_after_threshold_failures_in_a_row() -> None:
    clock = FakeClock()
    circuit = breaker(clock)
    fail(circuit, 2)
    assert circuit.state is CircuitState.CLOSED
    fail(circuit)
    assert circuit.state is CircuitState.OPEN
    assert circuit.admit() is None
    assert circuit.retry_after == 30.0
    clock.now += 12.5
    assert circuit.admit() is None
    assert circuit.retry_after == 17.5


def test_a_success_resets_the_count() -> None:
    circuit = breaker(FakeClock())
    fail(circuit, 2)
    admitted = circuit.admit()
    assert admitted is not None
    circuit.record(admitted, Outcome.SUCCESS)
    fail(circuit, 2)
    assert circuit.state is CircuitState.CLOSED


def test_neutral_outcomes_do_not_count() -> None:
    """A client that went away says nothing about the upstream."""
    circuit = breaker(FakeClock())
    fail(circuit, 2)
    for _ in range(5):
        admitted = circuit.admit()
        assert admitted is not None
        circuit.record(admitted, Outcome.NEUTRAL)
    assert circuit.state is CircuitState.CLOSED
    fail(circuit)
    assert circuit.state is CircuitState.OPEN


def test_after_the_cooldown_one_trial_closes_it() -> None:
    clock = FakeClock()
    circuit = breaker(clock)
    fail(circuit, 3)
    clock.now += 30
    assert circuit.state is CircuitState.HALF_OPEN
    trial = circuit.admit()
    assert trial == Pass(trial=True)
    # While the trial runs, every other request still fails fast.
    assert circuit.admit() is None
    assert circuit.retry_after > 0
    circuit.record(trial, Outcome.SUCCESS)
    assert circuit.state is CircuitState.CLOSED
    assert circuit.admit() == Pass()
    assert circuit.retry_after == 0


def test_a_failed_trial_opens_it_for_another_cooldown() -> None:
    clock = FakeClock()
    circuit = breaker(clock)
    fail(circuit, 3)
    clock.now += 31
    trial = circuit.admit()
    assert trial is not None and trial.trial
    circuit.record(trial, Outcome.FAILURE)
    assert circuit.state is CircuitState.OPEN
    assert circuit.retry_after == 30.0
    assert circuit.admit() is None


def test_an_abandoned_trial_lets_the_next_request_try() -> None:
    clock = FakeClock()
    circuit = breaker(clock)
    fail(circuit, 3)
    clock.now += 30
    trial = circuit.admit()
    assert trial is not None
    circuit.record(trial, Outcome.NEUTRAL)
    assert circuit.state is CircuitState.HALF_OPEN
    again = circuit.admit()
    assert again is not None and again.trial


def test_late_answers_of_requests_let_through_before_it_opened_change_nothing() -> None:
    clock = FakeClock()
    circuit = breaker(clock)
    early = [circuit.admit() for _ in range(2)]
    fail(circuit, 3)
    clock.now += 10
    for admitted in early:
        assert admitted is not None
    circuit.record(early[0], Outcome.SUCCESS)  # type: ignore[arg-type]
    circuit.record(early[1], Outcome.FAILURE)  # type: ignore[arg-type]
    assert circuit.state is CircuitState.OPEN
    assert circuit.retry_after == 20.0


def test_threshold_zero_never_opens() -> None:
    circuit = breaker(FakeClock(), threshold=0)
    fail(circuit, 50)
    assert circuit.state is CircuitState.CLOSED


def test_each_state_change_logs_one_line(caplog: pytest.LogCaptureFixture) -> None:
    clock = FakeClock()
    circuit = breaker(clock, threshold=2)
    with caplog.at_level(logging.INFO, logger="app.upstream.breaker"):
        fail(circuit, 2)
        assert circuit.admit() is None
        assert circuit.admit() is None
        clock.now += 30
        trial = circuit.admit()
        assert trial is not None
        circuit.record(trial, Outcome.SUCCESS)
    lines = [r.getMessage() for r in caplog.records]
    assert len(lines) == 3, lines
    assert "vllm" in lines[0] and "closed -> open" in lines[0]
    assert caplog.records[0].levelno == logging.WARNING
    assert "open -> half_open" in lines[1]
    assert "half_open -> closed" in lines[2]
