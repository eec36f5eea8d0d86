"""option_recompute.least_recomputed_rows (every row's greedy at once, issue 33) gives each row
least_recomputed's own float, on random rows: stages that hold nothing more (inf slopes), equal
slopes (the stable order), rooms below zero, and rows short of the layers and not."""

from __future__ import annotations

import numpy as np

from paraplan.solver.bounds.option_recompute import ROWS_AT_ONCE, least_recomputed, least_recomputed_rows


def test_rows_match_least_recomputed_float_for_float():
    rng = np.random.default_rng(3303)
    short = inf = together = 0
    for _ in range(2000):
        pp, n = int(rng.integers(1, 12)), int(rng.integers(1, 24))  # both paths: a few rows, many (ROWS_AT_ONCE)
        room = rng.uniform(-1.0, 10.0, (n, pp))
        held = rng.uniform(0.5, 3.0, (n, pp))
        slope = rng.uniform(0.5, 5.0, (n, pp))
        slope[rng.random((n, pp)) < 0.2] = np.inf
        slope[rng.random((n, pp)) < 0.1] = 0.9
        layers = float(rng.integers(1, 40))
        got = least_recomputed_rows(room, held, slope, layers)
        together += int((np.maximum(room, 0.0) / held).sum(axis=-1).__lt__(layers).sum() >= ROWS_AT_ONCE)
        for i in range(n):
            free = np.maximum(room[i], 0.0) / held[i]
            want = 0.0 if layers - free.sum() <= 0 else least_recomputed(room[i], held[i], slope[i], layers)
            assert got[i] == want or np.isinf(got[i]) and np.isinf(want), (got[i], want)
            short += 0 < want < np.inf
            inf += bool(np.isinf(want))
    assert short > 100 and inf > 100  # both the greedy's outcomes are read
    assert together > 100  # and the rows run together
