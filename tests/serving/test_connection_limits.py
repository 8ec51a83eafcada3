"""``[server]`` (``app.options.server``) and the pieces of ``app.connections`` a real server
exercises only in part: the settings, the open-files limit, the rate-limited log line, and
how ``make_server`` hands them to uvicorn (the behaviour: tests/serving/test_slow_clients.py)."""

from __future__ import annotations

import asyncio
import logging
import resource
from pathlib import Path
from typing import Any

import pytest

from app import serving
from app.cli import upstream_connections
from app.connections import GuardedProtocol, Notices, connection_cap
from app.options.server import ServerSettings
from app.serving import make_server
from app.settings import Settings, load_settings

ROOT = Path(__file__).resolve().parents[2]


def test_every_server_key_is_documented_and_read_from_the_file_and_the_environment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    text = (ROOT / "config" / "respgate.example.toml").read_text()
    assert "\n[server]\n" in text
    for name in ServerSettings.model_fields:
        assert f"\n{name} =" in text, f"server.{name} is not documented"
        assert f"`server.{name}`" in (ROOT / "README.md").read_text()
    config = tmp_path / "respgate.toml"
    config.write_text("[server]\nheader_timeout_seconds = 2.5\n")
    monkeypatch.setenv("RESPGATE_SERVER__MAX_CONNECTIONS", "100")
    server = load_settings(config).server
    assert (server.header_timeout_seconds, server.max_connections) == (2.5, 100)
    assert (server.body_timeout_seconds, server.keep_alive_timeout_seconds) == (60, 5)


class FakeLimits:
    """``resource``'s open-files limit, as a test sets it."""

    def __init__(self, soft: int, hard: int, *, settable: bool = True) -> None:
        self.limit = (soft, hard)
        self.settable = settable

    def getrlimit(self, which: int) -> tuple[int, int]:
        return self.limit

    def setrlimit(self, which: int, limit: tuple[int, int]) -> None:
        if not self.settable:
            raise ValueError("not allowed")
        self.limit = limit


def test_the_soft_open_files_limit_is_raised_to_the_hard_one(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    limits = FakeLimits(1024, 20000)
    monkeypatch.setattr(resource, "getrlimit", limits.getrlimit)
    monkeypatch.setattr(resource, "setrlimit", limits.setrlimit)
    assert connection_cap(2048) == 2048
    assert limits.limit == (20000, 20000)


def test_the_cap_is_lowered_to_what_the_open_files_limit_leaves(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    limits = FakeLimits(1024, 1024, settable=False)
    monkeypatch.setattr(resource, "getrlimit", limits.getrlimit)
    monkeypatch.setattr(resource, "setrlimit", limits.setrlimit)
    with caplog.at_level(logging.WARNING, "app.connections"):
        assert connection_cap(2048) == 768  # a quarter kept for the upstreams, the store
    assert "server.max_connections 2048 lowered to 768" in caplog.text
    assert connection_cap(100) == 100


def test_each_stream_s_upstream_connection_is_counted_against_the_open_files_limit(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """A client connection holds at most one upstream connection (a stream): c clients hold
    c + min(c, pools) descriptors, with a quarter (at most 512) kept for the rest."""
    small = FakeLimits(1024, 1024, settable=False)
    monkeypatch.setattr(resource, "getrlimit", small.getrlimit)
    with caplog.at_level(logging.WARNING, "app.connections"):
        assert connection_cap(2048, 1024) == 384  # 384 clients + 384 upstream + 256
    assert "lowered to 384" in caplog.text and "upstream connection too (up to 1024)" in caplog.text
    assert connection_cap(2048, 100) == 668  # 668 + 100 + 256
    assert connection_cap(300, 1024) == 300  # 300 + 300 + 256 fit
    usual = FakeLimits(4096, 4096, settable=False)
    monkeypatch.setattr(resource, "getrlimit", usual.getrlimit)
    assert connection_cap(2048, 1024) == 2048  # the defaults fit the smallest common limit
    assert connection_cap(2048, 2048) == 1792  # two full pools do not: 1792 x 2 + 512


def test_the_gateway_counts_every_upstream_pool(tmp_path: Path) -> None:
    one = Settings(upstream_url="http://127.0.0.1:1", data_dir=tmp_path)
    assert upstream_connections(one) == 1024
    unlimited = Settings(
        upstream_url="http://127.0.0.1:1", upstream_max_connections=0, data_dir=tmp_path
    )
    assert upstream_connections(unlimited) == 2048  # one per client connection


def test_notices_log_one_line_per_kind_and_interval_with_a_count(
    caplog: pytest.LogCaptureFixture,
) -> None:
    notices = Notices(ServerSettings(header_timeout_seconds=3), cap=5, interval=0.01)

    async def flood() -> None:
        for port in range(1000):
            notices.note("header", ("10.0.0.1", port))
        notices.note("refused", ("10.0.0.2", 1))
        await asyncio.sleep(0.1)  # the interval ends after 0.01 s

    with caplog.at_level(logging.WARNING, "app.connections"):
        asyncio.run(flood())
    lines = [record.getMessage() for record in caplog.records]
    # The first of each kind at once; the other 999 in one line when the interval ends.
    assert lines == [
        "header timeout: closed 1 connection(s) whose request head did not arrive within "
        "3 s (server.header_timeout_seconds); last from 10.0.0.1:0",
        "connection cap: refused 1 new connection(s) with a 503: 5 were open, each with a "
        "request under way (server.max_connections); last from 10.0.0.2:1",
        "header timeout: closed 999 connection(s) whose request head did not arrive within "
        "3 s (server.header_timeout_seconds); last from 10.0.0.1:999",
    ]


def test_make_server_gives_uvicorn_the_guarded_protocol(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(serving, "connection_cap", lambda wanted, upstream: wanted)
    settings = ServerSettings(keep_alive_timeout_seconds=7, max_connections=33)

    async def app(scope: Any, receive: Any, send: Any) -> None:
        raise AssertionError("not called")

    server = make_server(app, "info", connections=settings)
    protocol = server.config.http
    assert isinstance(protocol, type) and issubclass(protocol, GuardedProtocol)
    assert (protocol.settings, protocol.cap) == (settings, 33)
    assert server.config.timeout_keep_alive == 7
    default = make_server(app, "info").config.http  # record, replay, demo: the defaults
    assert isinstance(default, type) and issubclass(default, GuardedProtocol)
    assert default.settings == ServerSettings()
