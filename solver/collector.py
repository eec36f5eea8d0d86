"""How often CPython's cyclic garbage collector runs while paraplan plans.

A search allocates many small objects that live on (its configurations, bounds' memos and
listings) and creates few reference cycles, so the default young-generation collection every
700 allocations is mostly wasted work, and each one promotes survivors towards the full
collections that walk every live object. Collected every YOUNG_THRESHOLD allocations, the
command's peak memory grows by under 1% (solver/commands/cli.py sets it for the whole command,
before its imports). A search called from Python (solver/search.search, as the growth rows
and the library's callers run it) reads it while it runs (fewer_collections): on Llama-3 70B
over 4 GPU types x 16 nodes the collector took 1.2-1.35 s of the search's 17 s of CPU at the
default thresholds (nine full collections), 0.49 s at this one, with the same peak memory
(0.28 GiB; issue 33). The collector's work changes no result: it frees only what nothing
reaches.
"""

from __future__ import annotations

import gc
from contextlib import contextmanager

YOUNG_THRESHOLD = 100_000


def collect_less() -> None:
    """The young generation collected every YOUNG_THRESHOLD allocations at least (a caller's
    higher threshold is kept), the older generations' thresholds as they are."""
    young, *older = gc.get_threshold()
    gc.set_threshold(max(young, YOUNG_THRESHOLD), *older)


@contextmanager
def fewer_collections():
    """collect_less while the block runs; the thresholds as they were after it."""
    before = gc.get_threshold()
    collect_less()
    try:
        yield
    finally:
        gc.set_threshold(*before)
