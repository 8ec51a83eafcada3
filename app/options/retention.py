"""``[retention]``: how long stored responses and conversations are kept.

Off by default (nothing expires, as before). With ``responses_days``, a response older than
that goes (with its background job and event log, its items that nothing kept references, and
its chain's tool session once the chain has no response left); with ``conversations_days``, a
conversation with no activity for that long goes (its items and tool session likewise). Every
gateway process purges every ``purge_interval_minutes`` (one at a time on one database), and
``respgate purge`` purges at once (``app.purge``). Files and vector stores keep OpenAI's own
``expires_after``.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

from app.core.retention import RetentionPolicy

SECONDS_PER_DAY = 86_400.0


class RetentionSettings(BaseModel):
    """``[retention]`` (``RESPGATE_RETENTION__<KEY>``)."""

    model_config = ConfigDict(extra="forbid")

    # Responses created more than this many days ago are purged (None: kept for ever).
    responses_days: float | None = Field(default=None, gt=0)
    # Conversations with no activity (created, items added, a response in it, metadata
    # updated) for this many days are purged (None: kept for ever). Their responses stay until
    # responses_days, and so do the items those responses hold.
    conversations_days: float | None = Field(default=None, gt=0)
    # How often each gateway process purges (when one of the above is set).
    purge_interval_minutes: float = Field(default=60.0, gt=0)
    # Responses, conversations (or items) one purge transaction removes.
    purge_batch_size: int = Field(default=500, ge=1, le=10_000)

    @property
    def enabled(self) -> bool:
        return self.responses_days is not None or self.conversations_days is not None

    def policy(self) -> RetentionPolicy | None:
        """The policy of ``core.retention`` (ages in seconds); None when nothing expires."""
        if not self.enabled:
            return None
        return RetentionPolicy(
            responses_seconds=_seconds(self.responses_days),
            conversations_seconds=_seconds(self.conversations_days),
            interval_seconds=self.purge_interval_minutes * 60,
            batch_size=self.purge_batch_size,
        )


def _seconds(days: float | None) -> float | None:
    return None if days is None else days * SECONDS_PER_DAY
