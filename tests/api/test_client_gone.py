"""A client that leaves before its answer cancels its work, at any stage (``app.api.disconnect``).

The upstream (``tests.api.raw_upstream``) never answers model ``hung`` and counts the
connections the gateway opens and closes; the clients are raw sockets that send a request and
close. Waits are bounded; nothing asserts on wall-clock time.
"""

from __future__ import annotations

import logging
import socket
import sqlite3
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import openai
import orjson
import pytest
from websockets.sync.client import connect

from app.api.disconnect import OPENING_STREAM, WAITING_FOR_ANSWER
from tests.api.raw_upstream import RawUpstream, raw_upstream
from tests.api.upstreams import serve_gateway

GONE = "the client closed the connection"
MESSAGES = [{"role": "user", "content": "hi"}]


@pytest.fixture
def upstream() -> Iterator[RawUpstream]:
    with raw_upstream() as server:
        yield server


def send_request(
    url: str, path: str, body: dict[str, Any], request_id: str = "", receive_buffer: int = 0
) -> socket.socket:
    """A raw client: the whole request sent, nothing read (``receive_buffer``: its size)."""
    parts = urlsplit(url)
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    if receive_buffer:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, receive_buffer)
    sock.connect((parts.hostname or "127.0.0.1", parts.port or 80))
    raw = orjson.dumps(body)
    head = (
        f"POST {path} HTTP/1.1\r\nhost: {parts.netloc}\r\ncontent-type: application/json\r\n"
        f"content-length: {len(raw)}\r\n"
    )
    if request_id:
        head += f"x-request-id: {request_id}\r\n"
    sock.sendall(head.encode() + b"\r\n" + raw)
    return sock


def stored_responses(data_dir: Path) -> int:
    with sqlite3.connect(data_dir / "respgate.db") as db:
        return int(db.execute("SELECT count(*) FROM responses").fetchone()[0])


def gone_lines(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == "app.api.disconnect"]


ROUTES = [
    ("/v1/responses", {"model": "hung", "input": "hi"}, WAITING_FOR_ANSWER),
    ("/v1/responses", {"model": "hung", "input": "hi", "stream": True}, OPENING_STREAM),
    ("/v1/chat/completions", {"model": "hung", "messages": MESSAGES}, WAITING_FOR_ANSWER),
    (
        "/v1/chat/completions",
        {"model": "hung", "messages": MESSAGES, "stream": True},
        WAITING_FOR_ANSWER,
    ),
    ("/v1/messages", {"model": "hung", "max_tokens": 16, "messages": MESSAGES}, WAITING_FOR_ANSWER),
    (
        "/v1/messages",
        {"model": "hung", "max_tokens": 16, "messages": MESSAGES, "stream": True},
        OPENING_STREAM,
    ),
]


@pytest.mark.parametrize(("path", "body", "stage"), ROUTES)
def test_a_client_gone_before_the_upstream_answered_cancels_the_upstream_request(
    upstream: RawUpstream,
    caplog: pytest.LogCaptureFixture,
    path: str,
    body: dict[str, Any],
    stage: str,
) -> None:
    caplog.set_level(logging.INFO, logger="app.api.disconnect")
    with serve_gateway(upstream.url) as gateway:
        client = send_request(gateway, path, body, request_id="req-gone-1")
        assert upstream.wait_for(lambda: upstream.held == 1), "the request never reached upstream"
        client.close()
        assert upstream.wait_for(lambda: upstream.released == 1), "the upstream request was kept"
        assert upstream.wait_for(lambda: len(gone_lines(caplog)) == 1)
    [line] = gone_lines(caplog)
    assert f"POST {path}: {GONE} while {stage}" in line
    assert "req-gone-1" in line
    assert upstream.open == 0


def test_clients_gone_free_the_upstream_pool(
    upstream: RawUpstream, caplog: pytest.LogCaptureFixture, _isolated_data_dir: Path
) -> None:
    """Four clients on a pool of two hung connections leave: the gateway closes both (the
    queued two never get one), and the next client is served at once."""
    caplog.set_level(logging.INFO, logger="app.api.disconnect")
    with serve_gateway(upstream.url, upstream_max_connections=2) as gateway:
        clients = [
            send_request(gateway, "/v1/responses", {"model": "hung", "input": "hi", **extra})
            for extra in ({}, {"stream": True}, {}, {"stream": True})
        ]
        assert upstream.wait_for(lambda: upstream.held == 2)  # the pool is full
        for client in clients:
            client.close()
        assert upstream.wait_for(lambda: len(gone_lines(caplog)) == 4)
        assert upstream.wait_for(lambda: upstream.open == 0), "hung connections stayed open"
        assert upstream.released == upstream.held  # every one the gateway opened, it closed
        assert stored_responses(_isolated_data_dir) == 0

        sdk = openai.OpenAI(base_url=f"{gateway}/v1", api_key="sk-test", max_retries=0, timeout=20)
        response = sdk.responses.create(model="ok", input="hi")
        assert response.status == "completed" and response.output_text == "Hello"
        with sdk.responses.stream(model="ok", input="hi") as stream:
            final = stream.get_final_response()
        assert final.output_text == "Hello"
        assert stored_responses(_isolated_data_dir) == 2
    stages = sorted(line.split(" while ")[1].split(";")[0] for line in gone_lines(caplog))
    assert stages == sorted([WAITING_FOR_ANSWER, OPENING_STREAM] * 2)


def test_a_websocket_client_gone_while_its_stream_opens_cancels_the_upstream_request(
    upstream: RawUpstream, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="app.api.routes.responses_ws")
    with serve_gateway(upstream.url) as gateway:
        ws = connect(f"ws{gateway.removeprefix('http')}/v1/responses")
        ws.send(orjson.dumps({"type": "response.create", "model": "hung", "input": "hi"}).decode())
        assert upstream.wait_for(lambda: upstream.held == 1), "the request never reached upstream"
        ws.close()
        assert upstream.wait_for(lambda: upstream.released == 1), "the upstream request was kept"
    lines = [r.getMessage() for r in caplog.records if r.name == "app.api.routes.responses_ws"]
    assert any(f"{GONE} while {OPENING_STREAM}" in line for line in lines)
