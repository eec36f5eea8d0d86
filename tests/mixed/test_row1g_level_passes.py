"""fill_drain reads more levels a pass where it has few rows (LEVEL_READS_AT_ONCE and
SYNC_READS_AT_ONCE: issue 33's 8 x 8 row reads its joint bounds a median of 4 rows a call, and
each pass costs mostly numpy's overhead per call). Which levels a pass reads changes only what
is read: a level is skipped only where it cannot lower the least so far, and a level read past
its cutoff gives a value above that least, so the result is the same float. Checked against the
fixed passes (LEVELS_AT_ONCE, SYNC_LEVELS_AT_ONCE a row, the reading before) on random
pipelines of 1 to 6 rows and on wide ones (the pass sizes apart, the same floats), and that the
wider passes read the few rows in fewer calls."""

from __future__ import annotations

import random

import numpy as np
import pytest
from test_row0d_sync_cutoff import _batch

from paraplan.solver.bounds import fill_drain


def _read(monkeypatch, case, sync_reads: int, level_reads: int) -> tuple[np.ndarray, np.ndarray, int]:
    """(fill_drain_sync_s, fill_drain_s of `case`, fill_drain_s calls) with these reads a pass."""
    plain, calls = fill_drain.fill_drain_s, [0]

    def counted(*args, **kw):
        calls[0] += 1
        return plain(*args, **kw)
    with monkeypatch.context() as mp:
        mp.setattr(fill_drain, "SYNC_READS_AT_ONCE", sync_reads)
        mp.setattr(fill_drain, "LEVEL_READS_AT_ONCE", level_reads)
        mp.setattr(fill_drain, "fill_drain_s", counted)
        a, t, count, layers, m, caps, d, g, v = case
        together = fill_drain.fill_drain_sync_s(*case)
        n = calls[0]
        alone = fill_drain.fill_drain_s(a, t, count, layers, m, caps)
    return together, alone, n


@pytest.mark.parametrize("rows", [1, 2, 4, 6, 300])
def test_wider_passes_give_the_same_floats(rows, monkeypatch):
    rng = random.Random(40 + rows)
    fewer = 0
    for layers, kinds in ((40, 3), (80, 6), (24, 2), (120, 9)):
        for _ in range(3 if rows < 300 else 1):
            case = _batch(rng, rows, layers, kinds)
            wide = _read(monkeypatch, case, fill_drain.SYNC_READS_AT_ONCE, fill_drain.LEVEL_READS_AT_ONCE)
            fixed = _read(monkeypatch, case, 0, 0)  # SYNC_LEVELS_AT_ONCE, LEVELS_AT_ONCE a pass
            assert np.array_equal(wide[0], fixed[0]) and np.array_equal(wide[1], fixed[1])
            assert wide[2] <= fixed[2]
            fewer += wide[2] < fixed[2]
    if rows < 300:
        assert fewer  # not vacuous: the few rows' passes are wider
