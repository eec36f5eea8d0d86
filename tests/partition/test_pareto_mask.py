"""solver/partition_plans.pareto_mask against the definition, pair by pair: a row is kept iff
no other row is at most it in every column and below it in one, and no earlier equal row
exists. Random small-integer matrices (many ties and duplicates), sizes across several of the
function's blocks (PARETO_BLOCK rows), and the empty matrix."""

from __future__ import annotations

import numpy as np
import pytest

from paraplan.solver import partition_plans as PP


def by_definition(v: np.ndarray) -> np.ndarray:
    le = (v[:, None, :] <= v[None, :, :]).all(-1)  # [j, i]: row j is at most row i
    lt = le & (v[:, None, :] < v[None, :, :]).any(-1)
    earlier_equal = np.tril(le & le.T, -1).T  # [j, i]: j < i and the rows are equal
    return ~(lt | earlier_equal).any(0)


@pytest.mark.parametrize("seed", range(12))
def test_pareto_mask_matches_the_definition(seed):
    rng = np.random.default_rng(seed)
    n = int(rng.integers(1, 4 * PP.PARETO_BLOCK + 3))
    d = int(rng.integers(1, 8))
    v = rng.integers(0, 5, (n, d)).astype(float)
    assert (PP.pareto_mask(v) == by_definition(v)).all()


def test_empty_and_single():
    assert PP.pareto_mask(np.zeros((0, 3))).shape == (0,)
    assert PP.pareto_mask(np.ones((1, 3))).tolist() == [True]
