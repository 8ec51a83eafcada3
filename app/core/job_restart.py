"""Whether a background job taken over (``core.background``) may be restarted: the rule of
``core.background``'s docstring, which keeps any gateway tool call from running twice."""

from __future__ import annotations

import re

from app.core.checkpoint import LoopCheckpoint
from app.core.jobs import BackgroundJob, JobStore

# Gateway tool calls that ran (``response.mcp_call.completed`` …): a job that logged one is not
# restarted, so that no tool call runs twice.
_TOOL_RAN = re.compile(r"^response\.(?!function_call)\w+_call\.(completed|failed)$")
_READ_BATCH = 500


async def unsafe_to_restart(
    jobs: JobStore, job: BackgroundJob, checkpoint: LoopCheckpoint | None, max_attempts: int
) -> str | None:
    """Why ``job`` cannot be restarted (from ``checkpoint`` when there is one); None when it
    can."""
    if not job.resumable:
        return "its request carried tool credentials, which the gateway never stores"
    if job.attempts > max_attempts:
        return f"it was started {max_attempts} times"
    if checkpoint is not None and checkpoint.calls_started:
        return (
            "it had started tool calls after its last completed tool round, and that "
            "round, run again, could run them twice"
        )
    after = -1 if checkpoint is None else checkpoint.sequence_number
    while logged := await jobs.read_events(job.response_id, after, _READ_BATCH, tenant=job.tenant):
        if any(_TOOL_RAN.match(str(e.event.get("type"))) for e in logged):
            if checkpoint is None:
                return "it had already run tool calls, which are never run twice"
            return (
                "it had run tool calls after its last completed tool round, and that "
                "round, run again, could run them twice"
            )
        after = logged[-1].sequence_number
    return None
