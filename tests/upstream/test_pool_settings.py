"""The upstream pool's settings: ``max_connections`` (0: no limit) and
``pool_wait_warn_seconds``, flat and per ``[[upstreams]]`` entry; a bad value stops the start
with one line naming the key."""

from __future__ import annotations

from pathlib import Path

import aiohttp
import pytest

from app.main import build_upstream
from app.settings import Settings
from app.upstream import http
from app.upstream.http import HttpUpstream
from app.upstream.pool import WatchedConnector
from tests.test_cli import fails_with, write


def pools(settings: Settings) -> list[tuple[str, int, float]]:
    upstreams = [route.upstream for route in build_upstream(settings).routes]
    return [
        (u.pool.name, u.pool.limit, u.pool.warn_after)
        for u in upstreams
        if isinstance(u, HttpUpstream)
    ]


def test_the_defaults_fit_a_gpu_server() -> None:
    [default] = Settings().resolved_upstreams()
    assert default.max_connections == http.DEFAULT_MAX_CONNECTIONS == 1024
    assert default.pool_wait_warn_seconds == http.DEFAULT_POOL_WAIT_WARN_SECONDS == 1.0
    assert HttpUpstream("http://127.0.0.1:9").pool.limit == 1024
    # One process's default connection cap plus a full pool leave the reserve of
    # app.connections (512) in an open-files limit of 4,096.
    assert Settings().server.max_connections + default.max_connections <= 4096 - 512


def test_the_settings_reach_each_upstreams_pool() -> None:
    single = Settings(upstream_max_connections=8, upstream_pool_wait_warn_seconds=0.25)
    assert pools(single) == [("default", 8, 0.25)]
    several = Settings(
        upstreams=[
            {"name": "a", "url": "http://127.0.0.1:1"},
            {"name": "b", "url": "http://127.0.0.1:2", "max_connections": 0},
            {"name": "c", "url": "http://127.0.0.1:3", "pool_wait_warn_seconds": 0},
        ]
    )
    assert pools(several) == [("a", 1024, 1.0), ("b", 0, 1.0), ("c", 1024, 0.0)]


async def test_no_limit_is_aiohttps_own_connector_and_a_limit_is_watched() -> None:
    unlimited = HttpUpstream("http://127.0.0.1:9", max_connections=0)
    limited = HttpUpstream("http://127.0.0.1:9", max_connections=3)
    try:
        free = unlimited.session.connector
        assert type(free) is aiohttp.TCPConnector and free.limit == 0
        watched = limited.session.connector
        assert isinstance(watched, WatchedConnector) and watched.limit == 3
        assert limited.session.trace_configs == []  # nothing traced on every request
        # The free-slot test is on (aiohttp still counts its connections in use).
        assert watched._counted
    finally:
        await unlimited.aclose()
        await limited.aclose()


@pytest.mark.parametrize(
    ("toml", "key"),
    [
        ("upstream_max_connections = -1\n", "upstream_max_connections"),
        ("upstream_max_connections = 'many'\n", "upstream_max_connections"),
        ("upstream_pool_wait_warn_seconds = -0.5\n", "upstream_pool_wait_warn_seconds"),
        (
            '[[upstreams]]\nname = "a"\nurl = "http://127.0.0.1:1"\nmax_connections = -2\n',
            "upstreams.0.max_connections",
        ),
        (
            '[[upstreams]]\nname = "a"\nurl = "http://127.0.0.1:1"\n'
            'pool_wait_warn_seconds = "soon"\n',
            "upstreams.0.pool_wait_warn_seconds",
        ),
    ],
)
def test_a_bad_value_stops_the_start_naming_the_key(
    toml: str, key: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = write(tmp_path / "respgate.toml", toml)
    line = fails_with(capsys, ["serve", "--config", str(config)])
    assert line.startswith(f"respgate: invalid configuration in {config}: {key}: "), line


def test_the_flat_keys_and_upstreams_do_not_mix() -> None:
    with pytest.raises(ValueError, match="upstream_pool_wait_warn_seconds is set too"):
        Settings(
            upstream_pool_wait_warn_seconds=2,
            upstreams=[{"name": "a", "url": "http://127.0.0.1:1"}],
        )
