"""The timeline choice (solver/dynamic.plan_timeline) is optimal over the whole declared space,
checked against brute force: on random small mixed clusters with three network scenarios and a
timeline, every plan of the space is enumerated with its time on each scenario (the arrays
solver/exhaustive.py reads), and a dynamic programme over the periods with every plan as a
choice (state: the plan running; a change costs min(S, H_p) seconds of period p, as
formulations/timeline.py) gives the most iterations any choice can do."""

from __future__ import annotations

import dataclasses
import itertools
import random

import numpy as np
import pytest

from oracles.search import problem_for
from paraplan.cost.specs import Cluster, Period, Scenario, Switching
from paraplan.cost.specs import Link
from paraplan.solver.class_partitions import all_partitions
from paraplan.solver.dynamic import plan_timeline
from paraplan.solver import memory_tiers
from paraplan.solver.exhaustive import _class_rows
from paraplan.cost.class_coefficients import class_outers
from paraplan.solver.search import placer
from paraplan.solver.space import declared_outers, micro_batch_vectors
from bundled_plans import same_worker, timeline_json
from randinst import random_cluster_instance


def timeline_instance(seed: int):
    """random_cluster_instance with a third scenario (group 1's fabric at a tenth, the group link
    twice as fast: it favours other plans than the first two) and four to five periods over
    the three, long enough that a change of plan (a random restart time) can pay or not."""
    inst = random_cluster_instance(seed)
    rng = random.Random(77_000 + seed)
    nominal, degraded = inst.scenarios
    g1 = inst.cluster.groups[1]
    slow = dataclasses.replace(g1, inter_node=Link(
        bw_bytes_per_s=g1.inter_node.bw_bytes_per_s / 10, latency_s=g1.inter_node.latency_s))
    (f0, link), _ = inst.cluster.between
    fast = Link(bw_bytes_per_s=2 * link.bw_bytes_per_s, latency_s=link.latency_s)
    third = Cluster(groups=inst.cluster.groups[:1] + (slow,),
                          between=((f0, fast), (fast, slow.inter_node)))
    scen = (dataclasses.replace(nominal, probability=None), dataclasses.replace(degraded, probability=None),
            Scenario(name="third", cluster=third))
    periods = tuple(Period(scenario=rng.randrange(3), duration_s=rng.choice([20.0, 60.0, 200.0]))
                    for _ in range(rng.choice([4, 5])))
    return dataclasses.replace(inst, scenarios=scen, timeline=periods,
                               switching=Switching(storage_bw_bytes_per_s=1e15, restart_s=rng.choice([0.5, 5.0, 30.0])))


def every_plan_times(inst) -> np.ndarray:
    """(plans, scenarios): the time of every plan of the declared space on every scenario, at
    the objective's factor of its own memory tier (solver/memory_tiers.py). Each tier's arrays
    list the plans that fit its memory cap at its factor: a plan within the emptier tier is
    listed there at its own factor and again in the fuller one at a factor at least as high,
    a copy slower on every scenario, which never adds iterations to the best choice; a plan
    beyond it is listed only in the fuller tier, at its own factor. So the union of the tiers'
    lists has the same most iterations as every plan at its own factor."""
    return np.array([t for tier in memory_tiers.tiers(inst) for t in _tier_plan_times(tier)])


def _tier_plan_times(inst) -> list:
    """every_plan_times within `inst`'s memory tier (search.memory_fill_cap)."""
    out = []
    placements: dict = {}
    uniform = inst.search.uniform_split
    for o in declared_outers(inst, uniform=uniform):
        for parts in all_partitions(inst, o, placer(inst, o, placements), class_outers(inst.job, o)):
            p = problem_for(inst, o, "robust", placements=placements, partitions=parts)
            mvecs = micro_batch_vectors(o.classes, p.total_micro_batches, uniform, o.virtual_stages)
            rows = [_class_rows(p, k, uniform) for k in range(p.classes)]
            if any(len(x[0]) == 0 for x in rows):
                continue
            v = o.virtual_stages
            for mv in mvecs:
                for combo in itertools.product(*(range(len(x[0])) for x in rows)):
                    pipe = np.max([(mv[k] - 1 / v) * rows[k][2][:, j] + rows[k][3][:, j] / v
                                   for k, j in enumerate(combo)], axis=0)
                    sync = np.max([rows[k][4][:, j] for k, j in enumerate(combo)], axis=0)
                    out.append(pipe + sync)
    return out


def best_iterations(times: np.ndarray, periods, switch_s: float) -> float:
    """Most iterations over the periods with any plan per period (a change at period p's
    start loses min(S, H_p) seconds of it): value[j] = best total so far ending on plan j."""
    value = None
    for p, (sigma, dur) in enumerate(periods):
        rate = 1.0 / times[:, sigma]
        if value is None:
            value = dur * rate
            continue
        stay = value + dur * rate
        move = value.max() + (dur - min(switch_s, dur)) * rate  # from the best other plan (or itself: never better)
        value = np.maximum(stay, move)
    return float(value.max())


# seeds 0-39 scanned: on these the plans' times have two or more extreme points, and on seven of
# them the best choice runs two or three plans (it switches)
SEEDS = [1, 4, 6, 7, 16, 18, 20, 21, 28, 33, 35, 39]


@pytest.mark.parametrize("seed", SEEDS)
def test_timeline_equals_brute_force(seed):
    check_against_brute_force(timeline_instance(seed))


def check_against_brute_force(inst):
    """The timeline's choice does the brute force's most iterations, and at most its bound."""
    times = every_plan_times(inst)
    if not len(times):
        pytest.skip("no plan fits memory")
    r = plan_timeline(inst)
    assert r.complete and r.status == "optimal"
    periods = [(p.scenario, p.duration_s) for p in inst.timeline]
    assert r.choice.iterations == pytest.approx(best_iterations(times, periods, r.switch_s), rel=1e-7)
    assert r.choice.iterations <= r.upper_bound_iterations * (1 + 1e-9)


@pytest.mark.parametrize("seed", SEEDS[:4])
def test_timeline_at_p90_equals_brute_force(seed):
    """The same brute force under the default p90 objective: the brute force reads the planner's
    own arrays, which carry the quantile factor (cost/trust.objective_factor_of), so the timeline
    must count iterations at those times too. (Counting them at predicted times while bounding
    them by the p90 optima's bounds once printed a negative gap on the bundled
    instances/mixed/llama3-8b-dynamic.yaml: more iterations than the bound.)"""
    inst = timeline_instance(seed)
    check_against_brute_force(dataclasses.replace(inst, search=dataclasses.replace(inst.search, objective="p90")))


# each scenario's optimum and the timeline's: 2.8-3.5 s of CPU (issue 32, -n 0 at load 16), paid
# by whichever of this test and test_json_schema's runs first
@pytest.mark.slow
@same_worker("mixed/llama3-8b-dynamic")
def test_bundled_timeline_within_its_bound():
    """On the bundled dynamic instance (p90 by default) the choice does at most the iterations of
    every period at its scenario's optimum (the bound U of solver/dynamic's docstring)."""
    # `paraplan timeline --json`: plan_timeline(inst, "cpsat", 600 s: a hang guard, the 60 s
    # default ran out at load 15), its gap as computed; run once per test process with
    # test_json_schema's check of the same command (tests/bundled_plans.py)
    got = timeline_json("mixed/llama3-8b-dynamic")
    assert got["gap"] is not None and got["gap"] >= -1e-9
