"""The declared space's size: the closed-form count of (layer split, recompute counts) pairs
must equal brute-force enumeration (solver/space.py derives it from a generating function)."""

import itertools
import math

import pytest

from paraplan.solver.space import count_splits


def brute_force(layers, pp, v, full_recompute):
    chunks, total = layers // v, 0
    for cut in itertools.combinations(range(1, chunks), pp - 1):
        ks = [b - a for a, b in zip((0,) + cut, cut + (chunks,))]
        total += math.prod(k * v + 1 for k in ks) if full_recompute else 1
    return total


@pytest.mark.parametrize("v", [1, 2, 4])
@pytest.mark.parametrize("full_recompute", [True, False])
def test_closed_form_equals_enumeration(v, full_recompute):
    for layers in range(v, 17, v):
        for pp in range(1, layers // v + 1):
            assert count_splits(layers, pp, v, full_recompute, False) == \
                brute_force(layers, pp, v, full_recompute), (layers, pp, v)


def test_hand_counted_case():
    # 4 layers on 2 stages, v=1: splits (1,3), (2,2), (3,1) with (n1+1)(n2+1) recompute
    # choices each: 2*4 + 3*3 + 4*2 = 25
    assert count_splits(4, 2, 1, True, False) == 25


def test_counts_beyond_float_range_print():
    # 4,096 layers on 128 stages: far more than 1e308 plans; must print, not overflow
    from paraplan.solver.format import count
    n = count_splits(4096, 128, 1, True, False)
    assert n > 10**308
    assert count(n).startswith(str(n)[0] + ".") and count(n).endswith(f"e+{len(str(n)) - 1}")
    assert count(1234) == "1,234"
