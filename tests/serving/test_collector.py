"""``app.collector.settle_heap``: the start-up heap frozen out of the collector's way, the young
threshold raised; and a server calls it once its app has started, before it accepts a
connection."""

from __future__ import annotations

import socket
import subprocess
import sys
from typing import Any

import pytest

from app import serving

# In a child process: freezing (and unfreezing) this test process's heap would change how
# its collector runs for every test after this one (a full collection of the whole heap).
SETTLE = """
import gc
from app.collector import settle_heap
kept = [[n] for n in range(1000)]
garbage = []
garbage.append(garbage)  # a cycle: collected first, never frozen
del garbage
frozen = settle_heap((12_345, 7, 3))
assert frozen == gc.get_freeze_count() >= len(kept), frozen
assert gc.get_threshold() == (12_345, 7, 3), gc.get_threshold()
assert not [o for o in gc.get_objects() if isinstance(o, list) and o and o[0] is o]
gc.collect()
assert gc.get_freeze_count() == frozen  # a full collection leaves the frozen objects alone
print(frozen)
"""


def test_the_heap_left_after_a_collection_is_frozen_and_the_thresholds_set() -> None:
    done = subprocess.run([sys.executable, "-c", SETTLE], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert int(done.stdout) >= 1000


async def test_a_server_settles_the_heap_after_its_app_started_and_before_it_accepts(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    trace: list[str] = []

    def settle() -> int:
        trace.append(f"settled, accepting: {bool(getattr(server, 'servers', None))}")
        return 0

    monkeypatch.setattr(serving, "settle_heap", settle)

    async def app(scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] == "lifespan":
            while (await receive())["type"] != "lifespan.shutdown":
                trace.append("app started")
                await send({"type": "lifespan.startup.complete"})
            await send({"type": "lifespan.shutdown.complete"})

    server = serving.make_server(app, "warning")
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))

    def started() -> None:
        trace.append("started")
        server.should_exit = True

    assert await serving.serve_together([(server, sock)], started) is True
    assert trace == ["app started", "settled, accepting: False", "started"]
