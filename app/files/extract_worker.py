"""The extraction child: ``python -m app.files.extract_worker``, one file per process.

``extract_process.ProcessExtractor`` starts it and talks to it over its standard streams:

- stdin: one line of JSON, ``{"filename", "content_type", "path", "limits"}``; when ``path``
  is null, the file's bytes follow the line up to the end of the stream.
- stdout: one JSON object, ``{"text": "..."}`` or ``{"error": {"code", "message"}}`` with
  OpenAI's vector store file error codes (``unsupported_file``, ``invalid_file``,
  ``server_error``). JSON, not pickle: the parent never unpickles what a process that parsed a
  hostile file wrote.

Before it reads the file it limits itself (``resource.setrlimit``): its address space to what
it has mapped so far plus the memory budget (``RLIMIT_AS``: an allocation past it is a
``MemoryError``, reported as the memory budget), its CPU time to the time budget and a second
(``RLIMIT_CPU``: the kernel ends it even if its parent is gone) and no core dump. The parent
kills it when the wall time budget runs out. This module imports only the standard library,
orjson and ``app.files.extract``: pypdf and python-docx load when such a file comes.
"""

from __future__ import annotations

import math
import os
import resource
import sys
from pathlib import Path
from typing import Any, BinaryIO

import orjson

from app.files.extract import (
    MIB,
    ExtractionError,
    ExtractionLimits,
    UnsupportedFileError,
    extract_text,
)

# The request line is small (a file name and the limits); anything longer is not ours.
_MAX_HEADER_BYTES = 64 * 1024


def address_space_bytes() -> int | None:
    """What this process has mapped now (Linux: /proc/self/statm), or None where unknown."""
    try:
        pages = int(Path("/proc/self/statm").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return None
    return pages * os.sysconf("SC_PAGE_SIZE")


def _lower(limit: int, soft: int, hard: int | None = None) -> None:
    """Lower a resource limit (never above the hard limit already set); a platform that does
    not support it keeps its own."""
    try:
        _, current_hard = resource.getrlimit(limit)
        ceiling = current_hard if current_hard != resource.RLIM_INFINITY else None
        wanted_hard = hard if hard is not None else soft
        if ceiling is not None:
            soft, wanted_hard = min(soft, ceiling), min(wanted_hard, ceiling)
        resource.setrlimit(limit, (soft, wanted_hard))
    except (ValueError, OSError):
        return


def apply_limits(limits: ExtractionLimits) -> None:
    """The budget, enforced by the kernel on this process from now on."""
    mapped = address_space_bytes()
    if mapped is not None:
        _lower(resource.RLIMIT_AS, mapped + limits.memory_bytes)
    cpu = math.ceil(limits.timeout_seconds) + 1
    _lower(resource.RLIMIT_CPU, cpu, cpu + 1)
    _lower(resource.RLIMIT_CORE, 0)


def extract_reply(request: dict[str, Any], stdin: BinaryIO) -> dict[str, Any]:
    """What the worker answers for one request (its limits already applied)."""
    limits = ExtractionLimits.from_json(request.get("limits") or {})
    path = request.get("path")
    try:
        source = Path(path) if isinstance(path, str) else stdin.read()
        text = extract_text(
            source,
            filename=str(request.get("filename") or "upload"),
            content_type=request.get("content_type"),
            limits=limits,
        )
    except MemoryError:
        return _error(
            "invalid_file",
            f"Extracting the text needed more than the {limits.memory_bytes // MIB} MiB "
            "of memory allowed.",
        )
    except (UnsupportedFileError, ExtractionError) as exc:
        return _error(exc.code, str(exc))
    except FileNotFoundError:
        return _error("invalid_file", "The file no longer exists.")
    except RecursionError:
        return _error("invalid_file", "The file nests too deeply to be read.")
    except Exception as exc:  # a bug or an unforeseen parser failure: the file fails, we go on
        # The exception's text is for the gateway's log (``extract_process``), not the client.
        failed = _error("server_error", UNEXPECTED_FAILURE)
        failed["error"]["detail"] = repr(exc)[:2000]
        return failed
    return {"text": text}


UNEXPECTED_FAILURE = "Text extraction failed unexpectedly; the gateway's log has the details."


def _error(code: str, message: str) -> dict[str, Any]:
    return {"error": {"code": code, "message": message}}


def main() -> None:
    stdin, stdout = sys.stdin.buffer, sys.stdout.buffer
    try:
        request = orjson.loads(stdin.readline(_MAX_HEADER_BYTES))
    except orjson.JSONDecodeError:
        request = None
    if not isinstance(request, dict):
        reply = _error("server_error", "The extraction request could not be read.")
    else:
        apply_limits(ExtractionLimits.from_json(request.get("limits") or {}))
        reply = extract_reply(request, stdin)
    stdout.write(orjson.dumps(reply))
    stdout.flush()


if __name__ == "__main__":
    main()
