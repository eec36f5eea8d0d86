"""An outer's layer-plan root keyed again before it is expanded (issue 33: solver/class_partitions.
OuterChoices.root_key_again, _split_bound; the search's _LayerPlans.expand drops a root above
the bar on it).

Checked on tiny-2types at tp 4 (every group offers plans beyond Megatron's), once with a model
whose memory binds (test_plan_bottleneck's cases), every third outer: the raised key is at most the
bound of every combination of the outer's plans (expanded with no incumbent to the last level:
the candidates' keys, each at most its optimum,
test_mixed_partitions.test_vectorised_class_bound_is_below_the_optimum), it is at least the
optimistic key, and it is above that key on most outers. It is close to the least candidate key
on some outer (measured: within 1.4% on tp4, within 1.1% with memory binding), so a key raised
by 2% beyond what it reads fails the first check there. The search's optimum with the raised
keys is exhaustive search's: test_partitions_lazy.py, test_plan_sync.py.
"""

from __future__ import annotations

import math

import pytest
from test_partitions_lazy import _choices_of
from test_plan_bottleneck import CASES

from oracles.class_partitions import expand_all
from paraplan.solver.bounds.one_class import FLOAT_SAFETY


@pytest.mark.slow  # 11-27 s each on a loaded 2-core machine: every third outer expanded to the end
@pytest.mark.parametrize("case", CASES)
def test_root_key_again_is_a_bound_of_every_combination(case):
    inst = CASES[case]()
    checked = raised = 0
    closest = 0.0
    for o, ch in _choices_of(inst)[::3]:  # a third of the outers: each expanded to the end
        if ch.optimistic(stop_unfit=True) is None:
            continue
        root = ch.optimistic_bound()
        got = ch.root_key_again(math.inf)
        assert got >= root
        every = [lb for lb, *_ in expand_all(ch, math.inf).candidates]
        if every:
            assert got <= min(every) * (1 + FLOAT_SAFETY)
            closest = max(closest, got / min(every))
        checked += 1
        raised += got > root * (1 + 1e-9)
    # measured: 8 of 8 outers raised on tp4, 15 of 15 with memory binding (of every outer: 23
    # of 23, 40 of 42)
    assert checked >= 6 and raised >= checked * 3 // 4
    assert closest >= 0.98


def test_a_root_above_the_bar_reads_inf():
    # every combination's bound is at least twice the bar: the key is above it (the search
    # drops the root unexpanded)
    inst = CASES["tp4"]()
    o, ch = _choices_of(inst)[0]
    ch.optimistic()
    every = [lb for lb, *_ in expand_all(ch, math.inf).candidates]
    low = min(every) * 0.5
    assert ch.root_key_again(low) > low
