"""``ProcessExtractor``: each file's text extracted in a child process of its own, on a budget.

A hostile file (a PDF whose pages each re-read a large content stream, a DOCX that inflates to
gigabytes of XML) must not hold the gateway's CPU, memory or ingestion slots for long. So the
gateway never parses an upload itself:

- Each extraction is a fresh ``python -m app.files.extract_worker`` (an asyncio subprocess, so
  nothing blocks the event loop and nothing is forked from a threaded process). The child
  limits its own address space and CPU time before it reads the file (``extract_worker``).
- The wall time budget is kept here: past ``timeout_seconds`` the child is killed (SIGKILL)
  and reaped, never abandoned; the same happens when the ingestion is cancelled.
- At most ``max_concurrency`` documents (PDF, DOCX, PPTX and files whose kind only their bytes
  tell) and ``max_text_concurrency`` text files (text, Markdown, HTML, JSON, code) are
  extracted at once, in two separate lanes: hostile documents filling their lane never delay
  a text file, and each waits at most the time budget per file ahead of it.
- A file on the local disk (``BlobStore.local_path``) is read by the child from its path, so
  the gateway does not load it; other bytes go through the child's stdin in 1 MiB slices.
- The child's environment is a minimal one (no API keys, no database URL), and its answer is
  JSON of a bounded size, never pickle.

Failures are ``UnsupportedFileError`` / ``ExtractionError`` (``invalid_file``: the file's
fault, the same every time, e.g. a decompression bomb or the memory budget) or
``ExtractorFailedError`` (``server_error``: the time budget on a busy machine, a crash).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import sys
from pathlib import Path

import orjson

from app.files.extract import (
    ExtractionError,
    ExtractionLimits,
    ExtractorFailedError,
    Source,
    UnsupportedFileError,
    declared_kind,
)

logger = logging.getLogger(__name__)

WORKER_MODULE = "app.files.extract_worker"
_TEXT_KINDS = frozenset({"text", "html", "json"})
_SLICE = 1024 * 1024
# What the child may print on stderr that is kept for the log (a traceback's end).
_MAX_STDERR_BYTES = 16 * 1024
# The directory ``app`` is imported from, for the child's PYTHONPATH.
_APP_ROOT = str(Path(__file__).resolve().parents[2])


class ProcessExtractor:
    """Extracts text in budgeted child processes (``extract(source, filename=, content_type=)``)."""

    def __init__(self, limits: ExtractionLimits | None = None) -> None:
        self.limits = limits or ExtractionLimits()
        self._documents = asyncio.Semaphore(self.limits.max_concurrency)
        self._texts = asyncio.Semaphore(self.limits.max_text_concurrency)

    async def extract(self, source: Source, *, filename: str, content_type: str | None) -> str:
        """The file's text; raises ``UnsupportedFileError`` or ``ExtractionError``."""
        kind = declared_kind(filename, content_type)  # an unsupported type fails here, unread
        lane = self._texts if kind in _TEXT_KINDS else self._documents
        async with lane:
            return await self._run(source, filename, content_type)

    async def _run(self, source: Source, filename: str, content_type: str | None) -> str:
        request = {
            "filename": filename,
            "content_type": content_type,
            "path": str(source) if isinstance(source, Path) else None,
            "limits": self.limits.to_json(),
        }
        proc = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            WORKER_MODULE,
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
            env=child_environment(),
            start_new_session=True,  # a Ctrl-C meant for the gateway is not the child's
        )
        try:
            async with asyncio.timeout(self.limits.timeout_seconds):
                out, err = await _exchange(
                    proc,
                    orjson.dumps(request) + b"\n",
                    source if isinstance(source, bytes) else b"",
                    self._max_reply_bytes(),
                )
                code = await proc.wait()
        except TimeoutError:
            logger.warning(
                "text extraction killed at its time budget",
                extra={"file_name": filename, "timeout_seconds": self.limits.timeout_seconds},
            )
            raise ExtractorFailedError(
                "Text extraction did not finish within the "
                f"{self.limits.timeout_seconds:g} seconds allowed."
            ) from None
        finally:
            await _stop(proc)
        return self._reply(out, err, code, filename)

    def _max_reply_bytes(self) -> int:
        # JSON escapes a control character in 6 bytes; UTF-8 takes at most 4 per character.
        return 6 * self.limits.max_output_chars + 64 * 1024

    def _reply(self, out: bytes, err: bytes, code: int, filename: str) -> str:
        if code == -signal.SIGXCPU:
            raise ExtractorFailedError(
                "Text extraction used more than the "
                f"{self.limits.timeout_seconds:g} seconds of CPU time allowed."
            )
        try:
            reply = orjson.loads(out) if code == 0 else None
        except orjson.JSONDecodeError:
            reply = None
        if isinstance(reply, dict) and isinstance(reply.get("text"), str):
            text: str = reply["text"]
            return text
        error = reply.get("error") if isinstance(reply, dict) else None
        if isinstance(error, dict) and isinstance(error.get("message"), str):
            code_name = error.get("code")
            if code_name == "unsupported_file":
                raise UnsupportedFileError(error["message"])
            if code_name == "invalid_file":
                raise ExtractionError(error["message"])
            if "detail" in error:
                logger.warning(
                    "text extraction of %r failed: %s", filename, str(error["detail"])[:2000]
                )
            raise ExtractorFailedError(error["message"])
        logger.warning(
            "text extraction process failed",
            extra={
                "file_name": filename,
                "exit_code": code,
                "stderr": err.decode(errors="replace"),
            },
        )
        raise ExtractorFailedError(
            f"Text extraction failed: the extraction process ended unexpectedly (exit code {code})."
        )


def child_environment() -> dict[str, str]:
    """The child's whole environment: where Python finds ``app``, a PATH and a UTF-8 locale;
    none of the gateway's secrets."""
    paths = [_APP_ROOT, os.environ.get("PYTHONPATH", "")]
    return {
        "PATH": os.environ.get("PATH", os.defpath),
        "PYTHONPATH": os.pathsep.join(p for p in paths if p),
        "LC_ALL": "C.UTF-8",
        "PYTHONDONTWRITEBYTECODE": "1",
    }


async def _exchange(
    proc: asyncio.subprocess.Process, header: bytes, data: bytes, max_reply: int
) -> tuple[bytes, bytes]:
    """Write the request (and the bytes, in slices) while reading both answers."""
    assert proc.stdin is not None and proc.stdout is not None and proc.stderr is not None
    stdin = proc.stdin

    async def feed() -> None:
        try:
            stdin.write(header)
            view = memoryview(data)
            for start in range(0, len(view), _SLICE):
                stdin.write(view[start : start + _SLICE])
                await stdin.drain()
            await stdin.drain()
            stdin.close()
        except (BrokenPipeError, ConnectionResetError):
            return  # the child answered before reading everything (it refused the file)

    _, out, err = await asyncio.gather(
        feed(), _read(proc.stdout, max_reply), _read(proc.stderr, _MAX_STDERR_BYTES, keep=True)
    )
    return out, err


async def _read(stream: asyncio.StreamReader, limit: int, *, keep: bool = False) -> bytes:
    """A stream to its end: past ``limit`` bytes an ``ExtractorFailedError`` (``keep``: the
    last ``limit`` bytes are kept instead)."""
    buffer = bytearray()
    while chunk := await stream.read(64 * 1024):
        buffer += chunk
        if len(buffer) > limit:
            if not keep:
                raise ExtractorFailedError("Text extraction answered more than it may.")
            del buffer[:-limit]
    return bytes(buffer)


async def _stop(proc: asyncio.subprocess.Process) -> None:
    """Kill the child if it still runs, and reap it (also when the caller is cancelled)."""
    if proc.returncode is None:
        with contextlib.suppress(ProcessLookupError):
            proc.kill()
        await asyncio.shield(proc.wait())
