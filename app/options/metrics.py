"""``[metrics]``: the Prometheus endpoint ``GET /metrics`` (``app.monitoring``).

On by default. Who may read it:
- with ``token`` set (``RESPGATE_METRICS__TOKEN``, or ``RESPGATE_METRICS__TOKEN_FILE``), only a
  request with ``Authorization: Bearer <token>`` (Prometheus: ``authorization:
  credentials_file``); a gateway API key is not enough, and the token opens nothing else;
- without one, anyone when client authentication is off (the gateway bound to loopback, or
  ``[auth] mode = "off"``: every endpoint is open then), and nobody (401) when it is on: the
  figures span every tenant (models, volumes, errors), so a tenant's key does not show them.

``models``: model names that get a label of their own besides the configured upstreams'
``models`` and ``model_map`` names; ``max_learned_models`` more are learned from the first
completed responses of other models; any other model is counted as ``other``, so a client
cannot grow the number of series by naming models.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field, SecretStr

MIN_TOKEN_LENGTH = 16


class MetricsSettings(BaseModel):
    """``[metrics]`` (``RESPGATE_METRICS__<KEY>``)."""

    model_config = ConfigDict(extra="forbid")

    enabled: bool = True
    # The bearer token a scrape must send (None: see the module docstring).
    token: SecretStr | None = Field(default=None, min_length=MIN_TOKEN_LENGTH)
    # Models labelled by name besides the configured upstreams' models.
    models: list[str] = Field(default_factory=list)
    # How many other models are labelled by name, learned from completed responses.
    max_learned_models: int = Field(default=16, ge=0, le=256)
