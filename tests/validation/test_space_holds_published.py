"""The declared space holds every published configuration, so the proved optimum is never
slower than paraplan's own prediction of what was published.

Two halves: tests/solver/test_space_rules.py checks that each published row's outer
configuration (degrees, micro-batch, modes) is in the default space; here the planner,
restricted to exactly that outer configuration, must find an inner plan (layer split and
recompute counts) at least as fast as the published one, which is one of its candidates.
Together: the optimum over the default space <= the published configuration's prediction.
A row whose published plan the model predicts out of memory is not a candidate; those are the
memory model's open rows (tests/cost/test_memory_frameworks.py) and must stay few.
"""

from __future__ import annotations

import dataclasses

import pytest

from paraplan.cost.calibration import load_published, row_to_instance_plan
from paraplan.cost.readers.gpus import load_catalogue
from paraplan.cost.simulate import simulate
from paraplan.cost.specs import SearchSpace
from paraplan.solver.solve import solve as plan
from paraplan.solver.planner import OPTIMAL

MAX_OUT_OF_MEMORY = 6  # cost/memory.py's open rows: 4 NeMo FP8, 2 Megatron v1


def _rows():
    cat = load_catalogue()
    return [(row["id"], *row_to_instance_plan(row, cat)) for row in load_published()]


ROWS = _rows()


def _only(outer) -> SearchSpace:
    return SearchSpace(tp=(outer.tp,), pp=(outer.pp,), cp=(outer.cp,),
                       micro_batch=(outer.micro_batch,), sequence_parallel=(outer.sequence_parallel,),
                       zero=(outer.zero,), virtual_stages=(outer.virtual_stages,),
                       recompute=(outer.recompute,),
                       # the published run ran within the whole HBM: no planning reserve
                       # (search.memory_reserve_gib's default is for plans not yet run)
                       memory_reserve_bytes=0.0)


def test_published_plans_out_of_memory_are_few():
    oom = [rid for rid, inst, p in ROWS if not simulate(inst, p).fits]
    assert len(oom) <= MAX_OUT_OF_MEMORY, oom


@pytest.mark.parametrize("rid,inst,published", ROWS, ids=[r[0] for r in ROWS])
def test_optimum_is_no_slower_than_the_published_configuration(rid, inst, published):
    pub = simulate(inst, published)
    if not pub.fits:
        pytest.skip("published plan predicted out of memory (memory model's open rows)")
    narrowed = dataclasses.replace(inst, search=_only(published.flat_outer))
    res = plan(narrowed, time_limit_s=120)
    assert res.status == OPTIMAL, res.status
    assert res.iter_time_s <= pub.iter_time_s + res.tolerance_s + 1e-9, (res.plan, pub.iter_time_s)
