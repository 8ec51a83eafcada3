"""The session pool of the configured MCP servers, against the counter server."""

from __future__ import annotations

import asyncio

import pytest

from app.net.egress import EgressPolicy
from app.tools.mcp.errors import McpError
from app.tools.mcp.pool import McpSessionPool
from tests.helpers import free_port
from tests.tools.mcp.helpers import TIMEOUT, counter_spec, leftover_session_tasks


async def test_pool_reuses_and_reopens(counter_url: str) -> None:
    pool = McpSessionPool(
        {"counter": counter_spec("streamable_http", counter_url)},
        connect_timeout=TIMEOUT,
        egress=EgressPolicy(),  # the operator's server: trusted for its own host:port
    )
    try:
        first, again, concurrent = await asyncio.gather(
            pool.session("counter"), pool.session("counter"), pool.session("counter")
        )
        assert first is again is concurrent
        assert (await first.call_tool("sum", {"a": 1, "b": 2}, timeout=TIMEOUT)).output == "3"
        assert await pool.session("counter") is first

        await pool.discard("counter")
        assert first.closed
        second = await pool.session("counter")
        assert second is not first
        assert (await second.call_tool("echo", {"message": "x"}, timeout=TIMEOUT)).output == "x"

        # discarding a session that is no longer the pooled one leaves the pooled one alone
        await pool.discard("counter", session=first)
        assert not second.closed
        assert await pool.session("counter") is second

        # a session that closed (or died) is replaced on next use
        await second.aclose()
        third = await pool.session("counter")
        assert third is not second
        assert not third.closed

        with pytest.raises(KeyError):
            await pool.session("unknown")
        await pool.discard("unknown")
    finally:
        await pool.aclose()
    assert third.closed
    with pytest.raises(McpError):
        await pool.session("counter")
    assert leftover_session_tasks() == []


async def test_pool_open_failure_is_retried() -> None:
    url = f"http://127.0.0.1:{free_port()}/mcp"
    pool = McpSessionPool(
        {"down": counter_spec("streamable_http", url)}, connect_timeout=5, egress=EgressPolicy()
    )
    try:
        for _ in range(2):
            with pytest.raises(McpError) as caught:
                await pool.session("down")
            assert caught.value.error["code"] == -32000
    finally:
        await pool.aclose()
