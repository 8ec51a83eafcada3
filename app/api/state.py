"""What the lifespan builds and the routes use, hung on ``app.state``."""

from __future__ import annotations

from dataclasses import dataclass

from starlette.requests import HTTPConnection

from app.core.background import BackgroundResponses
from app.core.ports import ResponseStore, Upstream
from app.core.service import ResponsesService
from app.files.files import FilesService
from app.files.vector_stores import VectorStoresService
from app.settings import Settings


@dataclass(slots=True)
class GatewayState:
    settings: Settings
    upstream: Upstream
    store: ResponseStore
    service: ResponsesService
    files: FilesService
    vector_stores: VectorStoresService
    background: BackgroundResponses | None = None


def gateway_state(request: HTTPConnection) -> GatewayState:
    """The gateway's state, for a request or a WebSocket."""
    state: GatewayState = request.app.state.gateway
    return state
