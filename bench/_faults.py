"""Plumbing for bench/fault_trials.py: a fault-injecting upstream, a gateway subprocess, clients.

``FaultUpstream`` is a small OpenAI Responses upstream on raw asyncio streams, run on its own
event loop in a thread of the bench process, so a trial can change what it does between steps
and read what it saw: open connections now and at most, requests per path, answers written in
full, and answers cut because the gateway closed the connection first. What each request gets
is a ``Plan`` chosen by the trial's ``planner(n, request)``: hang (never answer), an HTTP error
status, or an answer (JSON or paced SSE) after a delay.

``Gateway`` runs ``python -m app.cli serve`` (``respgate serve``) of ``_harness.APP_ROOT`` (the
work tree, or the export ``--ref`` made) with its output on a pipe, collected line by line, so
a trial can grep the log, and so an RLIMIT_FSIZE set on it (the disk-full trial) does not fail
the log's writes too.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import os
import re
import resource
import signal
import sqlite3
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import _harness
import httpx

JSON_HEAD = "HTTP/1.1 {status} X\r\ncontent-type: application/json\r\ncontent-length: {n}\r\n\r\n"
SSE_HEAD = (
    "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ncache-control: no-cache\r\n"
    "transfer-encoding: chunked\r\n\r\n"
)


@dataclass(frozen=True)
class Plan:
    """What the upstream does with one request: ``hang`` forever, answer ``status`` with an
    error body, or answer (after ``delay`` s) as JSON or, for a stream, ``events`` text deltas
    ``pace`` s apart."""

    hang: bool = False
    status: int = 200
    delay: float = 0.0
    events: int = 5
    pace: float = 0.0


Planner = Callable[[int, dict[str, Any]], Plan]

Row = tuple[str, str, str]  # figure, value, what good looks like
BODY = {"model": "mock", "input": "hi"}
QUICK = ("--drain-timeout", "1")  # the gateway's own exit must not wait on hung requests
INTERNAL = re.compile(
    r"sqlite|sqlalchemy|asyncpg|operationalerror|traceback|errno|\.py\b|file too large"
    r"|disk|database is|exception",
    re.IGNORECASE,
)


def temp_dir(name: str) -> Path:
    return Path(tempfile.mkdtemp(prefix=f"respgate-fault-{name}-"))


def ms(seconds: float) -> str:
    return f"{seconds * 1000:,.0f} ms"


async def timed(coro: Awaitable[Any]) -> tuple[Any, float]:
    t0 = time.monotonic()
    out = await coro
    return out, time.monotonic() - t0


async def status_of(client: httpx.AsyncClient, method: str, url: str, **kw: Any) -> str:
    """``200``, ``504 upstream_timeout`` (status and error code), or the exception's name."""
    try:
        resp = await client.request(method, url, **kw)
    except httpx.HTTPError as exc:
        return type(exc).__name__
    code = ""
    with contextlib.suppress(Exception):
        code = (resp.json().get("error") or {}).get("code") or ""
    return f"{resp.status_code} {code}".strip()


def _sse(kind: str, data: dict[str, Any]) -> bytes:
    return f"event: {kind}\ndata: {json.dumps({'type': kind, **data})}\n\n".encode()


def answer_frames(request: dict[str, Any], n: int, deltas: int) -> list[bytes]:
    """The SSE events of a text answer with ``deltas`` deltas (the real event sequence)."""
    rid, iid = f"resp_fault{n:020d}", f"msg_fault{n:020d}"
    words = [f"w{i} " for i in range(deltas)]
    part: dict[str, Any] = {
        "type": "output_text",
        "annotations": [],
        "logprobs": [],
        "text": "".join(words),
    }
    item: dict[str, Any] = {
        "id": iid,
        "type": "message",
        "status": "completed",
        "role": "assistant",
    }
    base: dict[str, Any] = {
        "id": rid,
        "object": "response",
        "created_at": int(time.time()),
        "output": [],
    }
    base |= {"status": "in_progress", "model": request.get("model", "mock"), "error": None}
    usage: dict[str, Any] = {"input_tokens": 1, "output_tokens": deltas, "total_tokens": deltas + 1}
    usage |= {"input_tokens_details": {"cached_tokens": 0}}
    usage |= {"output_tokens_details": {"reasoning_tokens": 0}}
    final = base | {"status": "completed", "output": [item | {"content": [part]}], "usage": usage}
    at: dict[str, Any] = {"item_id": iid, "output_index": 0, "content_index": 0}
    events: list[tuple[str, dict[str, Any]]] = [
        ("response.created", {"response": base}),
        ("response.in_progress", {"response": base}),
    ]
    events += [("response.output_item.added", {"output_index": 0, "item": item | {"content": []}})]
    events += [("response.content_part.added", at | {"part": part | {"text": ""}})]
    events += [("response.output_text.delta", at | {"delta": w, "logprobs": []}) for w in words]
    events += [("response.output_text.done", at | {"text": part["text"], "logprobs": []})]
    events += [("response.content_part.done", at | {"part": part})]
    events += [("response.output_item.done", {"output_index": 0, "item": final["output"][0]})]
    events += [("response.completed", {"response": final})]
    return [_sse(kind, data | {"sequence_number": i}) for i, (kind, data) in enumerate(events)]


class FaultUpstream:
    """See the module docstring. Counters are read from the bench's thread (plain ints)."""

    def __init__(self, planner: Planner) -> None:
        self.planner = planner
        self.port = _harness.free_port()
        self.open = 0
        self.max_open = 0
        self.requests: Counter[str] = Counter()
        self.answered = 0
        self.cut = 0
        self._n = itertools.count(1)
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)
        self._server: asyncio.Server | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def generations(self) -> int:
        return self.requests["POST /v1/responses"]

    def __enter__(self) -> FaultUpstream:
        self._thread.start()
        self._call(self._listen())
        return self

    def __exit__(self, *exc: object) -> None:
        with contextlib.suppress(Exception):
            self._call(self._close())
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=5)

    def _call(self, coro: Any) -> Any:
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result(timeout=10)

    async def _listen(self) -> None:
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", self.port, backlog=4096)

    async def _close(self) -> None:
        assert self._server is not None
        self._server.close()
        for task in asyncio.all_tasks():
            if task is not asyncio.current_task():
                task.cancel()

    def refuse(self) -> None:
        """The upstream is down: open connections close, new ones are refused."""
        self._call(self._close())

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.open += 1
        self.max_open = max(self.max_open, self.open)
        try:
            while await self._one(reader, writer):
                pass
        except (ConnectionError, asyncio.IncompleteReadError, asyncio.LimitOverrunError):
            pass
        except asyncio.CancelledError:  # refuse() or the end of the trial
            pass
        finally:
            self.open -= 1
            writer.close()

    async def _one(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> bool:
        head = (await reader.readuntil(b"\r\n\r\n")).decode("latin-1")
        method, path = head.split(" ", 2)[:2]
        length = 0
        for line in head.split("\r\n")[1:]:
            name, _, value = line.partition(":")
            if name.strip().lower() == "content-length":
                length = int(value)
        body = await reader.readexactly(length) if length else b""
        self.requests[f"{method} {path}"] += 1
        request = json.loads(body) if body else {}
        if method != "POST" or not path.endswith("/responses"):
            return await self._write(writer, 200, b'{"object":"list","data":[]}', counted=False)
        plan = self.planner(next(self._n), request)
        # A read while answering sees the gateway close the connection (b"": EOF).
        gone = asyncio.ensure_future(reader.read(1))
        try:
            if plan.hang or plan.delay:
                await asyncio.wait([gone], timeout=None if plan.hang else plan.delay)
            if gone.done():
                self.cut += 1
                return False
            if plan.status != 200:
                error = {"message": "upstream fault", "type": "server_error", "code": None}
                return await self._write(writer, plan.status, json.dumps({"error": error}))
            frames = answer_frames(request, self.requests["POST /v1/responses"], plan.events)
            if not request.get("stream"):
                final = json.loads(frames[-1].split(b"data: ", 1)[1])["response"]
                return await self._write(writer, 200, json.dumps(final))
            return await self._stream(writer, frames, plan.pace, gone)
        finally:
            gone.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await gone

    async def _write(
        self, writer: asyncio.StreamWriter, status: int, body: bytes | str, counted: bool = True
    ) -> bool:
        data = body.encode() if isinstance(body, str) else body
        writer.write(JSON_HEAD.format(status=status, n=len(data)).encode() + data)
        await writer.drain()
        self.answered += counted and status == 200
        return True

    async def _stream(
        self, writer: asyncio.StreamWriter, frames: list[bytes], pace: float, gone: Any
    ) -> bool:
        writer.write(SSE_HEAD.encode())
        for i, frame in enumerate(frames):
            if i and pace:
                await asyncio.wait([gone], timeout=pace)
            if gone.done() or writer.is_closing():
                self.cut += 1
                return False
            writer.write(b"%x\r\n%s\r\n" % (len(frame), frame))
            await writer.drain()
        writer.write(b"0\r\n\r\n")
        await writer.drain()
        self.answered += 1
        return True


class Gateway:
    """``respgate serve`` of the checkout under test, on a free port, output collected."""

    def __init__(
        self,
        upstream_url: str,
        data_dir: Path,
        *args: str,
        env: dict[str, str] | None = None,
        nofile: int | None = None,
    ) -> None:
        self.port = _harness.free_port()
        self.data_dir = data_dir
        self.cmd = [sys.executable, "-m", "app.cli", "serve", "--port", str(self.port)]
        self.cmd += ["--upstream-url", upstream_url, "--data-dir", str(data_dir), *args]
        self.env = {**os.environ, "PYTHONUNBUFFERED": "1", **(env or {})}
        self.env["PYTHONPATH"] = str(_harness.APP_ROOT)
        self.lines: list[str] = []
        self.proc: subprocess.Popen[bytes] | None = None
        self.nofile = nofile  # the soft RLIMIT_NOFILE of the gateway (None: inherited)

    @property
    def base(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def _limits(self) -> None:
        if self.nofile is not None:
            hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
            resource.setrlimit(resource.RLIMIT_NOFILE, (self.nofile, hard))

    def __enter__(self) -> Gateway:
        self.proc = subprocess.Popen(
            self.cmd,
            cwd=_harness.APP_ROOT,
            env=self.env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            preexec_fn=self._limits,
        )
        threading.Thread(target=self._collect, daemon=True).start()
        deadline = time.monotonic() + 60
        while not self._healthy():
            if self.proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError("gateway did not start:\n" + "\n".join(self.lines[-30:]))
            time.sleep(0.1)
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def _collect(self) -> None:
        assert self.proc is not None and self.proc.stdout is not None
        for raw in self.proc.stdout:
            self.lines.append(raw.decode(errors="replace").rstrip())

    def _healthy(self) -> bool:
        import urllib.request

        try:
            with urllib.request.urlopen(self.base + "/health", timeout=1) as resp:
                return bool(resp.status == 200)
        except OSError:
            return False

    def signal(self, sig: int = signal.SIGTERM) -> None:
        assert self.proc is not None
        self.proc.send_signal(sig)

    def wait(self, timeout: float) -> int | None:
        """Wait for the gateway to exit by itself (killed after ``timeout`` s)."""
        assert self.proc is not None
        try:
            return self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
            return None

    def stop(self, timeout: float = 30) -> int | None:
        if self.proc is None:
            return None
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        return self.proc.returncode

    def log_since(self, mark: int, *words: str) -> list[str]:
        """Log lines after line ``mark`` that contain one of ``words`` (all lines if none)."""
        lines = self.lines[mark:]
        return [ln for ln in lines if not words or any(w in ln.lower() for w in words)]

    def stored(self) -> int | None:
        """Rows in the SQLite store's ``responses`` table (None: no such file)."""
        path = self.data_dir / "respgate.db"
        if not path.exists():
            return None
        with contextlib.closing(sqlite3.connect(f"file:{path}?mode=ro", uri=True)) as db:
            return int(db.execute("SELECT count(*) FROM responses").fetchone()[0])


def run_cli(*args: str) -> str:
    """``respgate ARGS`` of the checkout under test (``migrate``); its output."""
    env = {**os.environ, "PYTHONPATH": str(_harness.APP_ROOT)}
    cmd = [sys.executable, "-m", "app.cli", *args]
    out = subprocess.run(cmd, cwd=_harness.APP_ROOT, env=env, capture_output=True, text=True)
    if out.returncode:
        raise RuntimeError(f"respgate {' '.join(args)}: {(out.stderr or out.stdout)[-300:]}")
    return out.stdout + out.stderr


async def hold(port: int, request: bytes, seconds: float) -> bytes:
    """Send ``request`` on a raw connection, read what comes for ``seconds``, then close it
    (the client leaves). Returns what was read."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(request)
    got = bytearray()
    with contextlib.suppress(TimeoutError, ConnectionError):
        async with asyncio.timeout(seconds):
            while chunk := await reader.read(65536):
                got += chunk
    writer.close()
    return bytes(got)


def http_post(path: str, body: dict[str, Any]) -> bytes:
    data = json.dumps(body).encode()
    return (
        f"POST {path} HTTP/1.1\r\nhost: 127.0.0.1\r\ncontent-type: application/json\r\n"
        f"content-length: {len(data)}\r\n\r\n"
    ).encode() + data


def sse_types(text: str) -> list[str]:
    """The ``event:`` names of an SSE body, in order (``data: [DONE]`` as "[DONE]")."""
    out = []
    for line in text.splitlines():
        if line.startswith("event:"):
            out.append(line[6:].strip())
        elif line.strip() == "data: [DONE]":
            out.append("[DONE]")
    return out


def error_codes(text: str) -> list[str]:
    """The ``code`` of each ``error`` event of an SSE body."""
    codes = []
    for frame in text.split("\n\n"):
        if frame.startswith("event: error\n") and "\ndata: " in frame:
            with contextlib.suppress(ValueError, AttributeError):
                data = json.loads(frame.split("\ndata: ", 1)[1])
                codes.append(str(data.get("code") or (data.get("error") or {}).get("code")))
    return codes


def ending(types: Sequence[str]) -> str:
    """How a stream ended: completed, failed (``error`` and/or ``response.failed``), or cut
    (no terminal event)."""
    if "response.completed" in types:
        return "completed"
    if "response.failed" in types or "error" in types:
        return "failed"
    if "response.incomplete" in types:
        return "incomplete"
    return "cut"
