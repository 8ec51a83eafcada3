"""The garbage collector of a serving process: the start-up heap frozen, young collections
made rarer.

After start-up the process holds some 180k objects that live as long as it does (modules,
settings, routes, pydantic schemas, the SQLAlchemy metadata). Left in the collector's oldest
generation, every full collection walks them all: 83-150 ms during which no stream moves, many
times a minute under load (bench/README.md, "Issue 19"). ``gc.freeze()`` moves them to the
permanent generation, which collections skip. A request makes some hundred short-lived
containers; a larger first threshold lets most die by reference counting before any
collection looks at them.
"""

from __future__ import annotations

import gc
import logging

logger = logging.getLogger(__name__)

# Allocations (minus deallocations) of tracked objects between young collections (CPython's
# default is 700), and young (then middle) collections per older one (CPython's: 10 and 10).
# Measured in bench/README.md "Issue 19: the collector".
THRESHOLDS = (20_000, 20, 20)


def settle_heap(thresholds: tuple[int, int, int] = THRESHOLDS) -> int:
    """Collect once, freeze what is left (the start-up heap) and set ``thresholds``; returns
    how many objects were frozen. Called once the app has started, before the server accepts
    connections (``app.serving.CallerSignalsServer.startup``)."""
    gc.collect()
    gc.freeze()
    gc.set_threshold(*thresholds)
    frozen = gc.get_freeze_count()
    logger.debug("gc: %d start-up objects frozen, thresholds %s", frozen, thresholds)
    return frozen
