"""Paced SSE streams: N concurrent streams, the arrival time of every event recorded.

    python bench/paced.py --url http://127.0.0.1:9000/v1/responses -n 256 -d 10 --pace-ms 20

The client of ``bench/run.py --paced`` (issue 19, "streams at GPU scale"); it runs on its own as
well and prints one JSON object. N *slots* are kept busy: each slot opens a stream
(``POST`` with ``"stream": true`` and ``Connection: close``, one new socket per stream), reads it
to the end, and opens the next one at once, until ``--duration`` has passed; the streams running
then are read to their end but their events after the deadline are not measured. Slot i starts
at ``i * pace / N``, so the N streams are spread over the first pacing interval instead of
arriving in lockstep (the mock paces each stream from its own start). ``--streams-per-slot K``
instead runs exactly K streams per slot with no deadline (the tests use it: counts are exact).

Measured, over the window ``[start + --warmup-s, deadline]`` (all of a K-streams run):
events/s; the inter-event gap (between consecutive events of one stream, from the 4th event
on: see ``GAP_FROM``) p50/p99/p99.9/max; and, over all streams, the first event (from the
request's write to the first event's arrival) p50/p99/max, streams completed, events per
completed stream, errors. An event is a ``data:`` line of the de-chunked body
(``data: [DONE]`` is not counted). Every event that arrives in one read gets that read's time.

Cheap on purpose (hundreds of streams x 100 events/s on one core): asyncio Protocols on raw
sockets (uvloop when installed), httptools' C parser for the status line and chunked framing,
one clock read per socket read, and the events counted with ``bytes.count``.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import contextlib
import json
import math
import resource
import socket
import sys
import time
from dataclasses import dataclass, field
from typing import Any, cast
from urllib.parse import urlsplit

import httptools

DEFAULT_BODY = {"model": "mock", "input": "hi", "stream": True, "store": False}

_DATA = b"\ndata:"
_DONE = b"\ndata: [DONE]"
_CARRY = len(_DONE) - 1  # bytes kept across reads: no pattern fits wholly inside them
# Gaps are measured from a stream's 4th event on (the gap ending at event index 3 is the first):
# the gateway sends its own response.created and response.in_progress as soon as the upstream
# answers, and the upstream's third event comes two pacing intervals after its first, a gap
# the direct stream does not have. From the 4th event on, both are one pacing interval apart.
GAP_FROM = 3


def percentile(sorted_values: list[float], p: float) -> float | None:
    """Linear interpolation between closest ranks (as shared/bench/load.py computes them)."""
    if not sorted_values:
        return None
    k = (len(sorted_values) - 1) * p / 100.0
    lo = int(k)
    hi = min(lo + 1, len(sorted_values) - 1)
    return sorted_values[lo] + (sorted_values[hi] - sorted_values[lo]) * (k - lo)


def raise_open_files(needed: int) -> int:
    """Raise the soft RLIMIT_NOFILE to at least ``needed`` (up to the hard limit)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft != resource.RLIM_INFINITY and soft < needed:
        target = needed if hard == resource.RLIM_INFINITY else min(needed, hard)
        with contextlib.suppress(ValueError, OSError):
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
    return resource.getrlimit(resource.RLIMIT_NOFILE)[0]


class EventCounter:
    """Counts SSE events (``data:`` lines, ``data: [DONE]`` excluded) in a de-chunked body fed
    in arbitrary pieces: a pattern split across pieces is counted once, when it completes. The
    sum over the pieces is exact; one piece may give -1 (``[DONE]`` completed after its
    ``data:``)."""

    __slots__ = ("carry",)

    def __init__(self) -> None:
        self.carry = b"\n"  # the body's start is a line start

    def feed(self, piece: bytes) -> int:
        buf = self.carry + piece
        keep = len(self.carry)
        # Only matches that end inside ``piece``: they start at or after keep - len(pattern) + 1.
        found = buf.count(_DATA, max(0, keep - len(_DATA) + 1))
        # -1 when a "data: [DONE]" completes here whose "data:" was counted in a past piece.
        found -= buf.count(_DONE, max(0, keep - len(_DONE) + 1))
        self.carry = buf[-_CARRY:]
        return found


class _Stream(asyncio.Protocol):
    """One stream on its own connection: writes the request, timestamps every event."""

    def __init__(self, request: bytes, done: asyncio.Future[None]) -> None:
        self.request = request
        self.done = done
        self.parser = httptools.HttpResponseParser(self)
        self.counter = EventCounter()
        self.transport: asyncio.Transport | None = None
        self.sent = 0.0
        self.now = 0.0
        self.times: list[float] = []
        self.status = 0
        self.error_body: list[bytes] | None = None
        self.complete = False
        self.framed = False  # chunked or a length: the parser sees the end; else the close

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)  # uvloop's is no subclass
        sock = transport.get_extra_info("socket")
        if sock is not None:
            with contextlib.suppress(OSError):
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.sent = time.perf_counter()
        self.transport.write(self.request)

    def data_received(self, data: bytes) -> None:
        self.now = time.perf_counter()
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserError as exc:
            self._finish(exc)

    def eof_received(self) -> bool | None:
        if self.status and not self.framed and not self.complete:
            self.on_message_complete()  # a body delimited by the close ends here
        return None

    def connection_lost(self, exc: Exception | None) -> None:
        self._finish(exc or ConnectionResetError("connection closed before the end of the body"))

    # httptools callbacks
    def on_header(self, name: bytes, value: bytes) -> None:
        if name.lower() in (b"transfer-encoding", b"content-length"):
            self.framed = True

    def on_headers_complete(self) -> None:
        self.status = self.parser.get_status_code()
        if self.status != 200:
            self.error_body = []

    def on_body(self, body: bytes) -> None:
        if self.error_body is not None:
            self.error_body.append(body)
            return
        found = self.counter.feed(body)
        if found == 1:
            self.times.append(self.now)
        elif found > 1:
            self.times.extend([self.now] * found)
        elif found < 0:  # the last "data:" counted was [DONE]'s
            del self.times[found:]

    def on_message_complete(self) -> None:
        self.complete = True
        self._finish(None)

    def _finish(self, exc: Exception | None) -> None:
        if not self.done.done():
            if exc is None:
                self.done.set_result(None)
            else:
                self.done.set_exception(exc)
        if self.transport is not None:
            self.transport.close()


@dataclass
class StreamRecord:
    sent: float
    times: list[float]
    status: int
    complete: bool
    error: str | None


@dataclass
class Collected:
    records: list[StreamRecord] = field(default_factory=list)
    errors: collections.Counter[str] = field(default_factory=collections.Counter)
    first_error: str | None = None

    def error(self, what: str) -> None:
        kind = what.split(":", 1)[0][:80]
        self.errors[kind] += 1
        if self.first_error is None:
            self.first_error = what[:300]


def build_request(url: str, body: bytes, headers: list[tuple[str, str]]) -> bytes:
    parts = urlsplit(url)
    path = (parts.path or "/") + ("?" + parts.query if parts.query else "")
    lines = [
        f"POST {path} HTTP/1.1",
        f"Host: {parts.netloc}",
        "Content-Type: application/json",
        "Accept: text/event-stream",
        f"Content-Length: {len(body)}",
        "Connection: close",
        *(f"{name}: {value}" for name, value in headers),
    ]
    return ("\r\n".join(lines) + "\r\n\r\n").encode() + body


async def _one_stream(host: str, port: int, request: bytes, out: Collected, limit_s: float) -> None:
    loop = asyncio.get_running_loop()
    done: asyncio.Future[None] = loop.create_future()
    proto: _Stream | None = None
    error: str | None = None
    try:
        _, proto = await loop.create_connection(lambda: _Stream(request, done), host, port)
        await asyncio.wait_for(done, limit_s)
    except asyncio.CancelledError:
        if proto is not None and proto.transport is not None:
            proto.transport.close()
        raise
    except Exception as exc:  # every failure is a figure, not a crash
        error = f"{type(exc).__name__}: {exc}"
        if proto is not None and proto.transport is not None:
            proto.transport.close()
    if proto is None:
        out.error(error or "connect failed")
        out.records.append(StreamRecord(loop.time(), [], 0, False, error))
        return
    if proto.status != 200 and error is None:
        body = b"".join(proto.error_body or [])[:200]
        error = f"HTTP {proto.status}: {body.decode(errors='replace')}"
    if error is not None:
        out.error(error)
    out.records.append(StreamRecord(proto.sent, proto.times, proto.status, proto.complete, error))


async def run_paced(
    url: str,
    *,
    streams: int,
    pace_ms: float,
    body: bytes | None = None,
    duration: float | None = None,
    per_slot: int | None = None,
    warmup_s: float = 1.0,
    headers: list[tuple[str, str]] | None = None,
    expected_events: int | None = None,
    stream_timeout: float = 300.0,
    gap_from: int = GAP_FROM,
) -> dict[str, Any]:
    """Run the paced streams in the running loop; returns the figures (see the module doc)."""
    if (duration is None) == (per_slot is None):
        raise ValueError("give exactly one of duration and per_slot")
    parts = urlsplit(url)
    host = parts.hostname or "127.0.0.1"
    port = parts.port or 80
    payload = body if body is not None else json.dumps(DEFAULT_BODY).encode()
    request = build_request(url, payload, headers or [])
    out = Collected()
    cpu0 = time.process_time()
    start = time.perf_counter()
    deadline = start + duration if duration is not None else math.inf

    async def slot(index: int) -> None:
        await asyncio.sleep(index * pace_ms / 1000.0 / streams)
        done = 0
        while time.perf_counter() < deadline and (per_slot is None or done < per_slot):
            await _one_stream(host, port, request, out, stream_timeout)
            done += 1
            if out.records[-1].error is not None and not out.records[-1].times:
                await asyncio.sleep(0.01)  # a refused connection: no busy loop

    await asyncio.gather(*(slot(i) for i in range(streams)))
    end = time.perf_counter()
    client_cpu = time.process_time() - cpu0
    # K streams per slot: everything; a duration: the deadline's window past the warm-up.
    window = (start, end) if duration is None else (start + min(warmup_s, duration / 2), deadline)
    result = summarize(out, window, start, end, streams, pace_ms, expected_events, gap_from)
    result["client_cpu_s"] = round(client_cpu, 3)
    result["client_cpu_pct"] = round(client_cpu / max(end - start, 1e-9) * 100, 1)
    result["mode"] = (
        f"{per_slot} stream(s) per slot" if per_slot is not None else f"slots busy {duration:g} s"
    )
    return result


def summarize(
    out: Collected,
    window: tuple[float, float],
    start: float,
    end: float,
    streams: int,
    pace_ms: float,
    expected_events: int | None,
    gap_from: int = GAP_FROM,
) -> dict[str, Any]:
    lo, hi = window
    gaps: list[float] = []
    firsts: list[float] = []
    events_total = 0
    in_window = 0
    per_stream: collections.Counter[int] = collections.Counter()
    completed = 0
    for rec in out.records:
        times = rec.times
        events_total += len(times)
        if times:
            firsts.append(times[0] - rec.sent)
        if rec.complete and rec.error is None:
            completed += 1
            per_stream[len(times)] += 1
        for i, t in enumerate(times):
            if lo <= t <= hi:
                in_window += 1
                if i >= gap_from:
                    gaps.append(t - times[i - 1])
    gaps.sort()
    firsts.sort()
    span = max(hi - lo, 1e-9)

    def ms(value: float | None) -> float | None:
        return None if value is None else round(value * 1000.0, 3)

    nominal = streams * 1000.0 / pace_ms if pace_ms > 0 else None
    short = 0
    if expected_events is not None:
        short = sum(n for count, n in per_stream.items() if count != expected_events)
        if short:
            out.error(f"events per stream: {dict(per_stream)} (expected {expected_events})")
    return {
        "streams": streams,
        "pace_ms": pace_ms,
        "window_s": round(span, 3),
        "window_start_s": round(lo - start, 3),
        "wall_s": round(end - start, 3),
        "events": events_total,
        "events_in_window": in_window,
        "events_per_s": round(in_window / span, 1),
        "nominal_events_per_s": None if nominal is None else round(nominal, 1),
        "streams_started": len(out.records),
        "streams_completed": completed,
        "events_per_stream": {str(k): v for k, v in sorted(per_stream.items())},
        "first_event_ms": {
            "p50": ms(percentile(firsts, 50)),
            "p99": ms(percentile(firsts, 99)),
            "max": ms(firsts[-1] if firsts else None),
        },
        "gap_ms": {
            "n": len(gaps),
            "from_event": gap_from,
            "p50": ms(percentile(gaps, 50)),
            "p99": ms(percentile(gaps, 99)),
            "p999": ms(percentile(gaps, 99.9)),
            "max": ms(gaps[-1] if gaps else None),
        },
        "errors": sum(out.errors.values()),
        "error_kinds": dict(out.errors),
        "first_error": out.first_error,
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--url", required=True, help="the POST /v1/responses URL")
    ap.add_argument("-n", "--streams", type=int, default=64, help="concurrent streams (slots)")
    ap.add_argument(
        "--pace-ms",
        type=float,
        default=20.0,
        help="the upstream's pacing: the slots' starts are spread over one interval; the "
        "nominal events/s is streams * 1000 / pace",
    )
    group = ap.add_mutually_exclusive_group()
    group.add_argument("-d", "--duration", type=float, help="seconds the slots are kept busy")
    group.add_argument("--streams-per-slot", type=int, help="exactly K streams per slot instead")
    ap.add_argument("--warmup-s", type=float, default=1.0, help="unmeasured start of the window")
    ap.add_argument("--body", default=json.dumps(DEFAULT_BODY, separators=(",", ":")))
    ap.add_argument("-H", "--header", action="append", default=[], help="'Name: value'")
    ap.add_argument(
        "--gap-from",
        type=int,
        default=GAP_FROM,
        help="measure gaps from this event index of a stream on (%(default)s: see GAP_FROM)",
    )
    ap.add_argument(
        "--expect-events", type=int, help="events a complete stream must have (else an error)"
    )
    args = ap.parse_args(argv)
    if args.duration is None and args.streams_per_slot is None:
        args.duration = 10.0
    headers = [(k.strip(), v.strip()) for k, _, v in (h.partition(":") for h in args.header)]
    raise_open_files(args.streams + 256)
    with contextlib.suppress(ImportError):
        import uvloop

        uvloop.install()
    result = asyncio.run(
        run_paced(
            args.url,
            streams=args.streams,
            pace_ms=args.pace_ms,
            body=args.body.encode(),
            duration=args.duration,
            per_slot=args.streams_per_slot,
            warmup_s=args.warmup_s,
            headers=headers,
            expected_events=args.expect_events,
            gap_from=max(1, args.gap_from),
        )
    )
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
