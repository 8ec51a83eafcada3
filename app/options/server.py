"""``[server]``: how long a client may take to send a request, and how many connections one
process holds open (enforced by ``app.connections``, every uvicorn server the CLI runs)."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field


class ServerSettings(BaseModel):
    """Every key is documented, with its default, in config/respgate.example.toml."""

    model_config = ConfigDict(extra="forbid")

    # A request's head (request line and headers) must arrive within this many seconds of the
    # connection opening (or of the request's first byte, on a kept-alive connection).
    header_timeout_seconds: float = Field(default=10.0, gt=0)
    # A request's body must arrive within this many seconds of its head, one second more for
    # every app.connections.BODY_BYTES_PER_SECOND bytes received (a steady upload is not cut).
    body_timeout_seconds: float = Field(default=60.0, gt=0)
    # A connection idle between requests is closed after this many seconds (uvicorn's
    # timeout_keep_alive).
    keep_alive_timeout_seconds: float = Field(default=5.0, gt=0)
    # Connections one process holds open (SSE streams included); a new connection past it
    # closes the one waiting longest for a request head, or is answered 503 when every one has
    # a request under way. Lowered at start-up to what the open-files limit allows.
    max_connections: int = Field(default=2048, ge=1)
