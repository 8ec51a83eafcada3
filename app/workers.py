"""``respgate serve --workers N``: N gateway processes serving one listening socket.

The CLI binds the socket and prepares the database once, then :func:`run_workers` forks N
worker processes. Each worker inherits the bound socket and runs its own event loop, its own
application (store connections, upstream clients) and its own background sweeper, under its own
owner id in the job records (``core.background.process_owner``: host and pid); the kernel hands
each new connection to one of them. State lives in the shared store, which is why several
workers need PostgreSQL (:func:`workers_refusal`).

The supervisor (the parent) serves nothing. On SIGTERM or SIGINT it closes its copy of the
socket and forwards SIGTERM to every worker, which drains (``drain_timeout_seconds``) and
exits; the supervisor waits for all of them and exits 0 when they all did. A worker that exits
on its own (a failed start-up, a crash) stops the others and the supervisor exits 1: restarting
is left to the process manager (systemd, Docker's restart policy, Kubernetes).

The workers share one directory for their Prometheus metrics (:func:`metrics_directory`,
``PROMETHEUS_MULTIPROC_DIR``), so ``GET /metrics``, answered by any of them, sums them all.
"""

from __future__ import annotations

import contextlib
import logging
import os
import shutil
import signal
import socket
import sys
import tempfile
import traceback
from collections.abc import Callable, Iterator
from types import FrameType

from app.startup import StartupError

logger = logging.getLogger(__name__)

_SIGNALS = (signal.SIGTERM, signal.SIGINT)
MULTIPROC_ENV = "PROMETHEUS_MULTIPROC_DIR"


def workers_refusal(workers: int, database_url: str) -> str | None:
    """Why ``workers`` processes cannot share the store at ``database_url`` (None: they can)."""
    if workers > 1 and database_url.lower().startswith("sqlite"):
        return (
            f"--workers {workers} needs PostgreSQL: the SQLite store has a single writer in one "
            "process; set --database-url postgresql://... (RESPGATE_DATABASE_URL) or run one "
            "worker"
        )
    return None


@contextlib.contextmanager
def metrics_directory() -> Iterator[str]:
    """A fresh directory where every worker keeps its metric values (``PROMETHEUS_MULTIPROC_DIR``,
    set for the workers to inherit and removed afterwards), unless the operator set one: then
    that one, as it is. Enter it before the workers fork."""
    given = os.environ.get(MULTIPROC_ENV)
    if given:
        yield given
        return
    directory = tempfile.mkdtemp(prefix="respgate-metrics-")
    os.environ[MULTIPROC_ENV] = directory
    try:
        yield directory
    finally:
        os.environ.pop(MULTIPROC_ENV, None)
        shutil.rmtree(directory, ignore_errors=True)


def run_workers(count: int, sock: socket.socket, serve: Callable[[int], int]) -> int:
    """Fork ``count`` workers, each running ``serve(index)`` (its exit status) with ``sock``
    inherited, and supervise them (see the module docstring); returns the exit status."""
    pids: dict[int, int] = {}
    stopping = False

    def stop(signum: int, frame: FrameType | None) -> None:
        nonlocal stopping
        if not stopping:
            logger.info("stopping %d worker(s)", len(pids))
        stopping = True
        sock.close()  # the workers' copies close as they stop: then new connections are refused
        for pid in list(pids):
            _signal(pid, signal.SIGTERM)

    previous = {sig: signal.signal(sig, stop) for sig in _SIGNALS}
    try:
        for index in range(count):
            if stopping:
                break
            pid = os.fork()
            if pid == 0:  # the worker
                _run_worker(index, serve)
            pids[pid] = index
        logger.info("%d workers serving: pids %s", len(pids), ", ".join(map(str, pids)))
        failed = False
        while pids:
            pid, status = os.wait()
            if pid not in pids:
                continue
            index = pids.pop(pid)
            code = os.waitstatus_to_exitcode(status)
            if code != 0 or not stopping:
                failed = True
                logger.error("worker %d (pid %d) exited with status %d", index, pid, code)
                if not stopping:
                    stop(signal.SIGTERM, None)
        return 1 if failed else 0
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        sock.close()


def _run_worker(index: int, serve: Callable[[int], int]) -> None:
    """The forked worker's life: ``serve(index)``, then exit with its status (never returns)."""
    code = 1
    try:
        for sig in _SIGNALS:  # the worker's server installs its own
            signal.signal(sig, signal.SIG_DFL)
        code = serve(index)
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else 1
    except StartupError as exc:
        print(f"respgate: worker {index}: {exc}", file=sys.stderr)
        code = exc.code
    except BaseException:  # the worker reports whatever it was, and exits
        traceback.print_exc()
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)


def _signal(pid: int, sig: int) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, sig)
