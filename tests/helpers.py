"""Run ASGI apps for end-to-end tests: in this process (``in_process``: no socket, for the
openai SDK or httpx) or on a real socket (``serve_in_thread``: for what the gateway reaches over
aiohttp, and for tests of sockets, disconnects and subprocesses)."""

from __future__ import annotations

import asyncio
import contextlib
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import openai
import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route
from starlette.testclient import TestClient

from app.net.egress import EgressPolicy
from app.options.egress import EgressSettings

# The base URL of an app run by ``in_process`` (no socket: any host would do).
IN_PROCESS_URL = "http://testserver"

ROOT = Path(__file__).resolve().parents[1]


def local_egress() -> EgressSettings:
    """``[egress]`` allowing the loopback addresses the tests' servers run on (MCP, search,
    REST): the gateway's default refuses them, as it must. The one allow-list every test that
    points the gateway at a local server gives its settings (``Settings(egress=...)``)."""
    return EgressSettings(allow_networks=["127.0.0.0/8", "::1/128"])


def local_egress_toml() -> str:
    """``local_egress()`` as a configuration file's ``[egress]`` table (a gateway process)."""
    networks = ", ".join(f'"{network}"' for network in local_egress().allow_networks)
    return f"\n[egress]\nallow_networks = [{networks}]\n"


def local_policy() -> EgressPolicy:
    """``local_egress()``'s policy, for tests that build the tool kinds themselves."""
    return local_egress().policy()


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


class _Server(uvicorn.Server):
    """uvicorn that stops as soon as it is told to, where ``uvicorn.Server`` polls for that every
    0.1 s and then waits 0.1 s more (tests start and stop a few hundred servers)."""

    _loop: asyncio.AbstractEventLoop | None = None

    async def main_loop(self) -> None:
        self._stopped = asyncio.Event()
        self._loop = asyncio.get_running_loop()
        if not await self.on_tick(0):
            await self._stopped.wait()

    async def shutdown(self, sockets: list[socket.socket] | None = None) -> None:
        for server in self.servers:
            server.close()
        for connection in list(self.server_state.connections):
            connection.shutdown()
        # uvicorn offers nothing to wait on: its own shutdown polls these every 0.1 s.
        while self.server_state.connections or self.server_state.tasks:  # noqa: ASYNC110
            await asyncio.sleep(0.005)
        for server in self.servers:
            await server.wait_closed()
        await self.lifespan.shutdown()

    def stop(self) -> None:
        self.should_exit = True
        if self._loop is not None:
            self._loop.call_soon_threadsafe(self._stopped.set)


def responses_app(infer: Callable[[Request], Awaitable[Response]]) -> Starlette:
    """A scripted upstream: ``POST /v1/responses`` answered by ``infer``, and ``/health``."""

    async def health(request: Request) -> Response:
        return Response(status_code=200)

    return Starlette(
        routes=[
            Route("/v1/responses", infer, methods=["POST"]),
            Route("/health", health, methods=["GET"]),
        ]
    )


@contextlib.contextmanager
def serve_in_thread(app: Any, port: int | None = None, **tls: Any) -> Iterator[str]:
    """Serve ``app`` with uvicorn on 127.0.0.1 in a daemon thread; yields its base URL.
    ``tls``: uvicorn's ``ssl_*`` options (then the URL is https)."""
    port = port or free_port()
    config = uvicorn.Config(
        app, host="127.0.0.1", port=port, log_level="warning", lifespan="on", **tls
    )
    server = _Server(config)
    thread = threading.Thread(target=lambda: asyncio.run(server.serve()), daemon=True)
    thread.start()
    deadline = time.monotonic() + 20
    while not server.started:
        if not thread.is_alive() or time.monotonic() > deadline:
            raise RuntimeError("server did not start")
        time.sleep(0.002)
    try:
        yield f"{'https' if tls else 'http'}://127.0.0.1:{port}"
    finally:
        server.stop()
        thread.join(timeout=10)


@contextlib.contextmanager
def in_process(app: Any) -> Iterator[TestClient]:
    """``app`` in this process with its lifespan run, through Starlette's ``TestClient`` (an
    ``httpx.Client`` on ``IN_PROCESS_URL``; responses stream as they are sent). A server error
    answers 500 as on a real server rather than raising in the test."""
    with TestClient(app, base_url=IN_PROCESS_URL, raise_server_exceptions=False) as client:
        yield client


def openai_client(http: TestClient) -> openai.OpenAI:
    """The openai SDK talking to an ``in_process`` app."""
    return openai.OpenAI(
        base_url=f"{IN_PROCESS_URL}/v1", api_key="sk-test", max_retries=0, http_client=http
    )


def without_parsed(value: Any) -> Any:
    """The SDK adds ``parsed`` (``parsed_arguments``) to streamed items; the wire has none."""
    if isinstance(value, dict):
        return {
            k: without_parsed(v)
            for k, v in value.items()
            if k not in ("parsed", "parsed_arguments")
        }
    if isinstance(value, list):
        return [without_parsed(v) for v in value]
    return value


@contextlib.contextmanager
def gateway_process(
    config: Path, *options: str, log_file: Path | None = None
) -> Iterator[tuple[str, subprocess.Popen[bytes]]]:
    """``respgate serve --config config [options]`` as a real process on a free port, once it
    answers ``/health``; yields its base URL and the process (killed afterwards if still
    running). Its output goes to ``log_file`` when given."""
    port = free_port()
    argv = [sys.executable, "-m", "app.cli", "serve", "--config", str(config), "--port", str(port)]
    argv += options
    with log_file.open("w+b") if log_file is not None else tempfile.TemporaryFile() as log:
        proc = subprocess.Popen(argv, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT)
        try:
            url = f"http://127.0.0.1:{port}"
            deadline = time.monotonic() + 60
            while True:
                if proc.poll() is not None or time.monotonic() > deadline:
                    log.seek(0)
                    raise AssertionError(f"respgate serve did not start:\n{log.read().decode()}")
                try:
                    if httpx.get(f"{url}/health", timeout=1).status_code == 200:
                        break
                except httpx.TransportError:
                    time.sleep(0.1)
            yield url, proc
        finally:
            if proc.poll() is None:
                proc.terminate()
                try:
                    proc.wait(timeout=10)
                except subprocess.TimeoutExpired:
                    proc.kill()
            proc.wait(timeout=10)
