"""Loaded by every Python process of a read-only run (``PYTHONPATH`` names this directory):
logs each write the process attempts, whether it succeeds or not, to the file
``RESPGATE_WRITE_AUDIT`` names, one ``pid event path`` line each, through Python's audit hooks
(``open`` for writing, ``os.mkdir``, ``os.rename`` ...; ``sqlite3.connect`` for a database)."""

from __future__ import annotations

import os
import sys

_LOG = os.environ.get("RESPGATE_WRITE_AUDIT")
_WRITING = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_APPEND | os.O_TRUNC
_EVENTS = frozenset(
    {
        "os.mkdir",
        "os.remove",
        "os.rmdir",
        "os.rename",
        "os.replace",
        "os.symlink",
        "os.link",
        "os.truncate",
        "os.utime",
        "os.chmod",
        "os.chown",
        "shutil.copyfile",
        "shutil.copytree",
        "shutil.move",
        "shutil.rmtree",
        "sqlite3.connect",
    }
)

# (source, destination, ...): the destination is the path written.
_TO_SECOND = frozenset({"os.link", "os.symlink", "os.rename", "os.replace"})


def _written(event: str, args: tuple[object, ...]) -> object:
    if event == "open":
        path, mode, flags = args
        writes = isinstance(mode, str) and any(c in mode for c in "wax+")
        return path if writes or (isinstance(flags, int) and flags & _WRITING) else None
    if event in _TO_SECOND and len(args) > 1:
        return args[1]  # the new name: where the file now is
    return args[0] if event in _EVENTS and args else None


def _hook(event: str, args: tuple[object, ...]) -> None:
    path = _written(event, args)
    if path is None or isinstance(path, int):
        return
    try:
        text = os.path.abspath(os.fsdecode(path))  # type: ignore[arg-type]
    except (TypeError, ValueError):
        text = repr(path)
    os.write(_FD, f"{os.getpid()} {event} {text}\n".encode())


if _LOG:
    # Opened before the hook is installed; os.write raises no audit event.
    _FD = os.open(_LOG, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    sys.addaudithook(_hook)
