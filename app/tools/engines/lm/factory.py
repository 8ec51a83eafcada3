"""``create_lm_engine``: the ``lm`` engine from an operator's options (the engine registry's
factory).

The options (``LmOptions``, unknown keys refused)::

    model = "qwen3:8b"         # required: the simulating model; the gateway's router picks the
                               # configured upstream that serves it
    seed = 7                   # optional: makes error injection reproducible
    max_history = 200          # the newest (call, result) pairs a session keeps (and prompts with)
    temperature = 0.2          # optional, sent when set
    max_output_tokens = 1024   # optional, sent when set
    [errors]                   # optional: error injection, each category optional
    network_error = { probability = 0.05, message = "connection reset" }
    unparseable_result = { probability = 0.02 }
    schema_violation = { probability = 0.01 }
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from app.core.ports import Upstream
from app.core.session_book import DEFAULT_MAX_HISTORY
from app.tools.engines.lm.engine import LmEngine
from app.tools.engines.lm.injection import ErrorInjection, ErrorRates
from app.tools.engines.lm.prompt import Sampling


class LmOptions(BaseModel):
    """The ``lm`` engine's options (see the module docstring)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    model: str = Field(min_length=1)
    errors: ErrorRates = ErrorRates()
    seed: int | None = None
    max_history: int = Field(default=DEFAULT_MAX_HISTORY, ge=1)
    temperature: float | None = Field(default=None, ge=0.0, le=2.0)
    max_output_tokens: int | None = Field(default=None, ge=1)

    def injection(self) -> ErrorInjection:
        return ErrorInjection(**self.errors.model_dump(), seed=self.seed)


def create_lm_engine(options: Mapping[str, Any], *, upstream: Upstream) -> LmEngine:
    """The engine ``options`` describe (pydantic's ``ValidationError``, a ``ValueError``, when
    they are wrong), asking its model through ``upstream``."""
    parsed = LmOptions.model_validate(dict(options))
    return LmEngine(
        upstream,
        parsed.model,
        injection=parsed.injection(),
        max_history=parsed.max_history,
        sampling=Sampling(parsed.temperature, parsed.max_output_tokens),
    )
