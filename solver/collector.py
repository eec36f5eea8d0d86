"""How often CPython's cyclic garbage collector runs while paraplan plans.

A search allocates many small objects that live on (its configurations, bounds' memos and
listings) and creates few reference cycles, so the default young-generation collection every
700 allocations is mostly wasted work, and each one promotes survivors towards the older
collections that walk every live object again. Collected every YOUNG_THRESHOLD allocations, the
command's peak memory grows by under 1% (solver/commands/cli.py sets it for the whole command,
before its imports). A search called from Python (solver/search.search, as the growth rows
and the library's callers run it) reads it while it runs (fewer_collections): on Llama-3 70B
over 4 GPU types x 16 nodes the collector took 1.2-1.35 s of the search's 17 s of CPU at the
default thresholds (nine full collections), 0.49 s at this one, with the same peak memory
(0.28 GiB; issue 33).

At that young threshold the rest was the middle generation's collections (every 10 young ones):
each walks every object the search kept since the last, so a search whose memos grow by millions
of objects walks each of them twice. While a search runs (fewer_collections) the middle
generation is collected every MIDDLE_THRESHOLD young collections instead, and so is the oldest,
whose count those collections advance. Measured with gc.callbacks (issue 33; collector CPU s and
collections per generation, base -> this): DeepSeek-V3 on 2,048 H800 with idle GPUs 0.95-0.99
(31, 3, 0) -> 0.45-0.47 s (34, 0, 0), on 1,152 GB200 0.30-0.40 (16, 1, 0) -> 0.20-0.22 s
(17, 0, 0); Qwen3 235B idle 0.26-0.37 -> 0.14-0.15 s; growth rows 1, 3, 4: 0.48 -> 0.34, 0.92 -> 0.57, 1.13 -> 0.68 s, the
remaining time the young collections' one walk of each survivor (a young threshold of 10**6
still takes 0.42 s on DeepSeek-V3). Peak memory within 0.7% (row 4 0.395 -> 0.397 GiB); runs
with no middle collection (Mixtral, GPT-3 175B, the MoE files without idle GPUs) unchanged.
Nothing is frozen (gc.freeze): the full collections it would spare do not run. The collector's
work changes no result: it frees only what nothing reaches.
"""

from __future__ import annotations

import gc
from contextlib import contextmanager

YOUNG_THRESHOLD = 100_000
# while a search runs, the middle generation is collected once every MIDDLE_THRESHOLD young
# collections (10**8 net allocations of tracked objects) instead of every 10: still bounded, so
# a search that does make cyclic garbage frees it in the end, but its survivors are walked once
MIDDLE_THRESHOLD = 1_000


def collect_less() -> None:
    """The young generation collected every YOUNG_THRESHOLD allocations at least (a caller's
    higher threshold is kept), the older generations' thresholds as they are."""
    young, *older = gc.get_threshold()
    gc.set_threshold(max(young, YOUNG_THRESHOLD), *older)


@contextmanager
def fewer_collections():
    """collect_less while the block runs, and the middle generation collected every
    MIDDLE_THRESHOLD young collections at least (a caller's higher threshold is kept); the
    thresholds as they were after it."""
    before = gc.get_threshold()
    young, middle, old = before
    gc.set_threshold(max(young, YOUNG_THRESHOLD), max(middle, MIDDLE_THRESHOLD), old)
    try:
        yield
    finally:
        gc.set_threshold(*before)
