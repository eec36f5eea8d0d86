"""The dive (search._Search._dive, issue 33): a stage family's tp choice that its joint key
pushes back is, where it has the least key of its batch, set up at once and its configurations
of least own bound priced and probed, for an incumbent. It changes the order of the search, not
its answer: every node keeps its own key and is pruned only by it.

The reference is the same search without the dive (`_dive` returning every raised choice, to
be pushed back, as the search did before it), on the four-type growth rows
(solver/bench/growth.growth_instance: four GPU types, so 608 tp choices across groups and the
stage families deferred, v = 1 alone and no idle GPUs, where the joint keys are read).
"""

from __future__ import annotations

from paraplan.solver import search as search_mod
from paraplan.solver.bench.growth import growth_instance
from paraplan.solver.planner import REL_TOL
from paraplan.solver.search import search

# no test here is timed: a limit no search of these reaches (each takes 1-3 s of CPU)
NO_LIMIT_S = 3600.0


def _searched(inst, monkeypatch, dive: bool):
    """(result, per dive (incumbent before, after, configurations priced in it)) of one search,
    with or without the dive."""
    dives = []
    real = search_mod._Search._dive

    def watched(self, raised):
        before, priced = self.won.best_s, self.res.priced
        rest = real(self, raised) if dive else raised
        if dive and raised:
            dives.append((before, self.won.best_s, self.res.priced - priced))
        return rest

    with monkeypatch.context() as m:
        m.setattr(search_mod._Search, "_dive", watched)
        res = search(inst, time_limit_s=NO_LIMIT_S)
    return res, dives


def test_the_dive_keeps_the_answer(monkeypatch):
    """With and without the dive, the same proved plan, value and bound, on four types of 2
    nodes each (5 dives when written: the check is not vacuous)."""
    inst = growth_instance(4, 2)
    dived, dives = _searched(inst, monkeypatch, True)
    plain, none = _searched(inst, monkeypatch, False)
    assert dives and not none
    assert dived.status == plain.status == "optimal"
    assert dived.plan == plain.plan
    assert dived.quantile_s == plain.quantile_s and dived.bound_s == plain.bound_s


def test_the_dive_finds_the_growth_rows_optimum_first(monkeypatch):
    """The four-type growth row (4 nodes a type): its first dive that prices a configuration
    offers the optimum itself (7.190 s at p90 when written; the dive's choice holds it), where
    the incumbent before it was more than 20% slower (9.244 s), so the search prices fewer
    configurations than without the dive (84 against 126 when written), and proves the same
    plan. The optimum is the search's own proved answer (test_the_dive_keeps_the_answer: the
    same without the dive)."""
    inst = growth_instance(4)
    dived, dives = _searched(inst, monkeypatch, True)
    plain, _ = _searched(inst, monkeypatch, False)
    assert dived.status == plain.status == "optimal" and dived.plan == plain.plan
    before, after, _ = next(d for d in dives if d[2] > 0)
    assert after <= dived.quantile_s * (1 + REL_TOL)
    assert before > 1.2 * dived.quantile_s
    assert dived.priced < plain.priced
