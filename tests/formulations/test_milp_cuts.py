"""formulations/milp.solve_with_cuts, the one lazy memory-cut loop of every MILP (the multi-class
MILP, DualPipe's per-stage and pair MILPs): its rounds, its bound and tolerance, and the one
rule for a CBC "infeasible" under a short limit, on a stub backend whose answers the test sets."""

from __future__ import annotations

import math
import time

import pytest

from paraplan.formulations import milp
from paraplan.formulations.multiclass_milp import solve_multiclass_milp

from test_dualpipe import random_problem
from test_split import coefficients, lone_class


def _stub(monkeypatch, answers):
    """run_model answers from `answers` in turn; returns the limits it was called with."""
    limits = []

    def run_model(api, backend, time_limit_s, threads=1, what="the model"):
        limits.append(time_limit_s)
        return answers[min(len(limits), len(answers)) - 1]
    monkeypatch.setattr(milp, "run_model", run_model)
    return limits


def test_each_round_adds_the_cuts_until_the_solution_fits(monkeypatch):
    # Round 1's solution does not fit (one cut), round 2's does: formulate sees [] then
    # ["cut1"], and the optimal bound 10 s comes back less eps (0.25) and the read error
    # (0.5): 9.25; tolerance 2 eps + 0.5 = 1.0.
    _stub(monkeypatch, [("optimal", 10.0, 10.0, 0.5)])
    seen, checks = [], iter([("first", ["cut1"]), ("second", [])])
    got = milp.solve_with_cuts(lambda cuts: seen.append(list(cuts)) or ("api", 0.25),
                               lambda built: next(checks), "highs", time.perf_counter() + 60, "a stub")
    assert seen == [[], ["cut1"]]
    assert (got.status, got.bound_s, got.tolerance_s, got.values) == ("optimal", 9.25, 1.0, "second")


@pytest.mark.parametrize("backend, left_s, status, bound", [
    ("cbc", 0.5, "timeout", None),        # under CBC_INFEASIBLE_RECHECK_S left: unproved
    ("cbc", 30.0, "infeasible", math.inf),
    ("highs", 0.5, "infeasible", math.inf),  # only CBC's short "infeasible" is distrusted
])
def test_a_short_cbc_infeasible_is_unproved(monkeypatch, backend, left_s, status, bound):
    limits = _stub(monkeypatch, [("infeasible", None, math.inf, 0.0)])
    got = milp.solve_with_cuts(lambda cuts: ("api", 0.0), lambda built: ((), []), backend,
                               time.perf_counter() + left_s, "a stub")
    assert (got.status, got.bound_s) == (status, bound)
    assert len(limits) == 1 and limits[0] <= left_s  # one run, within what was left


def test_every_milp_reads_a_short_cbc_infeasible_alike(monkeypatch):
    # The same stub answer under half a second: the multi-class MILP and both DualPipe MILPs
    # (seed 0's problem prices its pairs alike: the pair model; the per-stage one with
    # pairs_alike off) report "timeout", none re-runs past the limit.
    limits = _stub(monkeypatch, [("infeasible", None, math.inf, 0.0)])
    from paraplan.formulations import dualpipe
    assert solve_multiclass_milp(lone_class(coefficients(pp=2, L=4)), 0.5, "cbc").status == "timeout"
    p = random_problem(0)
    assert p.pairs_alike()
    assert dualpipe.solve_milp(p, 0.5, "cbc").status == "timeout"
    monkeypatch.setattr(dualpipe.DualPipeProblem, "pairs_alike", lambda self: False)
    assert dualpipe.solve_milp(p, 0.5, "cbc").status == "timeout"
    assert len(limits) == 3 and max(limits) <= 0.5
