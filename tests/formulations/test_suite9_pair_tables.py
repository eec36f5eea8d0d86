"""formulations/dualpipe._pair_table_sums keeps each problem's pair tables by the problem's value
(issue 32): a problem equal field by field, whichever object holds it, reads the tables built
for the first, and those are what building them afresh gives; a problem one byte of capacity
apart gets its own."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
from test_dualpipe import random_problem, symmetric_problem

from paraplan.formulations import dualpipe as dp


def _same(a, b) -> bool:
    if a is None or b is None:
        return a is b
    return all(x[0] == y[0] and np.array_equal(x[1], y[1]) and np.array_equal(x[2], y[2])
               and all(np.array_equal(u, v) for u, v in zip(x[3], y[3], strict=True))
               for x, y in zip(a, b, strict=True))


def test_equal_problems_share_their_tables_and_those_are_a_fresh_build():
    shared = 0
    for seed in range(40):
        p = symmetric_problem(seed, float(random_problem(seed).capacity_bytes[0]))
        twin = replace(p, a=p.a.copy(), capacity_bytes=p.capacity_bytes.copy())  # another object, equal
        got = dp._pair_table_sums(p)
        assert dp._pair_table_sums(twin) is got
        assert _same(got, dp._built_pair_table_sums(twin))
        shared += got is not None
        # one byte less capacity: its own entry, built for it
        less = replace(p, capacity_bytes=p.capacity_bytes - 1.0)
        assert _same(dp._pair_table_sums(less), dp._built_pair_table_sums(less))
        if got is not None:
            assert dp._pair_table_sums(less) is not got
    assert shared >= 10, shared  # not vacuous: most of these problems fit some split


def test_kept_tables_are_read_only():
    p = symmetric_problem(0, 1e12)
    lo_N, R, split, sums = dp._pair_table_sums(p)[0]
    for x in (R, split, *sums):
        assert not x.flags.writeable
