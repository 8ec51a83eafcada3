"""The core's tests see the item types of the gateway's tool kinds, as the app does: ``app.main``
registers them with the protocol when it wires the toolkit."""

from __future__ import annotations

import pytest

from app.main import register_tool_kinds
from app.tools.file_search.provider import FileSearchToolProvider
from app.tools.mcp.provider import McpToolProvider
from app.tools.toolkit import GatewayToolKit
from app.tools.web_search.provider import WebSearchToolProvider


@pytest.fixture(autouse=True, scope="session")
def _gateway_tool_kinds() -> None:
    kinds = [McpToolProvider(), WebSearchToolProvider(None), FileSearchToolProvider(None)]
    register_tool_kinds(GatewayToolKit(kinds))
