"""Nodes listed after the floors' deadline (search.FLOOR_AT_LEAST_S) are keyed where the search
stops (search._Search._key_late, issue 33): a search stopped there reports a bound read from
them, not 0, and that bound is still at most the optimum.

The deadline is forced to pass at once (FLOOR_AT_LEAST_S 0 and a limit of 0): every
configuration listed is then late, and a first plan is priced past the limit (the search's
FIRST_PLAN_ALLOWANCE_S) before it stops. The reference optimum is exhaustive search's
(solver/exhaustive.py: every plan of the declared space priced, no bound): the value the search
minimises (quantile_s) of its best plan. The instances: instances/mixed/tiny-2types.yaml
narrowed with per-operator partitions (late configurations and layer-plan nodes, listed a
partial layout at a time), the same through the full listing (late chunks of _first_nodes and
_plan_groups), and a toy pair of groups with the layout options (families keyed 0 by
_Partials.of, keyed by their own bound when the search stops). Without the keying, each
reported a bound of 0.0 here (measured on the code before it).
"""

from __future__ import annotations

import pytest
from test_partitions_lazy import SMALL, partitioned, tiny2

from paraplan.solver import search as search_mod
from paraplan.solver.exhaustive import exhaustive
from paraplan.solver.search import search

CASES = {"tiny2-lazy": (lambda: tiny2(*SMALL[0]), True), "tiny2-full-listing": (lambda: tiny2(*SMALL[0]), False),
         "toy-options": (lambda: partitioned(0, options=True), True)}


@pytest.mark.parametrize("case", sorted(CASES))
def test_a_search_stopped_past_the_floors_deadline_reports_a_bound_read(case, monkeypatch):
    make, lazy = CASES[case]
    inst = make()
    ex = exhaustive(inst)
    assert ex.complete and ex.quantile_s is not None
    if not lazy:
        monkeypatch.setattr(search_mod, "_lists_partials", lambda *a: False)
    normal = search(inst)
    # a normal limit: proved, at the exhaustive optimum (no node is late)
    assert normal.status == "optimal"
    assert normal.quantile_s == pytest.approx(ex.quantile_s, abs=normal.tolerance_s + 1e-12)
    monkeypatch.setattr(search_mod, "FLOOR_AT_LEAST_S", 0.0)
    # the keying's and the first plan's allowances are wall time: widened, so that a loaded
    # machine does not cut them short
    monkeypatch.setattr(search_mod, "LATE_KEYS_S", 30.0)
    monkeypatch.setattr(search_mod, "FIRST_PLAN_ALLOWANCE_S", 30.0)
    late = search(inst, time_limit_s=0.0)
    assert late.status == "feasible" and late.unresolved > 0  # stopped with nodes left open
    assert 0.0 < late.bound_s <= ex.quantile_s * (1 + 1e-9) + late.tolerance_s
    # the late nodes' keys raise it: with none keyed, the least open key is 0
    monkeypatch.setattr(search_mod, "LATE_KEYS_S", -1.0)
    assert search(inst, time_limit_s=0.0).bound_s == 0.0
