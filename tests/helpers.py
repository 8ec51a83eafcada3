"""Run ASGI apps on real sockets for end-to-end tests."""

from __future__ import annotations

import asyncio
import contextlib
import socket
import threading
import time
from collections.abc import Iterator
from typing import Any

import uvicorn


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@contextlib.contextmanager
def serve_in_thread(app: Any, port: int | None = None) -> Iterator[str]:
    """Serve ``app`` with uvicorn on 127.0.0.1 in a daemon thread; yields its base URL."""
    port = port or free_port()
    config = uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning", lifespan="on")
    server = uvicorn.Server(config)
    thread = threading.Thread(target=lambda: asyncio.run(server.serve()), daemon=True)
    thread.start()
    deadline = time.monotonic() + 20
    while not server.started:
        if not thread.is_alive() or time.monotonic() > deadline:
            raise RuntimeError("server did not start")
        time.sleep(0.01)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(timeout=10)


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
