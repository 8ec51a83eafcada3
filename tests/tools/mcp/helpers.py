"""What the MCP client tests share: the counter server's spec over each transport, a
session opened for a block, the session tasks left behind."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from typing import Any

from app.tools.mcp.client import McpSession
from app.tools.mcp.spec import McpServerSpec, transport_for_url
from tests.helpers import local_policy
from tests.mcp_servers.counter import stdio_command

TIMEOUT = 10.0
# The test servers listen on loopback addresses: the egress policy's test allow-list.
LOCAL = local_policy()


def counter_spec(transport: str, url: str | None = None, **extra: Any) -> McpServerSpec:
    if transport == "stdio":
        argv, env = stdio_command()
        return McpServerSpec("counter", transport="stdio", command=argv, env=env, **extra)
    assert url is not None
    return McpServerSpec("counter", url=url, transport=transport_for_url(url), **extra)


@contextlib.asynccontextmanager
async def opened(spec: McpServerSpec) -> AsyncIterator[McpSession]:
    session = await McpSession.open(spec, connect_timeout=TIMEOUT, egress=LOCAL)
    try:
        yield session
    finally:
        await session.aclose()


def leftover_session_tasks() -> list[str]:
    current = asyncio.current_task()
    return [
        task.get_name()
        for task in asyncio.all_tasks()
        if task is not current and task.get_name().startswith("mcp-")
    ]
