"""Slow and idle clients, and the connection cap: the HTTP protocol every server the CLI runs.

uvicorn closes a connection idle between requests (``timeout_keep_alive``) but otherwise gives a
client all the time it wants: a connection that sends nothing, or one byte at a time, holds a
file descriptor for ever, and enough of them (past the process's open-files limit) make the
server drop every other client. :func:`guarded_protocol` is uvicorn's httptools protocol with,
per process (``[server]``, ``app.options.server``):

- a header timeout: a request's head (request line and headers) must arrive within
  ``header_timeout_seconds`` of the connection opening, or on a kept-alive connection of the
  request's first byte; else the connection is closed, with a 408 in OpenAI's envelope when
  part of a head came;
- a body timeout: the body must arrive within ``body_timeout_seconds`` of the head, one second
  more for every :data:`BODY_BYTES_PER_SECOND` bytes received (Apache mod_reqtimeout's MinRate:
  a large upload at a steady rate is not cut, a trickle is). The clock restarts while the
  gateway itself holds the body back (uvicorn's flow control, a pipelined request). Past it: a
  408 when no answer was started, and the connection is closed (the application sees its
  client gone);
- a connection cap: a process holds at most ``max_connections`` open. A new connection past
  it closes the connection that has waited longest for a request head (idle after a response,
  or sending a head too slowly: the likeliest slow client, never one with a request under way)
  and is served; when every open connection has a request under way, it is answered 503
  (``retry-after: 1``) at once, without reading it, and closed (once the client closed its end,
  or :data:`LINGER_SECONDS` later). So a flood of slow connections cannot keep new clients
  (``/health``, the SDK) out, and requests under way (streams) are never cut.
  :func:`connection_cap` lowers the cap to what the open-files limit leaves, after raising
  the soft limit to the hard one.

uvicorn's own ``limit_concurrency`` is not used: it answers 503 only once a head arrived
(so a connection past it is held, and a slow one for the whole header timeout) and refuses the
requests of connections already open too.

Every time a timeout or the cap fires, :class:`Notices` counts it; it logs one line per kind at
most once a second, with how many times it happened, so a flood does not flood the log.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import orjson
from uvicorn.config import Config
from uvicorn.protocols.http.httptools_impl import STATUS_LINE, HttpToolsProtocol
from uvicorn.server import ServerState

from app.core.summarized import Summarized
from app.options.server import ServerSettings

logger = logging.getLogger(__name__)

# The body timeout grows by one second for every this many bytes received.
BODY_BYTES_PER_SECOND = 1000
# How long a connection answered by the gateway (408, 503) waits for its client to close
# before it is closed anyway.
LINGER_SECONDS = 1.0
# File descriptors kept for everything but client connections (upstream pools, the store,
# files), at most: a quarter of the open-files limit below 2,048.
_RESERVED_FILES = 512

_HEAD_TIMEOUT = "header"
_BODY_TIMEOUT = "body"
_CAP = "refused"
_EVICTED = "evicted"

_DESCRIBE = {
    _HEAD_TIMEOUT: "header timeout: closed {count} connection(s) whose request head did not "
    "arrive within {header:g} s (server.header_timeout_seconds); last from {client}",
    _BODY_TIMEOUT: "body timeout: closed {count} connection(s) whose request body did not "
    "arrive within {body:g} s (server.body_timeout_seconds); last from {client}",
    _CAP: "connection cap: refused {count} new connection(s) with a 503: {cap} were open, each "
    "with a request under way (server.max_connections); last from {client}",
    _EVICTED: "connection cap: closed {count} connection(s) waiting for a request head to make "
    "room for new ones: {cap} were open (server.max_connections); last from {client}",
}


class Notices:
    """One warning line per kind and ``interval`` at most (``core.summarized.Summarized``): the
    first connection of a kind at once, those after it within the interval counted in one
    line, each naming the last client."""

    def __init__(self, settings: ServerSettings, cap: int, interval: float = 1.0) -> None:
        values = {
            "header": settings.header_timeout_seconds,
            "body": settings.body_timeout_seconds,
            "cap": cap,
        }

        def kind_of(kind: str) -> Summarized[str]:
            def tell(clients: list[str]) -> None:
                text = _DESCRIBE[kind].format(count=len(clients), client=clients[-1], **values)
                logger.warning("%s", text)

            return Summarized(lambda client: tell([client]), tell, interval)

        self._kinds = {kind: kind_of(kind) for kind in _DESCRIBE}

    def note(self, kind: str, client: Any) -> None:
        self._kinds[kind].note(f"{client[0]}:{client[1]}" if client else "an unknown address")


def _answer(status: int, code: str, message: str, state: ServerState, *extra: bytes) -> bytes:
    """A whole HTTP/1.1 response with OpenAI's error envelope, closing the connection."""
    kind = "server_error" if status >= 500 else "invalid_request_error"
    body = orjson.dumps({"error": {"message": message, "type": kind, "param": None, "code": code}})
    head = [STATUS_LINE[status]]
    head += [b"%s: %s\r\n" % pair for pair in state.default_headers]
    head += [b"content-type: application/json\r\n", b"content-length: %d\r\n" % len(body)]
    head += [*extra, b"connection: close\r\n\r\n"]
    return b"".join(head) + body


class GuardedProtocol(HttpToolsProtocol):
    """uvicorn's httptools protocol with the timeouts and the cap of the module docstring.
    :func:`guarded_protocol` makes a subclass with ``settings``, ``cap`` and ``notices``.

    One timer per connection, moved only when a deadline comes earlier than it: a request
    sets the deadline of its phase (head, then body) and clears it when done, the timer checks
    the deadline when it fires and waits on if it has not passed (no timer work per request on
    a busy connection)."""

    settings: ServerSettings
    cap: int
    notices: Notices
    # The server's connections waiting for a request head, the longest waiting first.
    waiting: dict[GuardedProtocol, None]

    def __init__(
        self, config: Config, server_state: ServerState, app_state: dict[str, Any], **more: Any
    ) -> None:
        super().__init__(config, server_state, app_state, **more)
        self._timer: asyncio.TimerHandle | None = None
        self._phase: str | None = None  # "head", "body", or None: nothing is awaited
        self._due = 0.0  # the head's deadline, or when the body's clock started
        self._head_begun = False
        self._body_received = 0
        self._ended = False

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        if len(self.connections) > self.cap and not self._evict_one():
            self.notices.note(_CAP, self.client)
            message = "The server has too many open connections; try again shortly."
            retry = b"retry-after: 1\r\n"
            self._end(_answer(503, "too_many_connections", message, self.server_state, retry))
            return
        self.waiting[self] = None
        self._await("head", self.loop.time() + self.settings.header_timeout_seconds)

    def _evict_one(self) -> bool:
        """Close the connection that has waited longest for a request head; whether there was
        one."""
        for victim in self.waiting:
            del self.waiting[victim]
            self.notices.note(_EVICTED, victim.client)
            victim._end(None)
            return True
        return False

    def data_received(self, data: bytes) -> None:
        if not self._ended:  # else the connection was answered and is closing: not read
            super().data_received(data)

    def connection_lost(self, exc: Exception | None) -> None:
        self.waiting.pop(self, None)
        self._stop_timer()
        super().connection_lost(exc)

    def handle_websocket_upgrade(self) -> None:
        self.waiting.pop(self, None)
        self._phase = None
        self._stop_timer()
        super().handle_websocket_upgrade()

    def on_message_begin(self) -> None:
        super().on_message_begin()
        self._head_begun = True
        if self._phase is None:  # a kept-alive connection: the head's clock starts now
            self._await("head", self.loop.time() + self.settings.header_timeout_seconds)

    def on_headers_complete(self) -> None:
        self.waiting.pop(self, None)
        self._phase = None
        self._head_begun = False
        cycle = self.cycle
        super().on_headers_complete()
        if self.cycle is not cycle:  # a request (not an upgrade): its body's clock starts
            self._body_received = 0
            now = self.loop.time()
            self._await("body", now + self.settings.body_timeout_seconds, start=now)

    def on_body(self, body: bytes) -> None:
        self._body_received += len(body)
        super().on_body(body)

    def on_message_complete(self) -> None:
        self._phase = None
        super().on_message_complete()

    def on_response_complete(self) -> None:
        super().on_response_complete()
        if not self.pipeline and not self.transport.is_closing():  # idle until the next head
            self.waiting[self] = None

    def _await(self, phase: str, due: float, start: float | None = None) -> None:
        """Wait for ``phase`` until ``due``; the timer is moved only if it fires later."""
        self._phase = phase
        self._due = due if start is None else start
        timer = self._timer
        if timer is not None and timer.when() > due:
            timer.cancel()
            timer = None
        if timer is None:
            self._timer = self.loop.call_at(due, self._check)

    def _stop_timer(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def _check(self) -> None:
        """The timer fired: end the connection if the awaited phase is late, else wait on."""
        self._timer = None
        if self._phase is None or self._ended or self.transport.is_closing():
            return
        now = self.loop.time()
        if self._phase == "head":
            due = self._due
        else:
            if self.flow.read_paused:  # the gateway holds the body back: the clock restarts
                self._due, self._body_received = now, 0
            due = self._due + self.settings.body_timeout_seconds
            due += self._body_received / BODY_BYTES_PER_SECOND
        if now < due:
            self._timer = self.loop.call_at(due, self._check)
        elif self._phase == "head":
            self._head_timed_out()
        else:
            self._body_timed_out()

    def _end(self, answer: bytes | None) -> None:
        """Close the connection; with an ``answer``, once the client read it (it closes its
        end) or :data:`LINGER_SECONDS` later, so that its unread request does not reset the
        connection before the answer arrives."""
        self._phase = None
        if answer is None:
            self.transport.close()
            return
        self._ended = True
        self.transport.write(answer)
        if self.transport.can_write_eof():
            self.transport.write_eof()
        self._stop_timer()
        self._timer = self.loop.call_later(LINGER_SECONDS, self.transport.close)

    def _head_timed_out(self) -> None:
        self.notices.note(_HEAD_TIMEOUT, self.client)
        answer = None
        if self._head_begun and (self.cycle is None or self.cycle.response_complete):
            message = (  # part of a request came: it is answered
                "The request's headers did not arrive within "
                f"{self.settings.header_timeout_seconds:g} seconds."
            )
            answer = _answer(408, "request_timeout", message, self.server_state)
        self._end(answer)

    def _body_timed_out(self) -> None:
        self.notices.note(_BODY_TIMEOUT, self.client)
        cycle, answer = self.cycle, None
        if cycle is not None and not cycle.response_started:
            cycle.disconnected = True  # the application sees its client gone, sends nothing
            cycle.message_event.set()
            message = (
                "The request's body did not arrive within "
                f"{self.settings.body_timeout_seconds:g} seconds."
            )
            answer = _answer(408, "request_timeout", message, self.server_state)
        self._end(answer)


def guarded_protocol(settings: ServerSettings, cap: int) -> type[GuardedProtocol]:
    """The protocol class for ``uvicorn.Config(http=...)``: :class:`GuardedProtocol` with
    ``settings`` and at most ``cap`` connections (:func:`connection_cap`)."""
    attributes = {
        "settings": settings,
        "cap": cap,
        "notices": Notices(settings, cap),
        "waiting": {},
    }
    return type("GatewayProtocol", (GuardedProtocol,), attributes)


def connection_cap(wanted: int, upstream_connections: int = 0) -> int:
    """``wanted`` connections, or fewer if the open-files limit (its soft value raised to the
    hard one first, as Go programs do) would not leave room for the others (a warning says
    so). ``upstream_connections``: the upstream pools' connections this process may hold
    besides; each client connection holds at most one of them (a stream), so a client counts
    twice up to that many."""
    try:
        import resource
    except ImportError:  # pragma: no cover - not on POSIX: no limit to read
        return wanted
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    target = hard if hard != resource.RLIM_INFINITY else max(soft, 65536)
    if soft != resource.RLIM_INFINITY and soft < target:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
            soft = target
        except (ValueError, OSError):
            pass
    if soft == resource.RLIM_INFINITY:
        return wanted
    room = max(soft - min(_RESERVED_FILES, soft // 4), 1)
    # c clients hold c + min(c, upstream_connections) descriptors.
    pooled = min(upstream_connections, wanted)
    cap = room - pooled if room >= 2 * pooled else room // 2
    if wanted > cap:
        logger.warning(
            "server.max_connections %d lowered to %d: the open-files limit is %d (ulimit -n), "
            "and each stream holds an upstream connection too (up to %d); raise the limit to "
            "hold more connections",
            wanted,
            max(cap, 1),
            soft,
            upstream_connections,
        )
        return max(cap, 1)
    return wanted
