"""The request body of ``POST /v1/responses/compact`` (openai SDK ``ResponseCompactParams``).

``model`` is required (a missing or null one is a 400 naming it); the history to compact is
``input``, or the chain of ``previous_response_id`` followed by ``input``. Other keys
(``prompt_cache_key``, ``service_tier`` …) are kept and forwarded to an upstream that compacts
natively.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict

from app.protocol.json_types import JsonObject


class CompactRequest(BaseModel):
    """``POST /v1/responses/compact``."""

    model_config = ConfigDict(extra="allow")

    model: str
    input: str | list[JsonObject] | None = None
    instructions: str | None = None
    previous_response_id: str | None = None
