"""Error injection of the ``lm`` engine: which calls fail on purpose, and how.

Three categories, each with a probability in [0, 1] and an optional message:

- ``network_error``: the call fails at once (a ``ToolFailure`` of kind ``network_error``), as if
  the tool could not be reached.
- ``unparseable_result``: the tool "answers" with a malformed but non-empty text: the message
  when one is configured, else ``<garbled: ...>`` with random junk inside. It is an *ok* result
  (no ``ToolFailure``): the transport worked, the payload is garbage, and the model using the
  tool must cope with it, as with a broken real service.
- ``schema_violation``: the call fails at once (kind ``schema_violation``), as if the tool's
  answer did not match its declared output.

None of the three calls the simulating model: an injected outcome replaces the result whole, so
asking the model would cost a round trip for an answer thrown away (and the injected frequencies
do not depend on the model).

Each category is sampled independently per call; when several fire, one of them is chosen at
random. The draws of a call come from a generator seeded with (seed, session id, the call's
position in its session), so a seeded run gives the same outcomes however the calls of different
sessions interleave, and a session restored from its saved state continues the same sequence.
Without a seed, a random one is drawn when the ``Injector`` is made.
"""

from __future__ import annotations

import hashlib
import random
import secrets
import string
from dataclasses import dataclass
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

Category = Literal["network_error", "unparseable_result", "schema_violation"]
CATEGORIES: tuple[Category, ...] = ("network_error", "unparseable_result", "schema_violation")

DEFAULT_MESSAGES: dict[Category, str] = {
    "network_error": "Network error: the connection to the tool was reset.",
    "unparseable_result": "",  # unused: the garbled text is random
    "schema_violation": "The tool's result does not match its output schema.",
}

_JUNK = string.ascii_letters + string.digits + '{}[]":,#%&*<>?/\\|~^`'


class InjectedError(BaseModel):
    """One category: how often it fires and what it says (None: a default)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    probability: float = Field(default=0.0, ge=0.0, le=1.0)
    message: str | None = Field(default=None, min_length=1)


class ErrorRates(BaseModel):
    """The three categories (an operator's ``errors`` table)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    network_error: InjectedError = InjectedError()
    unparseable_result: InjectedError = InjectedError()
    schema_violation: InjectedError = InjectedError()

    def category(self, name: Category) -> InjectedError:
        rate: InjectedError = getattr(self, name)
        return rate


class ErrorInjection(ErrorRates):
    """The categories and the seed that makes runs reproducible (None: a random seed)."""

    seed: int | None = None


@dataclass(frozen=True, slots=True)
class Injected:
    """What an injection gives one call: its category and the text (the failure's message, or
    the garbled output of ``unparseable_result``)."""

    category: Category
    text: str


class Injector:
    """Draws the injected outcome of each call (see the module docstring)."""

    def __init__(self, config: ErrorInjection | None = None) -> None:
        self.config = config or ErrorInjection()
        self.seed = self.config.seed if self.config.seed is not None else secrets.randbits(64)
        self._active = any(self.config.category(name).probability > 0 for name in CATEGORIES)

    def draw(self, session_id: str, position: int) -> Injected | None:
        """The injected outcome of the call at ``position`` (0-based) of ``session_id``, or
        None when no category fires."""
        if not self._active:
            return None
        rng = random.Random(_derived_seed(self.seed, session_id, position))
        # One draw per category, always, so a category's outcome does not depend on the others.
        fired = [
            name for name in CATEGORIES if rng.random() < self.config.category(name).probability
        ]
        if not fired:
            return None
        chosen = fired[0] if len(fired) == 1 else rng.choice(fired)
        message = self.config.category(chosen).message
        if message is None:
            message = _garbled(rng) if chosen == "unparseable_result" else DEFAULT_MESSAGES[chosen]
        return Injected(chosen, message)


def _derived_seed(seed: int, session_id: str, position: int) -> int:
    key = f"{seed}\x00{session_id}\x00{position}".encode()
    return int.from_bytes(hashlib.sha256(key).digest()[:16], "big")


def _garbled(rng: random.Random) -> str:
    junk = "".join(rng.choice(_JUNK) for _ in range(rng.randint(12, 40)))
    return f"<garbled: {junk}>"
