"""A real ``respgate serve`` holds slow and idle clients to the ``[server]`` timeouts and caps its
connections (``app.connections``): connections that send nothing, or a head or a body one byte
at a time, are closed (408 when part of a request came), while the openai SDK and ``/health``
are served; past ``max_connections`` a new connection closes the one waiting longest for a
request head, or is answered 503 when every connection has a request under way; each time, a
log line (one per second at most, with a count)."""

from __future__ import annotations

import asyncio
import contextlib
import json
import re
import resource
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest
from websockets.sync.client import connect

from tests.helpers import ROOT, free_port, gateway_process, serve_in_thread
from tests.serving.support import DEADLINE, HeldUpstream, open_streams, write_config

# Seconds: the header, body and keep-alive timeouts of the gateways under test.
SHORT = 0.5
HEAD = (
    b"POST /v1/responses HTTP/1.1\r\nhost: gateway\r\ncontent-type: application/json\r\n"
    b"content-length: 100000\r\n\r\n"
)


def server_config(tmp_path: Path, upstream_url: str, **server: Any) -> Path:
    """The gateway's configuration file with a ``[server]`` table of ``server``."""
    config = write_config(tmp_path, upstream_url)
    table = "".join(f"{key} = {json.dumps(value)}\n" for key, value in server.items())
    config.write_text(f"{config.read_text()}[server]\n{table}")
    return config


async def slow_client(port: int, mode: str) -> tuple[bool, bytes]:
    """A connection that sends nothing ("idle"), a head one byte at a time ("head"), a head
    then a body one byte at a time ("body"), or one whole request then nothing ("kept");
    whether the server closed it (within DEADLINE) and what it answered."""
    loop = asyncio.get_running_loop()
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    if mode == "body":
        writer.write(HEAD)
    elif mode == "kept":
        writer.write(b"GET /health HTTP/1.1\r\nhost: gateway\r\n\r\n")
    trickle = {"idle": b"", "kept": b"", "head": HEAD, "body": b" " * 100000}[mode]
    answer, sent, deadline = b"", 0, loop.time() + DEADLINE
    try:
        while loop.time() < deadline:
            if sent < len(trickle):
                writer.write(trickle[sent : sent + 1])
                sent += 1
            try:
                chunk = await asyncio.wait_for(reader.read(65536), 0.05)
            except TimeoutError:
                continue
            if not chunk:
                return True, answer
            answer += chunk
        return False, answer
    except ConnectionError:
        return True, answer
    finally:
        writer.close()


def logged_counts(log_file: Path, kind: str) -> list[int]:
    """The counts of the ``kind`` lines the gateway logged ("closed 12 connection(s) ...")."""
    text = log_file.read_text(errors="replace")
    return [int(n) for n in re.findall(rf"{kind}: \w+ (\d+) (?:new )?connection", text)]


def wait_for_counts(log_file: Path, kind: str, total: int) -> list[int]:
    """The ``kind`` counts once they add up to ``total`` (or DEADLINE passed)."""
    deadline = time.monotonic() + DEADLINE
    while sum(logged_counts(log_file, kind)) < total and time.monotonic() < deadline:
        time.sleep(0.1)
    return logged_counts(log_file, kind)


def sdk(url: str) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{url}/v1", api_key="sk-test", max_retries=0)


def steady_upload() -> Iterator[bytes]:
    """A JSON request body sent in pieces over longer than the body timeout, at a steady rate
    (a few KiB a tenth of a second) the timeout allows."""
    yield b'{"model": "m", "input": "hi"'
    for _ in range(3 * int(SHORT / 0.1)):
        time.sleep(0.1)
        yield b" " * 4096
    yield b"}"


def test_slow_and_idle_clients_are_closed_while_others_are_served(tmp_path: Path) -> None:
    log_file = tmp_path / "gateway.log"
    upstream = HeldUpstream()
    each = 30
    with serve_in_thread(upstream.app()) as upstream_url:
        config = server_config(
            tmp_path,
            upstream_url,
            header_timeout_seconds=SHORT,
            body_timeout_seconds=SHORT,
            keep_alive_timeout_seconds=SHORT,
        )
        with gateway_process(config, log_file=log_file) as (url, _):
            port = int(url.rsplit(":", 1)[1])

            async def flood() -> tuple[list[tuple[bool, bytes]], Any, int, int]:
                modes = ["idle", "head", "body", "kept"] * each
                clients = [asyncio.create_task(slow_client(port, mode)) for mode in modes]
                await asyncio.sleep(0)
                answer = await asyncio.to_thread(
                    lambda: sdk(url).responses.create(model="m", input="hi")
                )
                health = await asyncio.to_thread(lambda: httpx.get(f"{url}/health").status_code)
                upload = await asyncio.to_thread(
                    lambda: httpx.post(f"{url}/v1/responses", content=steady_upload()).status_code
                )
                return list(await asyncio.gather(*clients)), answer, health, upload

            results, answer, health, upload = asyncio.run(flood())
            head_counts = wait_for_counts(log_file, "header timeout", 2 * each)
            body_counts = wait_for_counts(log_file, "body timeout", each)
    assert answer.output_text == "done"
    assert health == 200
    assert upload == 200
    assert all(closed for closed, _ in results)
    idle, head, body, kept = (results[i::4] for i in range(4))
    assert all(answer == b"" for _, answer in idle)  # no request came: nothing to answer
    # A trickler is answered 408 once part of its request came; under load its first byte may
    # not have reached the server before the (0.5 s) timeout: it is then closed as an idle
    # connection is, with nothing to answer. Most are answered.
    answered = [answer for _, answer in head + body if answer]
    assert len(answered) > len(head + body) // 2
    for answer in answered:
        assert answer.startswith(b"HTTP/1.1 408 "), answer
        assert json.loads(answer.split(b"\r\n\r\n", 1)[1])["error"]["code"] == "request_timeout"
    assert all(answer.startswith(b"HTTP/1.1 200 ") for _, answer in kept)
    # Every closed connection counted, in fewer lines than connections: at most one a second.
    assert sum(head_counts) == 2 * each and len(head_counts) < 2 * each
    assert sum(body_counts) == each and len(body_counts) < each


def test_a_websocket_is_not_held_to_the_request_timeouts(tmp_path: Path) -> None:
    """A WebSocket (``/v1/responses``) idle for longer than the header, body and keep-alive
    timeouts still answers its next turn: the timeouts are the HTTP requests'."""
    upstream = HeldUpstream()
    upstream.release.set()  # its streams go through at once
    short = {f"{name}_timeout_seconds": SHORT for name in ("header", "body", "keep_alive")}
    with serve_in_thread(upstream.app()) as upstream_url:
        config = server_config(tmp_path, upstream_url, **short)
        with gateway_process(config) as (url, _):
            ws_url = f"{url.replace('http://', 'ws://')}/v1/responses"
            with connect(ws_url, open_timeout=DEADLINE) as ws:
                time.sleep(4 * SHORT)
                ws.send(json.dumps({"type": "response.create", "model": "m", "input": "hi"}))
                types: list[str] = []
                while not types or types[-1] not in ("response.completed", "error"):
                    types.append(json.loads(ws.recv(timeout=DEADLINE))["type"])
    assert types[-1] == "response.completed"


def is_closed(sock: socket.socket) -> bool:
    """Whether the server closed ``sock`` (waiting up to DEADLINE)."""
    sock.settimeout(DEADLINE)
    try:
        return sock.recv(65536) == b""
    except ConnectionError:
        return True


def test_past_the_connection_cap_the_longest_waiting_connection_makes_room(
    tmp_path: Path,
) -> None:
    """With every connection idle (no request under way), a new one closes the one that has
    waited longest for a request head, and is served."""
    log_file = tmp_path / "gateway.log"
    upstream = HeldUpstream()
    with serve_in_thread(upstream.app()) as upstream_url:
        config = server_config(
            tmp_path, upstream_url, max_connections=20, header_timeout_seconds=DEADLINE
        )
        with gateway_process(config, log_file=log_file) as (url, _):
            port = int(url.rsplit(":", 1)[1])
            held = [socket.create_connection(("127.0.0.1", port)) for _ in range(20)]
            try:
                answer = sdk(url).responses.create(model="m", input="hi")
                health = httpx.get(f"{url}/health").status_code
                oldest_closed = is_closed(held[0])
            finally:
                for sock in held:
                    sock.close()
            evicted = wait_for_counts(log_file, "connection cap", 1)
    assert answer.output_text == "done"
    assert health == 200
    assert oldest_closed
    assert evicted and "waiting for a request head" in log_file.read_text()


def test_past_the_connection_cap_with_every_connection_busy_new_ones_get_503(
    tmp_path: Path,
) -> None:
    """20 open streams fill the cap: a new connection is answered 503 before it is read, and
    the streams are not cut; once they finish, new requests are served."""
    log_file = tmp_path / "gateway.log"
    upstream = HeldUpstream()
    with serve_in_thread(upstream.app()) as upstream_url:
        config = server_config(tmp_path, upstream_url, max_connections=20)
        with gateway_process(config, log_file=log_file) as (url, _):
            port = int(url.rsplit(":", 1)[1])
            readers = open_streams(url, 20)
            with socket.create_connection(("127.0.0.1", port)) as sock:
                sock.settimeout(DEADLINE)
                refused = b""
                while chunk := sock.recv(65536):
                    refused += chunk
            with pytest.raises(openai.APIStatusError) as raised:
                sdk(url).responses.create(model="m", input="hi")
            upstream.release.set()
            for reader in readers:
                reader.join(DEADLINE)
            answer = served_again(url)
            refusals = wait_for_counts(log_file, "connection cap", 2)
    head, body = refused.split(b"\r\n\r\n", 1)
    assert head.startswith(b"HTTP/1.1 503 ")
    assert b"retry-after: 1" in head.lower()
    assert json.loads(body)["error"]["code"] == "too_many_connections"
    assert raised.value.status_code == 503
    assert raised.value.code == "too_many_connections"
    assert [reader.types[-1] for reader in readers] == ["response.completed"] * 20
    assert answer.output_text == "done"
    assert sum(refusals) >= 2


def served_again(url: str) -> Any:
    """The SDK's answer once the gateway accepts new connections again."""
    deadline = time.monotonic() + DEADLINE
    while True:
        try:
            return sdk(url).responses.create(model="m", input="hi")
        except openai.APIStatusError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.1)


def test_a_low_open_files_limit_is_raised_to_serve_many_connections(tmp_path: Path) -> None:
    """Started with a soft open-files limit of 256 (the hard one higher), the gateway raises it
    and serves /health beside 300 idle connections (before, the accept failures reset it)."""
    _, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard != resource.RLIM_INFINITY and hard < 1024:
        pytest.skip(f"the hard open-files limit ({hard}) is too low to raise")
    upstream = HeldUpstream()
    held: list[socket.socket] = []
    port = free_port()
    with serve_in_thread(upstream.app()) as upstream_url:
        config = write_config(tmp_path, upstream_url)
        argv = [sys.executable, "-m", "app.cli", "serve", "--config", str(config)]
        proc = subprocess.Popen(
            [*argv, "--port", str(port)],
            cwd=ROOT,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            preexec_fn=lambda: resource.setrlimit(resource.RLIMIT_NOFILE, (256, hard)),
        )
        url = f"http://127.0.0.1:{port}"
        try:
            assert wait_for_health(url, proc)
            held += [socket.create_connection(("127.0.0.1", port)) for _ in range(300)]
            statuses = [httpx.get(f"{url}/health").status_code for _ in range(5)]
        finally:
            for sock in held:
                sock.close()
            proc.terminate()
            proc.wait(DEADLINE)
    assert statuses == [200] * 5


def wait_for_health(url: str, proc: subprocess.Popen[bytes]) -> bool:
    deadline = time.monotonic() + DEADLINE
    while proc.poll() is None and time.monotonic() < deadline:
        with contextlib.suppress(httpx.TransportError):
            if httpx.get(f"{url}/health", timeout=1).status_code == 200:
                return True
        time.sleep(0.1)
    return False
