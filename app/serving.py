"""Run uvicorn servers on sockets the CLI bound, several in one event loop if need be.

``respgate serve`` runs the gateway alone and ``respgate demo`` a replay and the gateway
together; either way SIGINT and SIGTERM stop every server gracefully and the process exits:
no new connection is accepted, open requests and streams finish within the drain timeout
(then open SSE streams are cut, ``app.api.drain``; a second signal cuts them at once), and the
application shuts down. Every server holds slow and idle clients to the ``[server]`` timeouts
and caps its connections (``app.connections``).
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import signal
import socket
from collections.abc import Callable, Iterator
from typing import Any

import uvicorn

from app.api.drain import cut_open_streams
from app.collector import settle_heap
from app.connections import connection_cap, guarded_protocol
from app.options.server import ServerSettings


class CallerSignalsServer(uvicorn.Server):
    """A uvicorn server that leaves SIGINT/SIGTERM to its caller (:func:`serve_together`).
    ``drain_timeout``: when open SSE streams are cut after a stop (``app.api.drain``)."""

    drain_timeout: float | None = None

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        yield

    async def startup(self, sockets: list[socket.socket] | None = None) -> None:
        """uvicorn's start-up, the start-up heap settled (``app.collector``) once the app's own
        start-up is done and before a connection is accepted: the collection pauses the loop,
        and a connection accepted meanwhile would see its header timeout run down unread."""
        app_startup = self.lifespan.startup

        async def then_settle() -> None:
            await app_startup()
            if not self.lifespan.should_exit:
                settle_heap()

        self.lifespan.startup = then_settle
        await super().startup(sockets=sockets)


# Open requests and streams may run this long after SIGTERM (``drain_timeout_seconds``).
DEFAULT_DRAIN_SECONDS = 10.0
# Once the drain lapsed: how long the cut streams have to send their closing events.
CUT_GRACE_SECONDS = 2.0


def make_server(
    app: Any,
    log_level: str,
    *,
    access_log: bool = False,
    drain_timeout: float = DEFAULT_DRAIN_SECONDS,
    connections: ServerSettings | None = None,
    upstream_connections: int = 0,
    **options: Any,
) -> uvicorn.Server:
    """A uvicorn server for ``app``. On a stop it closes its listening socket at once, lets open
    requests and streams finish for ``drain_timeout`` seconds, cuts what is left, then runs the
    application's shutdown (which hands background jobs back). ``connections``: its timeouts
    and connection cap (default: ``[server]``'s defaults); ``upstream_connections``: how many
    upstream connections the app may hold besides (``connections.connection_cap``)."""
    limits = connections or ServerSettings()
    config = uvicorn.Config(
        app,
        log_level=log_level.lower(),
        access_log=access_log,
        http=guarded_protocol(limits, connection_cap(limits.max_connections, upstream_connections)),
        timeout_keep_alive=limits.keep_alive_timeout_seconds,  # type: ignore[arg-type]
        # uvicorn cancels what still runs then: a little after the streams were cut.
        timeout_graceful_shutdown=math.ceil(drain_timeout + CUT_GRACE_SECONDS),
        **options,
    )
    server = CallerSignalsServer(config)
    server.drain_timeout = drain_timeout
    return server


async def _serve(server: uvicorn.Server, sock: socket.socket) -> None:
    try:
        await server.serve(sockets=[sock])
    except SystemExit:  # uvicorn's way of reporting a failed application start-up
        server.should_exit = True


async def serve_together(
    servers: list[tuple[uvicorn.Server, socket.socket]],
    on_started: Callable[[], None] | None = None,
) -> bool:
    """Serve every server on its socket until a signal (or one server stops); stop them all.

    ``on_started`` runs once every server accepts connections. Returns whether they all
    started (False: one failed its start-up, and uvicorn logged why).
    """
    loop = asyncio.get_running_loop()
    # On a signal a stream finishes within the drain, and is cut when the drain lapses
    # (app.api.drain).

    cut: list[asyncio.TimerHandle] = []

    def stop() -> None:
        for server, _ in servers:
            server.should_exit = True
        drains = [s.drain_timeout for s, _ in servers if isinstance(s, CallerSignalsServer)]
        timeouts = [t for t in drains if t is not None]
        if timeouts and not cut:
            cut.append(loop.call_later(min(timeouts), cut_open_streams))

    def on_signal() -> None:
        if cut:  # a second signal: the open streams end now, without waiting for the drain
            cut_open_streams()
        stop()

    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, on_signal)
    try:
        tasks = [asyncio.create_task(_serve(server, sock)) for server, sock in servers]
        started = await _until_started([server for server, _ in servers], tasks)
        if started and on_started is not None:
            on_started()
        await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
        stop()
        await asyncio.gather(*tasks)
        return started
    finally:
        for handle in cut:
            handle.cancel()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.remove_signal_handler(sig)


async def _until_started(servers: list[uvicorn.Server], tasks: list[asyncio.Task[None]]) -> bool:
    while not all(server.started for server in servers):
        if any(task.done() for task in tasks):
            return False
        await asyncio.wait(tasks, timeout=0.05, return_when=asyncio.FIRST_COMPLETED)
    return True


def run_servers(
    servers: list[tuple[uvicorn.Server, socket.socket]],
    on_started: Callable[[], None] | None = None,
) -> bool:
    """:func:`serve_together` in a new event loop, uvicorn's choice (uvloop when installed)."""
    config = servers[0][0].config
    factory = config.get_loop_factory() if hasattr(config, "get_loop_factory") else None
    with asyncio.Runner(loop_factory=factory) as runner:
        return runner.run(serve_together(servers, on_started))
