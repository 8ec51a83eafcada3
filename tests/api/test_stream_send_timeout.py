"""A client that stays connected but stops reading its stream does not hold the upstream:
after ``stream_send_timeout_seconds`` the stream ends, the upstream request is dropped and a
line is logged (``app.api.sse.GatewayEventSource``).

The upstream (``tests.api.raw_upstream``, model ``flood``) streams text deltas for as long as
the gateway takes them; the client is a raw socket with a small receive buffer that reads the
first bytes and then nothing. Waits are bounded; nothing asserts on wall-clock time.
"""

from __future__ import annotations

import logging
import socket
from collections.abc import Iterator

import pytest

from tests.api.raw_upstream import RawUpstream, raw_upstream
from tests.api.test_client_gone import send_request
from tests.api.upstreams import serve_gateway

STALLED = "read nothing of its stream"


@pytest.fixture
def upstream() -> Iterator[RawUpstream]:
    with raw_upstream() as server:
        yield server


def stalled_client(gateway: str, path: str, body: dict[str, object]) -> socket.socket:
    """A client that reads the start of its stream and then stops reading (and stays)."""
    sock = send_request(gateway, path, body, request_id="req-stalled", receive_buffer=1 << 18)
    sock.settimeout(10)
    assert sock.recv(1024).startswith(b"HTTP/1.1 200")
    return sock


def read_to_end(sock: socket.socket) -> bool:
    """Whether the gateway closed the connection (reads what is left, bounded by the socket's
    timeout)."""
    try:
        while sock.recv(1 << 20):
            pass
    except TimeoutError:
        return False
    except ConnectionError:
        return True
    return True


def stalled_lines(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == "app.api.sse"]


@pytest.mark.parametrize(
    ("path", "body"),
    [
        ("/v1/responses", {"model": "flood", "input": "hi", "stream": True}),
        (
            "/v1/chat/completions",
            {"model": "flood", "stream": True, "messages": [{"role": "user", "content": "hi"}]},
        ),
        (
            "/v1/messages",
            {
                "model": "flood",
                "max_tokens": 16,
                "stream": True,
                "messages": [{"role": "user", "content": "hi"}],
            },
        ),
    ],
)
def test_a_client_that_stops_reading_loses_its_stream_and_upstream(
    upstream: RawUpstream, caplog: pytest.LogCaptureFixture, path: str, body: dict[str, object]
) -> None:
    caplog.set_level(logging.WARNING, logger="app.api.sse")
    with serve_gateway(upstream.url, stream_send_timeout_seconds=0.5) as gateway:
        client = stalled_client(gateway, path, body)
        try:
            assert upstream.wait_for(lambda: upstream.flood_closed == 1, timeout=30), (
                "the upstream request was kept for a client that reads nothing"
            )
            assert upstream.wait_for(lambda: len(stalled_lines(caplog)) == 1)
            assert read_to_end(client), "the gateway kept the stalled client's connection"
        finally:
            client.close()
        # The gateway goes on serving (the upstream's pool is not held).
        other = send_request(gateway, "/v1/responses", {"model": "ok", "input": "hi"})
        other.settimeout(10)
        assert other.recv(65536).startswith(b"HTTP/1.1 200")
        other.close()
    [line] = stalled_lines(caplog)
    assert f"POST {path}: the client {STALLED} for 0.5 s" in line and "req-stalled" in line
    assert upstream.open == 0


def test_a_slow_reader_within_the_send_timeout_gets_the_whole_stream(
    upstream: RawUpstream, caplog: pytest.LogCaptureFixture
) -> None:
    """The send timeout bounds one send, not the stream: a client reading keeps its stream."""
    caplog.set_level(logging.WARNING, logger="app.api.sse")
    with serve_gateway(upstream.url, stream_send_timeout_seconds=5) as gateway:
        client = send_request(
            gateway, "/v1/responses", {"model": "ok", "stream": True, "input": "x"}
        )
        client.settimeout(10)
        received = b""
        while b"data: [DONE]" not in received:
            chunk = client.recv(65536)
            assert chunk, "the stream ended early"
            received += chunk
        client.close()
    assert b"response.completed" in received
    assert stalled_lines(caplog) == []
