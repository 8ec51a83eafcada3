"""The circuit breaker of one upstream: after ``threshold`` failures in a row it opens, and
requests routed there fail fast (503 ``upstream_unavailable`` with ``retry-after``) for
``cooldown`` seconds instead of waiting on a server that is down; then one trial request
(half-open) decides: an answer closes it, a failure opens it again for another cool-down.

A failure is what says the server is down or overloaded: it could not be reached, it did not
answer in time, or it answered 502, 503 or 504 (``app.upstream.retry`` sorts the outcomes). A
4xx or any other answer is a success (the server is up); a request the client abandoned is
neither. Every state change logs one line. The state machine is pure: the clock is injected
(tests step it by hand), nothing sleeps, and it is not thread-safe (one event loop uses it).
Each gateway process keeps its own breakers.
"""

from __future__ import annotations

import enum
import logging
import math
import time
from collections.abc import Callable
from dataclasses import dataclass

logger = logging.getLogger(__name__)

# What a refused request is told to wait while the half-open trial is still running.
TRIAL_RETRY_AFTER = 1.0


class CircuitState(enum.StrEnum):
    CLOSED = "closed"
    OPEN = "open"
    HALF_OPEN = "half_open"


class Outcome(enum.Enum):
    SUCCESS = "success"
    FAILURE = "failure"
    # Neither: the client went away, or the gateway failed before the server could answer.
    NEUTRAL = "neutral"


# Module names for the members: a global lookup is cheaper than an enum attribute, and every
# upstream request passes ``admit`` and ``record``.
_CLOSED, _OPEN, _HALF_OPEN = CircuitState.CLOSED, CircuitState.OPEN, CircuitState.HALF_OPEN
_SUCCESS, _NEUTRAL = Outcome.SUCCESS, Outcome.NEUTRAL


@dataclass(frozen=True, slots=True)
class Pass:
    """A request the breaker let through; ``trial``: the one request of a half-open circuit."""

    trial: bool = False


_THROUGH = Pass()
_TRIAL = Pass(trial=True)


class CircuitBreaker:
    """One upstream's circuit; ``threshold`` 0 turns it off (every request goes through)."""

    def __init__(
        self,
        name: str,
        *,
        threshold: int,
        cooldown: float,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.name = name
        self.threshold = threshold
        self.cooldown = cooldown
        self._clock = clock
        self._state = _CLOSED
        self._failures = 0
        self._opened_at = 0.0
        self._trial_running = False

    @property
    def state(self) -> CircuitState:
        """The state as a request would find it now: an open circuit whose cool-down has
        passed is half-open (its next request is the trial)."""
        if self._state is _OPEN and self._cooled_down():
            return _HALF_OPEN
        return self._state

    @property
    def retry_after(self) -> float:
        """Seconds until the circuit lets a request through again (0 when it does now)."""
        if self._state is _OPEN:
            return max(0.0, self._opened_at + self.cooldown - self._clock())
        if self._state is _HALF_OPEN and self._trial_running:
            return TRIAL_RETRY_AFTER
        return 0.0

    def admit(self) -> Pass | None:
        """A pass for one request, or None when it must fail fast (see ``retry_after``)."""
        if self._state is _CLOSED or self.threshold <= 0:
            return _THROUGH
        if self._state is _OPEN:
            if not self._cooled_down():
                return None
            self._move(_HALF_OPEN, "the cool-down passed: one trial request")
        if self._trial_running:
            return None
        self._trial_running = True
        return _TRIAL

    def record(self, admitted: Pass, outcome: Outcome) -> None:
        """What became of a request ``admit`` let through."""
        if admitted.trial:
            self._trial_running = False
        if outcome is _NEUTRAL or self.threshold <= 0:
            return
        if outcome is _SUCCESS:
            self._failures = 0
            if self._state is _HALF_OPEN:
                self._move(_CLOSED, "the upstream answers again")
            return
        if self._state is _HALF_OPEN:
            self._open("the trial request failed")
        elif self._state is _CLOSED:
            self._failures += 1
            if self._failures >= self.threshold:
                self._open(f"{self._failures} failures in a row")
        # OPEN: a request let through before the circuit opened; the cool-down stands.

    def _cooled_down(self) -> bool:
        return self._clock() >= self._opened_at + self.cooldown

    def _open(self, why: str) -> None:
        self._opened_at = self._clock()
        self._failures = 0
        self._trial_running = False
        self._move(
            _OPEN,
            f"{why}; requests fail fast for {math.ceil(self.cooldown):d} s",
            level=logging.WARNING,
        )

    def _move(self, state: CircuitState, why: str, *, level: int = logging.INFO) -> None:
        logger.log(
            level,
            "upstream %s: circuit %s -> %s (%s)",
            self.name,
            self._state.value,
            state.value,
            why,
        )
        self._state = state
