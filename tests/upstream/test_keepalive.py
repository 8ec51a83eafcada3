"""The upstream pool drops an idle connection before the usual inference server does (uvicorn,
which vLLM and SGLang run on, closes one after 5 s): a request written on a connection the
server is closing at that moment would fail with a reset (the soak, tests/serving, found it)."""

from __future__ import annotations

import uvicorn

from app.upstream.http import KEEPALIVE_SECONDS, HttpUpstream


async def test_idle_upstream_connections_are_dropped_before_the_server_drops_them() -> None:
    upstream = HttpUpstream("http://127.0.0.1:9")
    try:
        connector = upstream.session.connector
        assert connector is not None
        # aiohttp exposes the setting only as this attribute.
        assert connector._keepalive_timeout == KEEPALIVE_SECONDS  # type: ignore[attr-defined]
    finally:
        await upstream.aclose()
    server_default = uvicorn.Config(app=None).timeout_keep_alive
    assert server_default - KEEPALIVE_SECONDS >= 1
