"""A first-level node of layer-plan buckets read, when it comes up, with only the plans priced by
then (solver/class_partitions.OuterChoices._linked with priced_only, _pseudo_steps: each other
bucket read as one plan at its optimistic coefficients), issue 33.

Checked on tiny-2types at tp 4 (every group offers plans beyond Megatron's), once with a model
whose memory binds (test_plan_bottleneck's cases): after one node's plans are priced, every node
left that holds a priced bucket beside an unpriced one is read so; that read is at most the bound
of every combination of its plans (each priced and bounded at the last level by expansion to the
end: the candidates' keys, each at most its optimum), and above the key the root gave it on some
node (the priced plans are read). The search's optimum with these reads is exhaustive search's:
test_partitions_lazy.py, test_plan_sync.py.
"""

from __future__ import annotations

import math

import pytest
from test_partitions_lazy import _choices_of as _choices
from test_plan_bottleneck import CASES, _every_candidate

from paraplan.solver.bounds.one_class import FLOAT_SAFETY


@pytest.mark.parametrize("case", CASES)
def test_partly_priced_read_is_a_bound_of_every_combination(case):
    inst = CASES[case]()
    checked = raised = 0
    for o, ch in _choices(inst)[::3]:
        if ch.optimistic(stop_unfit=True) is None:
            continue
        nodes = [(b, n) for b, n in ch.expand(math.inf).nodes if n.level == 1 and not n.linked]
        if len(nodes) < 2:
            continue
        ch._linked([nodes[0][1]])  # its buckets' plans priced
        partly = [(b, n) for b, n in nodes[1:] if ch._partly_priced(n)]
        cheap = [float(ch._linked([n], priced_only=True)[0]) for _, n in partly]
        for (bound, node), got in list(zip(partly, cheap))[:: max(1, len(partly) // 3)]:
            if node.weight > 1024 or checked >= 6:  # each combination priced below: a few nodes
                continue
            every = _every_candidate(ch, node)
            if every:
                assert got <= min(every) * (1 + FLOAT_SAFETY)
            raised += got > bound * (1 + 1e-9)
            checked += 1
    assert checked >= 3 and raised >= 1
