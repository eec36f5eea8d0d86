"""The one exact planner: every cluster (one GPU type is its one-group case), every plan shape and
network scenario (solver/solve.py plans a flat instance through it).

The decomposition, over the space of solver/space.py (with interleaving, every pipeline term
below reads (m_k - 1/v) A_k + S_k / v):

1. Enumerate the outer configurations and bound each one before pricing it
   (solver/bounds/unpriced.py: layer-time floors per group, no placement). Without DualPipe,
   the uniform split, --top or a running plan the space is enumerated a
   partial layout at a time (solver/space.declared_partials: a stage-wise pipeline's groups,
   tp per group, cp and replicas, or one other class layout), each bounded before it is
   listed (solver/bounds/layouts.py) and listed only when the search reaches it and it can
   still win (_Partials: the outers' ranks order the keys as the full listing's indices do;
   a stage-wise layout's outers are keyed by at least their representative's bound, which
   reads the pipeline's slowest stage and sum together: layouts.partial_bounds_s's
   per_block). In that order, in chunks (PRICE_CHUNK), and only while that bound can still
   beat the incumbent, build their class coefficients on every network scenario the objective looks at
   (cost/class_coefficients.py), in passes (problems_for); the rest are pruned unpriced.
   Those the space's memory lower bound proves infeasible as their chunk comes up
   (solver/bounds/memory.py: each configuration's own micro-batch, sp and ZeRO stage) are
   dropped unpriced.
2. Drop those a memory argument proves infeasible (solver/bounds/one_class.memory_infeasible, per class).
   Lower bound (solver/bounds/batched.py, every configuration at once): per scenario and class
   A_k <= max_s T_s and S_k <= sum_s T_s and D <= max sync, whatever the split; then
       LB = min over micro-batch vectors m of  agg_sigma [ max_k ((m_k - 1) A_k + S_k) + D ]
   (relaxed for a worst case, exact over the enumerated vectors for a weighted objective, so
   valid for every split). Incumbent: the better of the even and the balanced split, each with
   the fewest fully recomputed layers that fit, and the best m for it.
3. Visit configurations by (bound, index); solve those that can still win with CP-SAT or MILP
   (formulations/multiclass*.py), prune the rest (a lone class first tries the tight bound and
   the exact DP with a cutoff: _cannot_win_alone; between them the bound that reads its
   slowest stage and sum together, solver/bounds/fill_drain.priced_bounds_s). Backend "dp"
   (the class route of a homogeneous instance, solver/solve.py) solves a lone class on one network by that DP
   with the incumbent as cutoff, as the homogeneous planner does. Tie rule as in the
   homogeneous planner.

With search.tensor_partitions, each outer configuration's layer-plan combinations (a plan per
replica class and group, solver/class_partitions.py) are one more node of the same search,
keyed by an optimistic bound and expanded into candidates only when it can still win; the
partial layouts and families are then bounded on the layer plans' floors, without memory, so
that each bound holds for every combination (solver/bounds/layouts.py).

With search.asymmetric_pipelines, each asymmetric pipeline of the declared space (a
data-parallel degree per stage, solver/asymmetric_space.py) is one more node of the same
search: priced and keyed by its bound (solver/asymmetric_search.py), its split searched depth
first below the bar only when it comes up and can still win; a symmetric plan keeps a tie.

A DualPipe job (job.pipeline_schedule: dualpipe, one class on one GPU type) goes the same way
with its own inner problem (formulations/dualpipe.py, priced by cost/dualpipe.terms): its bound
before pricing is the steady term alone (solver/bounds/unpriced.py), after pricing the pairs'
means (DualPipeProblem.lower_bound_s), and every backend solves a candidate with the incumbent
as cutoff ("dp": the exact threshold search); no incumbent heuristic, no layer plans.

Objectives over the instance's scenarios: "nominal" (scenario 0 only), "robust" (minimise the
worst scenario's iteration time) and "expected" (probability-weighted). The plan is re-simulated
on every scenario (cost/simulate.py); a mismatch beyond the tolerance is a bug and raises
`ResimulationMismatch`.
"""

from __future__ import annotations

import dataclasses
import heapq
import itertools
import math
import sys
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from paraplan.cost import recompute_patterns, schedule
from paraplan.cost.framework_rules import recompute_pattern
from paraplan.cost.recompute_patterns import RecomputePattern
from paraplan.cost.coefficients import build
from paraplan.cost.errors import InstanceError
from paraplan.cost.class_coefficients import (class_outers, class_placement, partitions_layer_fn)
from paraplan.cost.simulate import Breakdown, simulate
from paraplan.cost.objective import capped_memory, scaled_times
from paraplan.cost.specs import Instance
from paraplan.cost.plan_specs import ClassOuter, Plan, ReplicaClass
from paraplan.cost.framework_rules import rules_for
from paraplan.cost.trust import objective_factor_of
from paraplan.formulations.multiclass import MultiClassProblem, MultiClassResult
from paraplan.solver import memory_tiers
from paraplan.solver.collector import fewer_collections
from paraplan.solver.partition_plans import enabled as partitions_enabled
from paraplan.solver.bounds import memory as memory_bound, one_class
from paraplan.solver.bounds.batched import balanced_split_of, lower_bounds_s, over_m
from paraplan.solver.bounds.fill_drain import priced_bounds_s
from paraplan.solver.bounds.unpriced import floor_bounds_s
from paraplan.solver.bounds.unpriced_memory import memory_floor_bounds_s
from paraplan.solver.bounds.order_free import OrderFree
from paraplan.solver.bounds import pattern_values, plan_sync
from paraplan.solver.bounds import twins
from paraplan.solver.class_layouts import FAMILIES, cp_values, stage_replicas, tp_values
from paraplan.solver.bounds.layouts import partial_bounds_s, representative_key
from paraplan.solver.bounds.stage_families import FamilyBounds, ReplicaFamily, StageFamily, stage_families
from paraplan.solver.space import (dualpipe_job, empty_space_reason, declared_outers, partials_and_families,
                                   partial_rank, replica_partial, stage_partial,
                                   micro_batch_vectors, paired_counts, summarize, summarize_partials)
from paraplan.solver.progress import search_status
from paraplan.solver.planner import (CUTOFF, FEASIBLE, INFEASIBLE, OPTIMAL, REL_TOL, TIMEOUT,
                                     ResimulationMismatch, SolveResult)

if TYPE_CHECKING:
    from paraplan.formulations.dualpipe import DualPipeProblem
    from paraplan.solver import class_partitions  # imported where layer plans are searched

OBJECTIVES = ("nominal", "robust", "expected")
# Configurations (lowest bounds first) given a quick even/balanced-split incumbent before the
# exact solves start; beyond these, each exact solve is its own incumbent.
INCUMBENT_PROBES = 64
# with layer plans, the all-Megatron configurations of least bound priced at once as their
# layouts are listed, for an incumbent (the dive, _Search._list_layouts)
DIVE_OUTERS = 8
# the configurations of least own bound priced at once of a stage family's tp choice that its
# joint key pushes back (_Search._dive). 8 x 8 at 30 s of CPU: 2.2113 s at p90 with 8, 2.2079 s
# with 32 (the same choice's better orders); the four-type growth row prices 72 and 84
DIVE_CHOICE_OUTERS = 32
# configurations priced at a time (in the order of their bound before pricing): large enough
# that the pricing loop runs alone, small enough not to price many that cannot win. The chunks
# start at FIRST_PRICE_CHUNK and double up to PRICE_CHUNK, so that a first plan (the quick
# incumbents of the first chunk) and a look at the clock come after a few builds, not 512
# (DeepSeek-V3 on 2,048 H800: 2.5 s of pricing before any limit was read)
PRICE_CHUNK = 512
FIRST_PRICE_CHUNK = 8
# Past the time limit (or past the setup: outers listed and bounded, where that took longer)
# and with no plan yet, pricing goes on (chunk by chunk, quick incumbents only, no solve) for at
# most this long to find a first feasible plan; then the search stops
# with status timeout. A plan found in it is "feasible", never "optimal" (the configurations
# left are counted unresolved).
FIRST_PLAN_ALLOWANCE_S = 0.5
# The bound before pricing (solver/bounds/unpriced.py) stops at the limit, but not before this:
# the outers it has not reached are bounded by 0, which is what a search stopped there would
# report. Spaces bounded in less (every random instance, each in milliseconds) keep their own
# bound under any limit; DeepSeek-V3 / 2,048 H800 takes ~1 s, Qwen3 235B ~0.8 s (2 cores).
FLOOR_AT_LEAST_S = 0.25
# Nodes listed after that deadline are late: their bound before pricing was not read, so they
# stand keyed by 0 (or by their layout's or tp choice's key) in the heap. Where the search stops
# at its limit, the late nodes at the heap's top are keyed (their bounds read now, in batches of
# PARTIAL_OUTERS_AT_ONCE configurations) for at most this long past it, so that the bound it
# reports is theirs, not 0 (issue 33: 32 A100 + 32 H100 with partitions reported 0 after 60 s
# where its last listing crossed the deadline). A space of which most is late (MoE models listed
# whole under a tiny limit) keeps 0: its least key is not raised before all of them are keyed.
LATE_KEYS_S = 0.1
# outers whose layer-plan combinations are set up at a time (each takes a few builds)
PLANS_CHUNK = 64
# outers whose layer-plan choices _Search._read_ahead sets up at once, their optimistic terms
# read in one batch
READ_AHEAD = 32
# Largest split (stages x chunks) handed to the exact split DP (formulations/split_dp.py). Its
# tables take about 95 bytes a cell (measured: 62 MiB at 0.64M cells, 595 MiB at 6.4M) and are
# built before its clock is read, so a million layers on 1,024 stages (10^9 cells) took
# gigabytes and minutes whatever the limit. 2^19 cells: at most ~50 MiB and well under a second
# of table building; every bundled and random instance lies far below (at most ~20,000 cells).
# CP-SAT's model is held to the same (over every class): its exact memory points
# (formulations/quantize.exact_memory_points) list each stage's layer counts, pp x L arrays
# (7.6 GiB for a million layers on 1,024 stages; --backend cpsat was killed for memory there).
# The MILP lists none and takes any split.
DP_MAX_CELLS = 1 << 19


def scenario_weights(inst: Instance, objective: str) -> tuple[list[int], str, tuple[float, ...]]:
    """(scenario indices, aggregation, weights) for an objective."""
    if objective not in OBJECTIVES:
        raise ValueError(f"objective must be one of {OBJECTIVES}, got {objective!r}")
    if objective == "nominal":
        return [0], "max", ()
    idx = list(range(len(inst.scenarios)))
    if objective == "robust":
        return idx, "max", ()
    probs = [sc.probability for sc in inst.scenarios]
    if any(p is None for p in probs):
        raise ValueError("--expected needs a probability on every scenario (see the instance's scenarios:)")
    return idx, "weighted", tuple(float(p) for p in probs)


def within(ranked, within_pct: float | None) -> list:
    """The (value, plan) pairs of `ranked` (best first) at most `within_pct` percent slower
    than the first: all of them without a percentage."""
    if within_pct is None or not ranked:
        return list(ranked)
    cap = ranked[0][0] * (1 + within_pct / 100) * (1 + REL_TOL)
    return [(val, plan) for val, plan in ranked if val <= cap]


NO_BAR = (float("inf"), (float("inf"), 0, 0))  # what any value beats while fewer than k are known
ANY_KEY = (float("inf"), float("inf"), float("inf"))  # a key every candidate's precedes


@dataclass
class Winners:
    """The best `k` plans found so far, of distinct candidates (outer configuration, or outer
    and layer-plan combination), as (value, key, plan) in (value, key) order: with k = 1 the
    incumbent. The value of a candidate's plan enters the search here only (`offer`), and the
    search prunes against `bar`: the k-th value, or with `within_pct` at most the best value
    times (1 + within_pct / 100), past which a plan is not listed, or at most `ceiling_s`."""

    k: int = 1
    within_pct: float | None = None
    found: list = dataclasses.field(default_factory=list)
    # the value of a plan in hand outside the search (solver/memory_tiers.py: the relaxation's
    # plan at its own factor): no plan above it can be the answer, so the bar is at most
    # (ceiling_s, ANY_KEY): a plan of that value (a tie within REL_TOL) still enters
    ceiling_s: float = float("inf")
    # where the search lists a configuration twice (an asymmetric pipeline of equal degrees is
    # its symmetric twin, solver/asymmetric_search.twin_outer), a candidate's own entry is also
    # one of the same outer configuration: each is listed once, with its best plan
    by_outer: bool = False

    @property
    def in_hand(self) -> bool:
        """Whether a plan is known, found here or held outside (ceiling_s)."""
        return bool(self.found) or math.isfinite(self.ceiling_s)

    def bar(self) -> tuple[float, tuple]:
        """(value, key) a candidate must beat to enter."""
        val, key = NO_BAR if len(self.found) < self.k else self.found[self.k - 1][:2]
        if self.ceiling_s < val:
            val, key = self.ceiling_s, ANY_KEY
        if self.within_pct is not None and self.found:
            cap = self.found[0][0] * (1 + self.within_pct / 100)
            if cap < val:
                return cap, ANY_KEY
        return val, key

    def beats(self, val: float, key, bar: tuple[float, tuple] | None = None) -> bool:
        """Whether `val` beats the bar (a tie within REL_TOL goes to the earlier key): for a
        lower bound, whether the candidate can still enter."""
        bar_val, bar_key = self.bar() if bar is None else bar
        return val < bar_val * (1 - REL_TOL) or (val <= bar_val * (1 + REL_TOL) and key < bar_key)

    def offer(self, val: float, key, plan) -> bool:
        """Take a candidate's plan of value `val` where it beats the bar, or its own earlier
        entry (each candidate is listed once, with its best plan)."""
        own = next((i for i, f in enumerate(self.found)
                    if f[1] == key or self.by_outer and _outer_of(f[2]) == _outer_of(plan)), None)
        if own is not None:
            if not self.beats(val, key, self.found[own][:2]):
                return False
            del self.found[own]
        elif not self.beats(val, key):
            return False
        self.found.append((val, key, plan))
        self.found.sort(key=lambda f: (f[0], f[1]))
        del self.found[self.k:]
        return True

    @property
    def best_s(self) -> float:
        return self.found[0][0] if self.found else float("inf")


@dataclass(frozen=True)
class _PipelinePlan:
    """What Winners holds for an asymmetric pipeline's plan (a configuration's holds
    (outer, m, n, r, partitions), _plan_of's arguments)."""

    outer: ClassOuter  # the configuration it is: its symmetric twin's where its degrees are equal
    plan: Plan


def _outer_of(found) -> ClassOuter:
    """The outer configuration of a plan Winners holds."""
    return found.outer if isinstance(found, _PipelinePlan) else found[0]


def _found_plan(found) -> Plan:
    """The plan Winners holds, as a Plan."""
    return found.plan if isinstance(found, _PipelinePlan) else _plan_of(*found)


class _Node:
    """A node of the search's heap, a bound object: its `key` orders it (best first) and prunes
    it (_Search.can_win), `weight` counts the candidates it stands for, and a kind whose bound
    is read again as it comes up does so by its own `tighten`. `late`: its key is not read yet
    (listed after the floors' deadline: _Unpriced.late), until the search keys it where it
    stops (_Search._key_late)."""

    late = False


@dataclass
class _Pipeline(_Node):
    """An asymmetric pipeline (search.asymmetric_pipelines), priced and bounded
    (solver/asymmetric_search.priced), its split searched when it comes up and can still win.
    Its heap key (bound, inf, listing index) pops it after the configurations of an equal bound;
    its key in the tie rule (`rank`) follows every configuration's: a symmetric plan of an equal
    value is kept (the pipelines were once searched after the symmetric space, against its
    optimum)."""

    pipeline: object  # asymmetric_search.Pipeline
    key: tuple[float, float, int]
    weight = 1

    @property
    def rank(self) -> tuple[float, int, int]:
        return (math.inf, self.key[2], 0)


@dataclass
class _Candidate(_Node):
    """A configuration waiting in the search's queue, ordered by its lower bound."""
    weight = 1  # plans-level candidates it stands for (see _LayerPlans)

    outer: ClassOuter
    problem: MultiClassProblem
    key: tuple[float, int, int]  # (lower bound, outer index, layer-plan combination index)
    uniform: bool = False
    partitions: tuple = ()  # per class, ReplicaClass.partitions (solver/class_partitions.py)
    # a lone class's tight bound per scenario, computed with its chunk's (_settle_alone), and
    # the bar against which its tight and coupled bounds were then tested (and failed)
    tight_s: tuple[float, ...] | None = None
    settled_bar: tuple | None = None

    @property
    def mvecs(self) -> np.ndarray:
        if _is_dualpipe(self.problem):  # one class, its count fixed by the batch
            return np.array([[self.problem.num_micro_batches]], np.int64)
        return micro_batch_vectors(self.outer.classes, self.problem.total_micro_batches, self.uniform,
                                   self.outer.virtual_stages, self.problem.paired)


def pattern_recompute(p: MultiClassProblem, n: list[np.ndarray]) -> list[np.ndarray] | None:
    """Per class, the fewest fully recomputed layers per stage that make split n fit and that
    the framework runs (one parameter value of p.recompute_pattern for every class: the first
    that fits, the values growing in every count); None when none fits."""
    r = [one_class.fitting_recompute(c, nk, p.allow_full_recompute) for c, nk in zip(p.coeffs[0], n)]
    if any(rk is None for rk in r) or p.recompute_pattern is RecomputePattern.PER_STAGE:
        return None if any(rk is None for rk in r) else r
    o, v = p.coeffs[0][0].outer, p.virtual_stages
    top_n = max(int(np.max(nk)) for nk in n)
    top_c = (p.slots // v) - min(p.pp(k) for k in range(p.classes)) + 1

    def at(i: int) -> list[np.ndarray] | None:
        got = [recompute_patterns.value_counts(p.recompute_pattern, i, nk, v, o.embedding_in_split,
                                               o.loss_in_split, top_n, top_c).astype(float) for nk in n]
        ok = all(schedule.fits(c, np.asarray(nk, float), rk) for c, nk, rk in zip(p.coeffs[0], n, got))
        return got if ok else None

    # the first value that fits, by bisection: memory falls as the counts grow (a recomputed
    # layer frees memory, cost/memory.py), so "fits" holds from some value on; the found value
    # is re-checked, so an incumbent always fits
    lo, hi = 0, recompute_patterns.parameter_count(p.recompute_pattern, top_n, top_c) - 1
    if at(hi) is None:
        return None
    while lo < hi:
        mid = (lo + hi) // 2
        if at(mid) is None:
            lo = mid + 1
        else:
            hi = mid
    return at(lo) or at(recompute_patterns.parameter_count(p.recompute_pattern, top_n, top_c) - 1)


def _incumbent_for(p: MultiClassProblem, mvecs: np.ndarray, n: list[np.ndarray]):
    r = pattern_recompute(p, n)
    if r is None:
        return None
    A = [[float(schedule.stage_times_s(c, nk, rk).max()) for c, nk, rk in zip(cs, n, r)] for cs in p.coeffs]
    S = [[float(schedule.stage_times_s(c, nk, rk).sum()) for c, nk, rk in zip(cs, n, r)] for cs in p.coeffs]
    D = [max(float(schedule.sync_times_s(c, nk).max()) for c, nk in zip(cs, n)) for cs in p.coeffs]
    vals = over_m(p, mvecs, A, S, D)
    i = int(np.argmin(vals))
    m = tuple(int(x) for x in mvecs[i])
    value, _ = p.evaluate(m, n, r)
    return value, m, n, r


def incumbent(p: MultiClassProblem, mvecs: np.ndarray, uniform: bool = False):
    """The better of the even split and the nominal-balanced split (balanced_split), each with
    the fewest fully recomputed layers that fit and its best m: (value, m, n, r) or None."""
    v = p.virtual_stages
    even = [one_class.even_split(c.layers, c.pp, v, one_class.slots_of(c)) for c in p.coeffs[0]]
    found = [_incumbent_for(p, mvecs, even)]
    if not uniform:
        bal = [balanced_split_of(c) for c in p.coeffs[0]]
        found.append(_incumbent_for(p, mvecs, bal))
    found = [f for f in found if f is not None]
    return min(found, key=lambda f: f[0]) if found else None


def _plan_of(o: ClassOuter, m, n, r, partitions=()) -> Plan:
    parts = partitions or ((),) * len(o.classes)
    return Plan(tp=o.tp, micro_batch=o.micro_batch, cp=o.cp, virtual_stages=o.virtual_stages,
                      sequence_parallel=o.sequence_parallel,
                      recompute=o.recompute, zero=o.zero, family=o.family, ep=o.ep,
                      etp=o.etp, group_tp=o.group_tp, embedding_in_split=o.embedding_in_split,
                      loss_in_split=o.loss_in_split, zero_bubble=o.zero_bubble,
                      classes=tuple(ReplicaClass(replicas=c.replicas, stage_groups=c.stage_groups,
                                                 num_micro_batches=int(mk),
                                                 layers_per_stage=tuple(int(x) for x in nk),
                                                 full_recompute_layers=tuple(int(x) for x in rk),
                                                 partitions=pk)
                                    for c, mk, nk, rk, pk in zip(o.classes, m, n, r, parts)))


def placer(inst: Instance, o: ClassOuter, placements: dict | None = None):
    """placed(i, k): class k's placement on scenario i, kept in `placements` across the
    configurations of one instance: it depends only on the scenario, tp (per group), cp, v and
    the class shapes, ep and etp (cost/class_coefficients.class_placement), so configurations differing in
    micro-batch size, modes or ZeRO share it."""
    placements = {} if placements is None else placements

    def placed(i: int, k: int):
        return _placement(inst, placements, i, o, k)
    return placed


def _placement(inst: Instance, placements: dict, i: int, o: ClassOuter, k: int):
    """placer's lookup: keyed by the shapes' identity (hashing them per configuration costs more
    than the lookup saves); the entry keeps the shapes alive, so no other object takes their id."""
    key = (i, o.tp, o.group_tp, o.cp, o.virtual_stages, o.ep, o.etp, id(o.classes), k)
    if key not in placements:
        placements[key] = (o.classes, class_placement(inst.scenarios[i].cluster, o, k))
    return placements[key][1]


def _is_dualpipe(p) -> bool:
    """Whether `p` is a DualPipe split problem (formulations/dualpipe.py). That module is
    imported only where a DualPipe job builds one (dualpipe_problem), so that a plan of any
    other job does not load it (issue 33, start-up): where it is not loaded, no problem is one."""
    mod = sys.modules.get("paraplan.formulations.dualpipe")
    return mod is not None and isinstance(p, mod.DualPipeProblem)


def dualpipe_problem(inst: Instance, o: ClassOuter) -> DualPipeProblem:
    """The DualPipe split problem of a configuration of one class on one group
    (formulations/dualpipe.py), on cost/dualpipe.terms: the terms simulate prices its plans
    with (the nominal network; a DualPipe job has no scenarios of its own), on its one group's
    pricing instance."""
    from paraplan.cost import dualpipe  # here: only a DualPipe job reads it (issue 33's start-up)
    from paraplan.formulations.dualpipe import DualPipeProblem
    co = class_outers(inst.job, o)[0]
    x = dualpipe.terms(inst.group_alone(0, inst.cluster), co,
                       reserve_bytes=inst.search.memory_reserve_bytes)
    f = objective_factor_of(inst, o)  # the quantile objective (problem_of)
    c = scaled_times(x.coeffs, f)
    return DualPipeProblem(a=c.stage_time_s, t=c.layer_time_s, u=c.recompute_time_s, bw=f * x.bw_s, ru=f * x.ru_s,
                           e=c.stage_sync_time_s, g=c.layer_sync_time_s, k0=x.k0_bytes, kn=x.kn_bytes,
                           kr=x.kr_bytes, runtime_bytes=x.runtime_bytes, capacity_bytes=c.capacity_bytes,
                           num_micro_batches=co.num_micro_batches, layers=c.layers,
                           first_min=c.first_chunk_min_layers, allow_full_recompute=inst.search.full_recompute)


def problem_of(inst: Instance, o: ClassOuter, objective: str, coeffs,
               prescaled: bool = False, factor: float | None = None) -> MultiClassProblem:
    """The inner problem of `o` on coefficients [scenario][class], its times scaled by the
    quantile objective's factor (cost/trust.objective_factor_of; `factor`: that factor, where
    the caller has read it) and its memory capped at the search's memory tier
    (search.memory_fill_cap, solver/memory_tiers.py) unless `prescaled` (the layer-plan
    combinations of solver/class_partitions.py are built so)."""
    _, agg, weights = scenario_weights(inst, objective)
    if not prescaled:
        factor = objective_factor_of(inst, o) if factor is None else factor
        cap = inst.search.memory_fill_cap
        reserve = inst.search.memory_reserve_bytes
        coeffs = [[capped_memory(scaled_times(c, factor), cap, reserve) for c in cs] for cs in coeffs]
    return MultiClassProblem(coeffs=tuple(tuple(cs) for cs in coeffs),
                             replicas=tuple(c.replicas for c in o.classes),
                             total_micro_batches=inst.job.global_batch // o.micro_batch,
                             objective=agg, weights=weights,
                             allow_full_recompute=inst.search.full_recompute,
                             recompute_pattern=recompute_pattern(inst.job.framework, o.recompute,
                                                                inst.search.partial_recompute),
                             virtual_stages=o.virtual_stages, paired=paired_counts(inst, o))


def priced_for(inst: Instance, o: ClassOuter, objective: str, placements: dict | None = None,
               partitions: tuple | None = None) -> tuple:
    """problem_for's (tests/oracles/search.py) coefficients [scenario][class] as build prices them, before problem_of
    scales their times and caps their memory: they do not read the memory tier
    (search.memory_fill_cap), so the brute force prices them once for every tier
    (solver/exhaustive.py)."""
    idx, _, _ = scenario_weights(inst, objective)
    reserve = inst.search.memory_reserve_bytes
    placed = placer(inst, o, placements)
    K = len(o.classes)
    outs = class_outers(inst.job, o)

    def priced(i: int, k: int):
        pl = placed(i, k)
        if not partitions:  # Megatron 1-D everywhere: build's default layer pricing
            return build(inst, outs[k], reserve_bytes=reserve, placement=pl)
        return build(inst, outs[k], reserve_bytes=reserve, placement=pl,
                     layer_fn=partitions_layer_fn(inst, inst.scenarios[i].cluster, pl,
                                                  o.classes[k].stage_groups, partitions[k]))

    return tuple(tuple(priced(i, k) for k in range(K)) for i in idx)


def problems_for(inst: Instance, outers: list[ClassOuter], objective: str,
                 placements: dict | None = None) -> list[MultiClassProblem | None]:
    """problem_for(inst, o, objective) of every outer, None where a class is proved infeasible
    by memory (cost/coefficients.no_split_fits; memory does not depend on the network), in
    passes: every outer's class k on the first scenario (k = 0, 1, ...), a class whose memory
    fits no split dropped before its time terms are priced, then the other scenarios of the
    survivors. The same problems and the same pricing
    skipped; measured about 20% faster than pricing and proving one configuration at a time
    (numpy checks between the builds slow the builds down: a pricing loop runs faster alone)."""
    if dualpipe_job(inst):
        return [dualpipe_problem(inst, o) for o in outers]
    idx, _, _ = scenario_weights(inst, objective)
    reserve = inst.search.memory_reserve_bytes
    placements = {} if placements is None else placements
    outs = [class_outers(inst.job, o) for o in outers]
    first: list[list | None] = [[] for _ in outers]
    live = list(range(len(outers)))
    for k in range(max((len(o.classes) for o in outers), default=0)):
        todo = [j for j in live if k < len(outers[j].classes)]
        # memory is priced first and does not depend on the network: a class no split fits is
        # dropped before its time terms are priced (build's skip_if_memory_infeasible)
        priced = [build(inst, outs[j][k], reserve_bytes=reserve, skip_if_memory_infeasible=True,
                        placement=_placement(inst, placements, idx[0], outers[j], k)) for j in todo]
        for j, c in zip(todo, priced):
            first[j] = None if c is None else first[j] + [c]
        live = [j for j in live if first[j] is not None]
    out: list[MultiClassProblem | None] = [None] * len(outers)
    for j in live:
        o = outers[j]
        rest = tuple(tuple(build(inst, outs[j][k], reserve_bytes=reserve,
                                 placement=_placement(inst, placements, i, o, k))
                           for k in range(len(o.classes))) for i in idx[1:])
        out[j] = problem_of(inst, o, objective, (tuple(first[j]),) + rest)
    return out


def _cannot_win_alone(p: MultiClassProblem, best_s: float, earlier: bool, time_limit_s: float,
                      tight_s: tuple[float, ...] | None = None, bounds_tested: bool = False) -> bool:
    """Whether a lone class is proved unable to beat the incumbent `best_s` (on a tie: unless
    its key is the earlier one). On each network its problem is exactly the homogeneous split
    problem of its coefficients, which the tight bound (solver/bounds/one_class.py) and the exact dynamic
    programme with a cutoff (formulations/split_dp.py) settle quickly: the worst case ("max")
    is above the cutoff as soon as one network's time is; a weighted time as soon as the
    weighted tight bounds are. Only a proof of "no" is used: the plan itself still comes from
    the backend's own solve. `tight_s`: the tight bounds per network, where already computed;
    `bounds_tested`: the tight and coupled bounds already failed against this cutoff (they
    would again), so only the DP is left."""
    if p.classes > 1 or not math.isfinite(best_s):
        return False
    dp_fits = _dp_cells(p) <= DP_MAX_CELLS
    cutoff = best_s * (1 + REL_TOL) if earlier else best_s * (1 - REL_TOL)
    tight = (list(tight_s) if tight_s is not None else
             [one_class.tight_lower_bound_s(cs[0], p.allow_full_recompute) for cs in p.coeffs])
    if p.objective == "weighted":
        return not bounds_tested and float(np.dot(p.weights, tight)) > cutoff
    if not bounds_tested and (max(tight) > cutoff or any(
            one_class.coupled_bound_above(cs[0], p.allow_full_recompute, cutoff) for cs in p.coeffs)
            or float(priced_bounds_s([cs[0] for cs in p.coeffs], p.allow_full_recompute).max()) > cutoff):
        return True
    if not dp_fits:
        return False
    from paraplan.formulations.split_dp import solve_split_dp  # here: _solve_lone_dp says why
    deadline = time.perf_counter() + time_limit_s
    for i in np.argsort(tight)[::-1]:  # the network closest to the cutoff first
        cs = p.coeffs[i]
        sr = solve_split_dp(cs[0], allow_full_recompute=p.allow_full_recompute,
                            time_limit_s=max(deadline - time.perf_counter(), 1e-3), cutoff_s=cutoff,
                            pattern=p.recompute_pattern)
        if sr.status == CUTOFF:
            return True
    return False


def _settle_alone(cands: list[_Candidate], won: Winners) -> list[_Candidate]:
    """A newly priced chunk less its lone classes proved unable to beat the bar now: the first
    two tests of _cannot_win_alone (the tight bound, aggregated over the networks, then the
    coupled bound on each), for the whole chunk at once (one_class.tight_lower_bounds_s,
    coupled_bounds_above: the numbers of one at a time). The bar only falls, so one that
    cannot win now never will. The others keep their tight bounds for when they come up;
    those whose priced bound already loses (the key the heap prunes them by) are not read.
    One at a time these tests were about a third of the four-GPU-type growth search."""
    bar_val, bar_key = won.bar()
    if not math.isfinite(bar_val):  # no incumbent yet: nothing to settle against
        return cands
    # those whose priced bound already loses are left to it (the bar only falls): no tight bound read
    lone = [c for c in cands if not _is_dualpipe(c.problem) and c.problem.classes == 1
            and won.beats(c.key[0], c.key)]
    if not lone:
        return cands
    rows = [cs[0] for c in lone for cs in c.problem.coeffs]
    tight = one_class.tight_lower_bounds_s(rows, lone[0].problem.allow_full_recompute).tolist()
    at = 0
    for c in lone:
        c.tight_s = tuple(tight[at:at + len(c.problem.coeffs)])
        c.settled_bar = (bar_val, bar_key)
        at += len(c.problem.coeffs)
    out = set()
    coupled: list[tuple[_Candidate, float]] = []  # (worst-case candidate, its cutoff)
    for c in lone:
        p = c.problem
        lb = float(np.dot(p.weights, c.tight_s)) if p.objective == "weighted" else max(c.tight_s)
        if not won.beats(lb, c.key):
            out.add(id(c))
        elif p.objective != "weighted":
            coupled.append((c, bar_val * (1 + REL_TOL) if c.key < bar_key else bar_val * (1 - REL_TOL)))
    if coupled:
        rows = [cs[0] for c, _ in coupled for cs in c.problem.coeffs]
        cuts = np.array([cut for c, cut in coupled for _ in c.problem.coeffs])
        above = one_class.coupled_bounds_above(rows, lone[0].problem.allow_full_recompute, cuts).tolist()
        at = 0
        for c, _ in coupled:
            if any(above[at:at + len(c.problem.coeffs)]):
                out.add(id(c))
            at += len(c.problem.coeffs)
    return _settle_fill_drain([c for c in cands if id(c) not in out], won)


def _settle_fill_drain(cands: list[_Candidate], won: Winners) -> list[_Candidate]:
    """`cands` less the lone classes (of the worst-case objective, as _cannot_win_alone reads
    them) whose bound that reads their slowest stage and sum together (fill_drain.
    priced_bounds_s, per network, the worst taken) cannot beat the bar: none of their plans can
    win (the bar only falls). Those whose priced bound already loses are left to it."""
    lone = [c for c in cands if not _is_dualpipe(c.problem) and c.problem.classes == 1
            and c.problem.objective != "weighted" and won.beats(c.key[0], c.key)]
    if not lone:
        return cands
    rows = [cs[0] for c in lone for cs in c.problem.coeffs]
    lbs = priced_bounds_s(rows, lone[0].problem.allow_full_recompute).tolist()
    out, at = set(), 0
    for c in lone:
        if not won.beats(max(lbs[at:at + len(c.problem.coeffs)]), c.key):
            out.add(id(c))
        at += len(c.problem.coeffs)
    return [c for c in cands if id(c) not in out]


def _dp_cells(p: MultiClassProblem) -> int:
    """Cells of the exact split DP's tables for a lone class: its stages x chunks (of several
    classes, the sum: what CP-SAT's exact memory points list, DP_MAX_CELLS)."""
    return sum(c.pp * (c.layers // p.virtual_stages) for c in p.coeffs[0])


def _lone_dp(p: MultiClassProblem, backend: str) -> bool:
    """Whether backend "dp" solves `p` by the exact split DP: one class on one network, whose
    problem is exactly the homogeneous split problem of its coefficients (its count fixed by
    the batch). Anything else "dp" hands to CP-SAT."""
    return backend == "dp" and p.classes == 1 and len(p.coeffs) == 1


def _solve_lone_dp(p: MultiClassProblem, time_limit_s: float, hint, cutoff_s: float | None) -> MultiClassResult:
    """formulations/split_dp.py on a lone class (see _lone_dp), as the homogeneous planner
    solves a configuration: status "cutoff" when no split can be at or below `cutoff_s`."""
    # imported here: a plan whose configurations are all pruned before a solve (GPT-3 175B on
    # 1,024 A100) never loads the DP (issue 33, start-up)
    from paraplan.formulations.split_dp import solve_split_dp
    sr = solve_split_dp(p.coeffs[0][0], allow_full_recompute=p.allow_full_recompute,
                        time_limit_s=time_limit_s, pattern=p.recompute_pattern,
                        hint=None if hint is None else (tuple(hint[1][0]), tuple(hint[2][0])),
                        cutoff_s=cutoff_s if cutoff_s is not None and math.isfinite(cutoff_s) else None)
    found = sr.layers_per_stage is not None
    m = (p.total_micro_batches // p.replicas[0],)
    n = (tuple(sr.layers_per_stage),) if found else None
    r = (tuple(sr.full_recompute_layers),) if found else None
    objective, per = p.evaluate(m, n, r) if found else (None, None)
    tol = sr.gap_s if sr.status == OPTIMAL and sr.gap_s is not None else 0.0
    return MultiClassResult(status=sr.status, micro_batches=m if found else None, layers_per_stage=n,
                            full_recompute_layers=r, objective_s=objective,
                            per_scenario_s=None if per is None else tuple(per), bound_s=sr.bound_s,
                            wall_time_s=sr.wall_time_s, backend="dp", tolerance_s=max(0.0, tol))


def _solve_inner(p: MultiClassProblem, backend: str, time_limit_s: float, hint, cutoff_s: float | None = None):
    if _is_dualpipe(p):  # the DualPipe split: its own model in every backend
        from paraplan.formulations import dualpipe as dp
        cut = cutoff_s if cutoff_s is not None and math.isfinite(cutoff_s) else None
        if backend == "dp":
            return dp.solve_exact(p, cutoff_s=cut)
        if backend == "cpsat":
            return dp.solve_cpsat(p, time_limit_s=time_limit_s, cutoff_s=cut)
        if backend in ("milp", "scip", "highs"):
            return dp.solve_milp(p, time_limit_s=time_limit_s, backend="cbc" if backend == "milp" else backend,
                                 cutoff_s=cut)
        raise ValueError(f"unknown backend {backend!r}: use cpsat, milp or dp")
    if _lone_dp(p, backend):
        return _solve_lone_dp(p, time_limit_s, hint, cutoff_s)
    # the framework's recompute pattern: one solve per value (formulations/recompute_choice.py)
    from paraplan.formulations.recompute_choice import distinct_values, solve_over_pattern, tables_too_large
    if backend in ("cpsat", "dp"):  # dp: the split DP for a lone class on one network only
        from paraplan.formulations.multiclass import solve_multiclass_cpsat

        def solve(q, left):
            return solve_multiclass_cpsat(q, time_limit_s=left, hint=hint)
    elif backend in ("milp", "scip", "highs"):  # milp: CBC, as on a homogeneous cluster
        from paraplan.formulations.multiclass_milp import solve_multiclass_milp
        milp = "cbc" if backend == "milp" else backend

        def solve(q, left):
            return solve_multiclass_milp(q, time_limit_s=left, backend=milp)
    else:
        raise ValueError(f"unknown backend {backend!r}: use cpsat, milp or dp")
    # no per-value bound where the values' tables are too large to list (solve_over_pattern
    # then answers as a time limit would)
    cut = None if tables_too_large(p) else _values_cut(p, cutoff_s, distinct_values)
    if cut is None:
        return solve_over_pattern(p, solve, time_limit_s)
    if cut[0]:  # no value can reach the cutoff: as the DP's cutoff answer
        return MultiClassResult(status=CUTOFF, micro_batches=None, layers_per_stage=None,
                                full_recompute_layers=None, objective_s=None, per_scenario_s=None,
                                bound_s=cut[1], wall_time_s=0.0, backend=backend, tolerance_s=0.0)
    return solve_over_pattern(p, lambda q, left: (_below_cutoff(backend) if q.recompute_value in cut[2]
                                                  else solve(q, left)), time_limit_s)


def _values_cut(p: MultiClassProblem, cutoff_s: float | None, distinct_values):
    """The recompute-pattern values of `p` whose bound (solver/bounds/pattern_values.py) is
    above `cutoff_s`: (every one, the least bound, that set), or None where the bound is not
    read (no finite cutoff, a pattern of one value per stage, or a problem it does not cover)."""
    if (cutoff_s is None or not math.isfinite(cutoff_s) or p.recompute_value is not None
            or p.recompute_pattern is RecomputePattern.PER_STAGE or not pattern_values.applies(p)):
        return None
    values = distinct_values(p)
    bounds = pattern_values.value_bounds_s(p, values)
    above = {i for i in values if bounds[i] > cutoff_s}
    return len(above) == len(values), min(bounds.values()), above


def _below_cutoff(backend: str) -> MultiClassResult:
    """A pattern value whose bound is above the cutoff, answered to solve_over_pattern as an
    infeasible one: none of its plans can beat the cutoff, so the configuration's answer (the
    best of its other values) is its optimum wherever that can win (and a real plan otherwise)."""
    return MultiClassResult(status=INFEASIBLE, micro_batches=None, layers_per_stage=None,
                            full_recompute_layers=None, objective_s=None, per_scenario_s=None,
                            bound_s=math.inf, wall_time_s=0.0, backend=backend, tolerance_s=0.0)


def search(inst: Instance, backend: str = "cpsat", time_limit_s: float = 60.0,
           objective: str = "nominal", families: tuple[str, ...] = FAMILIES,
           groups: tuple[int, ...] | None = None, uniform: bool = False,
           warm_plan: Plan | None = None, progress=None, threads: int = 1,
           resimulate: bool = True, winners: int = 1, within_pct: float | None = None) -> SolveResult:
    """The optimal plan over the declared space (module docstring) at search.objective, its
    memory fill read exactly (solver/memory_tiers.py: the relaxation, which settles it in one
    search wherever its plan is valued at its own factor, else the memory tiers apart): the
    returned plan is valued at its own tier (memory_tiers.plan_tier) and re-simulated there.
    Arguments as _search_tier's. The garbage collector runs less often meanwhile
    (solver/collector.fewer_collections)."""
    with fewer_collections():
        return memory_tiers.search_tiers(
            inst, lambda t, left, ceiling_s: _search_tier(t, backend, left, objective, families, groups, uniform,
                                                          warm_plan, progress, threads, resimulate, winners,
                                                          within_pct, ceiling_s),
            time_limit_s, winners, within_pct)


def _search_tier(inst: Instance, backend: str = "cpsat", time_limit_s: float = 60.0,
                 objective: str = "nominal", families: tuple[str, ...] = FAMILIES,
                 groups: tuple[int, ...] | None = None, uniform: bool = False,
                 warm_plan: Plan | None = None, progress=None, threads: int = 1,
                 resimulate: bool = True, winners: int = 1, within_pct: float | None = None,
                 ceiling_s: float | None = None) -> SolveResult:
    """The optimal plan over the declared space within `inst`'s memory tier
    (search.memory_fill_cap; module docstring). `families`: the class families listed
    (class_layouts.FAMILIES); the asymmetric pipelines are nodes wherever
    search.asymmetric_pipelines is set (with no family: the pipelines alone). `threads` > 1 solves that many configurations
    at once (the planner's best-first order, in batches of configurations that can each still
    win when the batch starts), which changes the time to the answer but not the answer: every
    configuration that could win under the tie rule is still solved.
    `resimulate` False: the caller re-simulates the plan itself (solver/solve.py, with
    the simulator whose breakdown it shows), so that each plan is simulated once; the result
    then has no breakdown or per-scenario times. `winners` K > 1 (`paraplan plan --top K`):
    the same branch and bound keeps the K best plans of distinct candidates (the K-th is the
    bar it prunes against, Winners), in `ranked`; `within_pct` drops those more than that
    much slower than the best. `ceiling_s` (one winner only): the value of a plan held outside
    the search (Winners.ceiling_s); where none of the space's plans is at or below it, the
    answer is INFEASIBLE with no plan, its reason saying so."""
    t0 = time.perf_counter()
    if ceiling_s is not None and winners != 1:
        raise ValueError(f"a ceiling prunes for one winner only, got winners={winners}")
    if threads < 1:
        raise ValueError(f"threads must be >= 1, got {threads}")
    # search.uniform_split reaches here only from a homogeneous instance (a mixed-cluster file
    # listing it is refused, cost/space_rules.search_refusal): on one group the uniform
    # baseline is even layer splits, the homogeneous rule
    uniform = uniform or inst.search.uniform_split
    scenario_weights(inst, objective)  # an unknown objective is refused before any listing
    lazy = None
    if _lists_partials(inst, uniform, winners, within_pct, warm_plan):
        lazy = _Partials.of(inst, objective, families, groups, t0 + time_limit_s)
        outers, summary = [], lazy.summary
    else:
        outers = declared_outers(inst, families, groups, uniform)
        summary = summarize(inst, outers, uniform)
    return _search_over(inst, outers, summary, backend, time_limit_s, objective, families, uniform,
                        warm_plan, progress, threads, resimulate, winners, within_pct, t0, lazy, ceiling_s)


# A partial layout's key is its bound (solver/bounds/layouts.py) lowered by this much: that bound
# is computed from other floats than its configurations' own floors, so a last-digit difference
# must not pop it after one of its configurations could have been priced
PARTIAL_MARGIN = 1e-9
# outer configurations listed at once (those of the partial layouts next in the heap, one call of
# the floors for all): a few chunks' worth, so that each call's setup is spread, and few enough
# that those listed are not many more than the incumbent leaves to list
PARTIAL_OUTERS_AT_ONCE = 256
# An outer's rank (the second entry of its key) is its partial layout's index times this plus its
# place in that layout's listing: ranks order the outers as their indices in declared_outers do
# (the partial layouts are consecutive there, in order), without counting those before them
RANK_STRIDE = 1 << 40


def _lists_partials(inst: Instance, uniform: bool, winners: int, within_pct: float | None,
                    warm_plan: Plan | None) -> bool:
    """Whether search lists the space a partial layout at a time, as the search reaches each
    (_Partials): one winner (a ranking reads the K-th plan), not DualPipe,
    torch's zero-bubble schedules nor the uniform baseline (solver/bounds/layouts.py says why),
    no running plan to keep (replanning looks it up among the outers first). An MoE model's
    too (layouts.py reads its expert layouts and dense prefix; DeepSeek-V3 on 2,048 H800 with
    idle GPUs listed and floored all 968,605 configurations, 16,957 so), but not with layer
    plans beside Megatron's. Per-operator
    partitions are listed so too: every bound before listing then reads the layer plans' floors
    (unpriced.stage_floor_terms' layer_plans) and no memory, and each listed outer's layer-plan
    combinations are one node more (_Search._list_layouts)."""
    return (winners == 1 and within_pct is None and warm_plan is None and not uniform
            and not dualpipe_job(inst)
            # an MoE model's layouts are bounded by their floors alone (layouts.py: no memory,
            # no layer plans, no stage or option families deferred: those bound dense layers)
            and (inst.model.moe is None or not partitions_enabled(inst))
            # torch's zero-bubble variants (space.with_zero_bubble) lower the bound before
            # pricing by a weight-gradient share that solver/bounds/layouts.py does not read
            and not rules_for(inst.job.framework, inst.job.optimizer).zero_bubble)


# Above this many tp choices of the stage family across groups (every subset's product of its
# groups' tp values; the bundled three-type file has 112, four types 608, eight 86,000), the
# stage family's layouts across groups are set up as the search reaches them, a stage family
# (groups, cp, dp) at a time (solver/bounds/stage_families.py); below it the space is counted
# whole (its count, in every result and golden, is then exact and cheap)
DEFER_TP_CHOICES = 256
# a stage family's key is its bound lowered by this much: it is computed from other floats than
# its layouts' own bounds, so a last-digit difference must not set them up late
FAMILY_MARGIN = 1e-6


def _defers_stage(inst: Instance, families, groups) -> bool:
    """Whether the search sets up the stage family's layouts across groups as it reaches them
    (DEFER_TP_CHOICES)."""
    if "stage" not in families or not inst.search.tp_per_group:
        return False
    if inst.search.idle_gpus:  # a pipeline's stage counts per group grow as a power: bounded first
        return True
    G = len(inst.cluster.groups)
    subsets = ([tuple(sorted(groups))] if groups is not None else
               [u for k in range(2, G + 1) for u in itertools.combinations(range(G), k)])
    per = [len(tp_values(inst, (g,))) for g in range(G)]
    return sum(math.prod(per[g] for g in u) for u in subsets if len(u) > 1) > DEFER_TP_CHOICES


@dataclass
class _Partials:
    """The declared space as partial layouts (solver/space.declared_partials), each bounded
    before it is listed (solver/bounds/layouts.partial_bounds_s on its representatives), with
    the space's summary read from the representatives. Where the search defers the stage
    family across groups (_defers_stage), its stage families (solver/bounds/stage_families.py)
    are bounded here and their partial layouts appended as the search opens each (open_family);
    the summary then counts the partial layouts set up."""

    partials: list
    bounds: np.ndarray
    sizes: list[int]  # outer configurations per partial layout
    summary: object
    memo: dict  # the stage floors priced so far (unpriced.floor_bounds_s's memo)
    # each stage-wise representative's own bound (layouts.partial_bounds_s's per_block): the
    # outers of its blocks are keyed by at least it when listed (_Search._list_layouts)
    block_bounds: dict = dataclasses.field(default_factory=dict)
    # the layers' terms and syncs (unpriced_memory.layer_terms, sync_terms): the stage-wise
    # representatives' syncs read them, and so does the search's bound that reads memory
    layer_memo: dict = dataclasses.field(default_factory=dict)
    ranks: list[int] = dataclasses.field(default_factory=list)  # Partial.rank of each
    families: list = dataclasses.field(default_factory=list)  # StageFamily, not yet set up
    family_bounds: list[float] = dataclasses.field(default_factory=list)
    rough: set = dataclasses.field(default_factory=set)  # the families keyed below their bound (first_key)
    lst: object = None  # the listing the families' partial layouts share (space._Listing)
    fb: FamilyBounds | None = None
    ob: object = None  # option_families.OptionBounds, where the options' families are deferred
    scenarios: tuple = ()  # scenario_weights' (idx, agg, weights)
    opened: int = 0  # stage families set up
    # of the stage-wise layouts that read their syncs (read_syncs), each representative's bound
    # per ZeRO stage and v, under representative_key with (ZeRO stage, v) appended
    sync_bounds: dict = dataclasses.field(default_factory=dict)
    synced: set = dataclasses.field(default_factory=set)  # the partial layouts that read them
    # per stage-wise partial layout set up from a stage family's tp choice, that choice's key: at
    # most the value of each of its configurations under every layer-plan combination, lowered
    # by FAMILY_MARGIN (stage_families.py: it reads what memory forces), so its outers' keys
    # are raised to it (_Search._list_layouts, _plan_nodes)
    carried: dict = dataclasses.field(default_factory=dict)

    @classmethod
    def of(cls, inst: Instance, objective: str, families, groups, deadline: float = math.inf) -> "_Partials":
        """The partial layouts listed and bounded, the deferred families keyed; a family not
        bounded by `deadline` (the search's time limit) is keyed 0, a bound of every plan, and so
        left open when the search stops at its limit (the set-up keeps to the limit: GPT-3 175B
        on 1,024 A100 with classes_per_group 2 bounded its option families for 25 s of CPU)."""
        idx, agg, weights = scenario_weights(inst, objective)
        lazy_options, defer_stage = cls.deferred(inst, families, groups)
        partials, lst, deferred = partials_and_families(inst, families, groups, defer_stage=defer_stage,
                                                        defer_options=lazy_options)
        memo: dict = {}
        per_block: dict = {}
        bounds = partial_bounds_s(inst, partials, idx, agg, weights, memo, per_block)
        sizes = [sum(n * blk.tally.outers for n, blks in part.reps for blk in blks) for part in partials]
        out = cls(partials, bounds, sizes, summarize_partials(inst, partials), memo, per_block, {},
                  [p.rank for p in partials], scenarios=(idx, agg, weights), lst=lst)
        if deferred:
            # imported here: only a search that defers families reads them (issue 33, start-up)
            from paraplan.solver import option_families
            out.fb = FamilyBounds(inst, idx, agg, weights, memo, lst.modes)
            # with the options on, the replica and mixed families are solver/option_families.py's
            mine = [d for d in deferred if lazy_options and d[2] != "stage"]
            out.families = (stage_families(inst, [d for d in deferred if d not in mine])
                            + option_families.option_families(inst, mine))
            out.ob = option_families.OptionBounds(out.fb)
            keys = [(0.0, False) if time.perf_counter() > deadline else out.first_key(f)
                    for f in range(len(out.families))]
            out.family_bounds = [lb for lb, _ in keys]
            out.rough = {f for f, (_, rough) in enumerate(keys) if rough}
        return out

    @staticmethod
    def deferred(inst: Instance, families, groups) -> tuple[bool, bool]:
        """(whether the replica and mixed families are set up under their bound, with one of the
        three layout options on (solver/option_families.py); whether the stage family's layouts
        are, _defers_stage). Neither for an MoE model: those families' bounds read dense
        layers, so its partial layouts are all listed at once, each bounded by layouts.py."""
        dense = inst.model.moe is None
        return bool(inst.search.layout_options) and dense, dense and _defers_stage(inst, families, groups)

    def first_key(self, f: int) -> tuple[float, bool]:
        """Family f's first key, and whether it is less than its key (family_key): a stage
        family's bound without its slowest stage with forced recompute where its key reads
        that (FamilyBounds.rough_bound), its key read when it comes up (_Search._open_family),
        lowered by FAMILY_MARGIN as family_key's."""
        fam = self.families[f]
        if not isinstance(fam, (StageFamily, ReplicaFamily)):
            return self.family_key(f), False
        lb, rough = self.fb.rough_bound(fam)
        return lb * (1 - FAMILY_MARGIN), rough

    def family_key(self, f: int) -> float:
        """Family f's key: its bound (solver/bounds/stage_families.py, option_families.py)
        lowered by FAMILY_MARGIN."""
        from paraplan.solver import option_families  # loaded by `of`, which set the families up
        fam = self.families[f]
        return (self.ob.family_bound(fam) if isinstance(fam, option_families.OptionFamily)
                else self.fb.family_bound(fam)) * (1 - FAMILY_MARGIN)

    def open_family(self, f: int, can_win) -> list["_Choice"]:
        """Family f's tp choices or class layouts whose bound can still win (`can_win(bound)`),
        as heap nodes keyed by their bounds (set up by set_up when they come up)."""
        from paraplan.solver import option_families  # loaded by `of`, which set the families up
        self.opened += 1
        fam, margin = self.families[f], lambda lb: can_win(lb * (1 - FAMILY_MARGIN))
        got = (self.ob.open(fam, margin) if isinstance(fam, option_families.OptionFamily)
               else self.fb.choices(fam, margin))
        return [_Choice(f, x, (lb * (1 - FAMILY_MARGIN), -1, -1)) for x, lb in got]

    def joint_reads(self, ch: "_Choice") -> bool:
        """Whether tp choice `ch` is one joint_keys reads (FamilyBounds.reads_syncs)."""
        return self.fb.reads_syncs(self.families[ch.family])

    def joint_keys(self, choices: list["_Choice"], can_win) -> list[float]:
        """The keys of tp choices `choices` (joint_reads) with their pipeline and slowest sync
        read together (FamilyBounds.joint_keys, where their bound can still win: `can_win`),
        lowered by FAMILY_MARGIN as open_family's."""
        margin = lambda lb: can_win(lb * (1 - FAMILY_MARGIN))
        by_family: dict[int, list[int]] = {}
        for k, ch in enumerate(choices):
            by_family.setdefault(ch.family, []).append(k)
        out = [0.0] * len(choices)
        for f, ks in by_family.items():
            got = self.fb.joint_keys(self.families[f], [choices[k].index for k in ks], margin)
            for k, lb in zip(ks, got.tolist()):
                out[k] = lb * (1 - FAMILY_MARGIN)
        return out

    def set_up(self, choices: list["_Choice"], can_win=lambda lb: True, ceiling_s: float = math.inf) -> list:
        """The partial layouts of `choices`, each bounded (layouts.partial_bounds_s: `ceiling_s`,
        the search's bar, past which a block's bound is not raised by fill_drain) and
        appended: their heap nodes; of an option family's partial choice, its children whose
        bound can still win (`can_win(bound)`, solver/option_families.py)."""
        from paraplan.solver import option_families  # loaded by `of`, which set the families up
        inst = self.lst.inst
        new, kids, keys = [], [], []
        for ch in choices:
            fam = self.families[ch.family]
            if isinstance(fam, option_families.OptionFamily):
                nodes, parts = self.ob.expand(self.lst, ch.index, lambda lb: can_win(lb * (1 - FAMILY_MARGIN)))
                kids += [_Choice(ch.family, x, (lb * (1 - FAMILY_MARGIN), -1, -1)) for x, lb in nodes]
                new += parts
                continue
            if isinstance(fam, ReplicaFamily):
                new.append(replica_partial(self.lst, "replica", fam.used, dict.fromkeys(fam.used, fam.tp), fam.cp,
                                           ch.index, self.fb.replica_at(fam, ch.index), fam.at))
                continue
            tpg = self.fb.tpg_at(fam, ch.index)
            cps = cp_values(inst, fam.used, tpg)
            dps = stage_replicas(inst, tpg, fam.used, fam.cp) if fam.cp in cps else []
            if fam.dp in dps:
                rank = partial_rank(*fam.at, ch.index, cps.index(fam.cp), dps.index(fam.dp))
                new.append(stage_partial(self.lst, fam.used, tpg, fam.cp, fam.dp, rank))
                keys.append((len(new) - 1, ch.key[0]))
        if not new:
            return kids
        start = len(self.partials)
        per_block: dict = {}
        bounds = partial_bounds_s(inst, new, *self.scenarios, self.memo, per_block, ceiling_s=ceiling_s)
        for k, lb in keys:  # each at least its choice's key (`carried`)
            self.carried[start + k] = lb
            bounds[k] = max(bounds[k], lb)
        self.block_bounds.update({(start + k[0], *k[1:]): lb for k, lb in per_block.items()})
        self.partials += new
        self.bounds = np.concatenate([self.bounds, bounds])
        self.sizes += [sum(n * blk.tally.outers for n, blks in p.reps for blk in blks) for p in new]
        self.ranks += [p.rank for p in new]
        return kids + [_Partial(start + k, (lb * (1 - PARTIAL_MARGIN), -1, -1), self.sizes[start + k])
                       for k, lb in enumerate(bounds.tolist()) if math.isfinite(lb)]

    def read_syncs(self, inst: Instance, indices: list[int], ceiling_s: float = math.inf) -> list[float]:
        """The bounds of stage-wise partial layouts `indices` raised by their syncs
        (layouts.partial_bounds_s with the layer memo), read as the search pops them; each
        representative's bound per ZeRO stage and v kept in sync_bounds. `ceiling_s`: the
        search's bar (partial_bounds_s). An MoE model's layouts read no syncs (layouts.py):
        -inf each, none kept."""
        if inst.model.moe is not None:
            return [-math.inf] * len(indices)
        per_block: dict = {}
        bounds = partial_bounds_s(inst, [self.partials[i] for i in indices], *self.scenarios, self.memo, per_block,
                                  self.layer_memo, ceiling_s)
        self.sync_bounds.update({(indices[k[0]], *k[1:]): lb for k, lb in per_block.items() if len(k) > 4})
        self.synced.update(indices)
        return bounds.tolist()

    def counted(self):
        """The space's summary as far as it is set up (every partial layout but the stage
        families never opened)."""
        return summarize_partials(self.lst.inst, self.partials) if self.families else self.summary


@dataclass
class _Partial(_Node):
    """A partial layout not yet listed, keyed by its bound (_Partials), which is at most every one
    of its configurations' bound before pricing, so at most their keys; or, where a stage-wise
    layout's bound reads its pipeline's slowest stage and sum together (solver/bounds/
    fill_drain.py), at most their values, lowered by fill_drain.TIE_MARGIN (1e-6): a layout
    holding a plan that ties the incumbent is still listed, and each plan keeps its own key.
    A stage-wise layout's key reads no sync; popped, it may read them (tighten)."""

    index: int
    key: tuple[float, int, int]
    weight: int  # outer configurations it stands for

    @staticmethod
    def tighten(s: _Search, got: list[_Partial]) -> list[float]:
        """The bounds of partial layouts `got` read with their syncs as they are popped,
        lowered by PARTIAL_MARGIN as their keys are (-inf where none is read). A stage-wise
        layout through several groups reads its own (_Partials.read_syncs, per ZeRO stage and
        v: a bound of every configuration's value lowered by fill_drain.TIE_MARGIN); listed,
        each of its configurations is left unpriced where its block's bound for its ZeRO stage
        and v cannot win (sync_bound, _Search._price_chunk). Keyed by them, the layout holding
        the optimum of 2 GPU types x 4 nodes was priced after 4 others that were then solved
        exactly, for want of that incumbent (0.24 -> 0.5 s of CPU), so the keys stay those read
        without syncs. Through one group that bound reads no fill-drain term
        (layouts._slot_terms) and is at most the bound that reads memory (unpriced_memory: tau*,
        sigma*, delta* of the same floors and syncs, with memory), which each of its
        configurations gets before it is priced: not read there (GPT-3 175B on 1,024 A100 would
        read 42 layouts, 0.3 s of the search's 0.9 s of CPU; issue 33). With per-operator
        partitions those syncs are the least over Megatron's layer and every layer plan, and a
        layout of another family (one class layout) reads its configurations' least sync with
        layer plans (plan_sync.raised_partial_bounds: a bound of every combination's value)."""
        lazy = s.lazy
        read = {}
        others = [p.index for p in got if lazy.partials[p.index].dp is None] if s.partitions else []
        if others:
            read.update(zip(others, plan_sync.raised_partial_bounds(
                s.inst, [lazy.partials[i] for i in others], [lazy.bounds[i] for i in others], s.idx, s.agg,
                s.weights, s.sync_memo, s.won.bar()[0] * (1 + REL_TOL)).tolist()))
        fresh = [p.index for p in got if lazy.partials[p.index].dp is not None and len(lazy.partials[p.index].used) > 1]
        if fresh:
            read.update(zip(fresh, lazy.read_syncs(s.inst, fresh, s.won.bar()[0] * (1 + REL_TOL))))
        return [read.get(p.index, -math.inf) * (1 - PARTIAL_MARGIN) for p in got]


@dataclass
class _Choice(_Node):
    """A tp choice (stage family) or class layout (replica family) of an opened family, not
    yet set up, keyed by its own bound (solver/bounds/stage_families.py), at most its partial
    layout's."""

    family: int
    index: int
    key: tuple[float, int, int]
    weight: int = 0
    synced: bool = False  # keyed by its pipeline and sync read together (_Partials.joint_keys)


# tp choices or class layouts set up at once (the heap's next, while they can win): one call of
# the partial layouts' bounds for all
CHOICES_AT_ONCE = 32


@dataclass
class _Family(_Node):
    """A stage family not yet set up (_Partials.open_family), keyed by its bound, which is at
    most every one of its partial layouts' bound (solver/bounds/stage_families.py); its
    configurations are not counted before it is set up."""

    index: int
    key: tuple[float, int, int]
    weight: int = 0
    late: bool = False  # not bounded by the floors' deadline: keyed 0 (_Search._key_late)
    rough: bool = False  # keyed below its bound (_Partials.first_key): read when it comes up

    def tighten(self, s: _Search) -> float:
        """Its key, read now (where it was late)."""
        return s.lazy.family_key(self.index)


def _count_set_up(res: SolveResult, lazy: _Partials, listed: int, partials_listed: int, pipelines: int) -> None:
    """The result's space as far as the search set it up (_Partials.counted; and the
    asymmetric pipelines listed), logged."""
    if lazy.families:
        counted = lazy.counted()
        res.outer_configs, res.plans_total = counted.outer_configs + pipelines, counted.plans_total
        res.log.append(f"{lazy.opened} of {len(lazy.families)} stage families (groups, cp, dp) across"
                       " groups set up: the space's count is of the partial layouts set up")
    res.log.append(f"{listed} of {res.outer_configs - pipelines} outer configs listed,"
                   f" {partials_listed} of {len(lazy.partials)} partial layouts"
                   + (f"; {pipelines} asymmetric pipelines" if pipelines else ""))


def _search_over(inst: Instance, outers: list, summary, backend: str, time_limit_s: float,
                 objective: str, families: tuple[str, ...], uniform: bool, warm_plan: Plan | None, progress,
                 threads: int, resimulate: bool, winners: int, within_pct: float | None, t0: float,
                 lazy: _Partials | None, ceiling_s: float | None = None) -> SolveResult:
    """search over `outers` (declared_outers), the space's `summary`; with `lazy`, `outers`
    grows as the search lists each partial layout, and `rank` gives each its key's index.
    The branch and bound itself is _Search: set up its first nodes, run it best first, then
    read the result off its incumbent and open bounds."""
    s = _Search(inst, outers, summary, backend, time_limit_s, objective, uniform, progress, threads,
                winners, within_pct, t0, lazy, ceiling_s)
    s.set_up(warm_plan)
    s.run()
    return s.finish(families, resimulate)


class _Search:
    """One branch and bound of _search_over: the incumbent (`won`), the heap of open nodes, the
    bounds left open and the result's counters (`res`), shared by the steps below, one method
    per kind of node, so that each step reads on its own. The order of the steps, their floats
    and the tie rule are those of the single function it was split from (issue 32)."""

    def __init__(self, inst: Instance, outers: list, summary, backend: str, time_limit_s: float,
                 objective: str, uniform: bool, progress, threads: int, winners: int,
                 within_pct: float | None, t0: float, lazy: _Partials | None, ceiling_s: float | None):
        self.inst, self.outers, self.summary, self.backend = inst, outers, summary, backend
        self.time_limit_s, self.objective, self.uniform, self.progress = time_limit_s, objective, uniform, progress
        self.threads, self.within_pct, self.t0, self.lazy = threads, within_pct, t0, lazy
        self.idx, self.agg, self.weights = scenario_weights(inst, objective)
        self.res = SolveResult(status=TIMEOUT, plan=None, objective=objective, objective_s=None,
                               per_scenario_s=None, scenario_names=tuple(inst.scenarios[i].name for i in self.idx),
                               bound_s=None, solve_time_s=0.0, backend=backend,
                               outer_configs=summary.outer_configs, plans_total=summary.plans_total)
        self.won = Winners(winners, within_pct, ceiling_s=float("inf") if ceiling_s is None else ceiling_s)
        # each outer's index in its keys: its place in declared_outers, or with `lazy` a rank in the
        # same order (RANK_STRIDE), appended as the partial layouts are listed
        self.rank: range | list[int] = range(len(outers)) if lazy is None else []
        self.floor_by = t0 + max(time_limit_s, FLOOR_AT_LEAST_S)
        self.placements: dict = {}  # shared by the configurations (problem_for)
        self.plan_memo: dict = {}  # the layer-plan classes' builds (class_partitions.OuterChoices._class_key)
        self.ahead: dict = {}  # per outer, its _optimistic_choices read ahead (_read_ahead); None: read
        self.waiting: list = []  # heap of (key, outer) of the nodes split by their syncs (_read_ahead)
        self.partitions = partitions_enabled(inst)
        self.floor_memo = lazy.memo if lazy is not None else {}  # the stage floors (unpriced.floor_bounds_s's memo)
        self.floor = []  # each outer's bound before pricing (_first_nodes, list_partials)
        # of the outers listed from layouts that read their syncs (_Partial.tighten), the bound of
        # their block's configurations of their ZeRO stage and v: at most the outer's value
        # lowered by fill_drain.TIE_MARGIN, read only to prune (_price_chunk), not as a key; or
        # the bound of every order of their middle groups (bounds/order_free.py), where larger
        self.sync_bound: dict[int, float] = {}
        self.listed_partials = 0
        # outers of the partial layouts listed that _list_layouts proved unable to win before
        # listing them: counted pruned by bound, and listed with their layouts (_count_set_up)
        self.unlisted = 0
        self.chunk_size = FIRST_PRICE_CHUNK  # gather's, growing to PRICE_CHUNK
        self.layer_memo = lazy.layer_memo if lazy is not None else {}  # the layers' terms (unpriced_memory)
        # the layer plans' least syncs (bounds/plan_sync.py, under keys of its own), shared with the
        # stage-wise layouts' syncs (layouts._least_syncs), which read the same
        self.sync_memo = self.layer_memo
        # the stage-wise layouts' bound of every order of their middle groups (_list_layouts)
        self.order_free = OrderFree(inst, (self.idx, self.agg, self.weights), self.floor_memo, self.layer_memo,
                                    on=not self.partitions)
        self.order = itertools.count()  # equal keys (a node and its first combination) pop node first
        self.heap: list[tuple] = []
        self.held: list[tuple] = []  # heap entries held until a plan is in hand (_hold_options)
        self.open_bounds: list[float] = []
        self.families_open = False  # families left open at the time limit (_time_left)
        self.batch: list[tuple] = []  # (candidate, hint, cutoff) to solve at once (threads > 1)
        self.pool = None
        self.first_plan_by = 0.0  # set as the search starts (run)
        self.pipelines = 0  # asymmetric pipelines listed (_pipelines)
        self.lone_before: dict = {}  # per twins.twin_key, its one-class configuration's bound (_twins_may_win)

    # -- setting up ---------------------------------------------------------------------------

    def _plan_groups(self) -> list[_PlanNode]:
        """Layer plans per class and group (solver/class_partitions.py), set up in the order of
        a bound of all of an outer's combinations read before pricing, in chunks of PLANS_CHUNK."""
        plan_floor = self._floors(range(len(self.outers)), layer_plans=True)
        by_floor = np.argsort(plan_floor, kind="stable")
        return [_PlanNode(js, (float(plan_floor[js[0]]), -1, -1), sum(self._plan_count(j) for j in js),
                          late=bool(plan_floor[js[0]] == 0.0))
                for js in (by_floor[a:a + PLANS_CHUNK].tolist() for a in range(0, len(self.outers), PLANS_CHUNK))]

    def set_up(self, warm_plan: Plan | None) -> None:
        """The running plan as a first incumbent (replanning), then the heap's first nodes."""
        plan_groups = self._plan_groups() if self.partitions else []
        warm_outer = warm_plan.outer if warm_plan is not None and not dualpipe_job(self.inst) else None
        if (warm_outer is not None and warm_outer in self.outers
                and not any(k.partitions for k in warm_plan.classes)):
            self._warm_start(warm_plan, warm_outer)
        unpriced = self._pipelines() + self._first_nodes()  # a refused pipeline space before the floors
        self.res.log.append(f"{self.summary.outer_configs} outer configs;"
                            f" setup {time.perf_counter() - self.t0:.2f} s")
        # best first: candidates, and outers' layer-plan combinations keyed by their optimistic
        # bound, expanded into candidates only when they can still win (solver/class_partitions.py)
        self.heap = [(c.key, next(self.order), c) for c in unpriced + plan_groups]
        self._hold_options()
        heapq.heapify(self.heap)

    def _hold_options(self) -> None:
        """Without a plan in hand, the option families (solver/option_families.py) wait until
        the rest of the heap yields one (issue 33). Their bounds relax every class to its
        group's floors, so on one GPU type they sit below every one-class layout's, and best
        first would open them with nothing to prune against: Llama 3 8B on 256 H100 with
        classes_per_group 2 set up every leaf and priced no plan in 30 s. Held, they are pushed
        back (_release_options) once nothing else on the heap can win (the rest of the space
        proved against the bar, so the families are read against its optimum: on GPT-3 175B /
        1,024 A100 with classes_per_group 2, released at the first bar, 21.57 s, their layouts
        priced 400 configurations, 126 once held to the rest's optimum, 19.47 s), the heap holds
        nothing else, or the time is up; the order of the search changes, not its answer: each
        node is still pruned only by its own bound against the bar, and ties go by key
        (Winners.beats)."""
        if self.lazy is None or self.lazy.ob is None or self.won.in_hand:
            return
        from paraplan.solver.option_families import OptionFamily  # loaded by _Partials.of
        fams = self.lazy.families
        held = [x for x in self.heap if isinstance(x[2], _Family) and isinstance(fams[x[2].index], OptionFamily)]
        if held and len(held) < len(self.heap):
            ids = {x[1] for x in held}
            self.held, self.heap = held, [x for x in self.heap if x[1] not in ids]

    def _release_options(self) -> None:
        """The held option families back onto the heap (_hold_options)."""
        for x in self.held:
            heapq.heappush(self.heap, x)
        self.held = []

    def _warm_start(self, warm_plan: Plan, warm_outer) -> None:
        """Replanning: the running plan is a feasible incumbent, which prunes from the start."""
        for cand in self.price([self.outers.index(warm_outer)]):
            wm = [k.num_micro_batches for k in warm_plan.classes]
            wn = [k.layers_per_stage for k in warm_plan.classes]
            wr = [k.full_recompute_layers for k in warm_plan.classes]
            if cand.problem.fits(wn, wr):
                val, _ = cand.problem.evaluate(wm, wn, wr)
                self.won.offer(val, cand.key, (warm_outer, wm, wn, wr, ()))

    def _first_nodes(self) -> list:
        """The heap's first nodes. Configurations are priced in the order of a bound read before
        pricing (solver/bounds/unpriced.py), in chunks: the search stops pricing where that bound
        reaches the incumbent (past the limit the rest are bounded by 0: priced in the order
        listed, only for a first plan). With `lazy`, the partial layouts and stage families
        instead, listed as the search reaches them (list_partials)."""
        lazy = self.lazy
        if lazy is None:
            self.floor = self._floors(range(len(self.outers)))
            by_floor = np.argsort(self.floor, kind="stable")
            return [_Unpriced(js, (float(self.floor[js[0]]), -1, -1), late=bool(self.floor[js[0]] == 0.0))
                    for js in _growing_chunks(by_floor.tolist(), FIRST_PRICE_CHUNK, PRICE_CHUNK)]
        self.floor = []
        nodes = [_Partial(i, (lb * (1 - PARTIAL_MARGIN), -1, -1), lazy.sizes[i])
                 for i, lb in enumerate(lazy.bounds.tolist()) if math.isfinite(lb)]
        # a family keyed 0 was not bounded by the floors' deadline (_Partials.of): late
        nodes += [_Family(f, (lb, -1, -1), late=lb == 0.0, rough=f in lazy.rough)
                  for f, lb in enumerate(lazy.family_bounds) if math.isfinite(lb)]
        return nodes

    def _pipelines(self) -> list[_Pipeline]:
        """With search.asymmetric_pipelines (the nominal network only), every asymmetric
        pipeline of the declared space as a node, priced and keyed by its bound
        (solver/asymmetric_search.py); counted among the outer configurations."""
        inst = self.inst
        if not inst.search.asymmetric_pipelines:
            return []
        if self.objective != "nominal":
            raise InstanceError(inst.source, "search.asymmetric_pipelines", f"is planned on the nominal"
                                f" network only, not for the {self.objective} objective",
                                "plan the nominal objective, or remove asymmetric_pipelines")
        # imported here: only this option reads the asymmetric pipelines' pricing (issue 33, start-up)
        from paraplan.solver import asymmetric_search
        got = asymmetric_search.priced(inst)
        self.pipelines = len(got)
        self.res.outer_configs += len(got)
        self.won.by_outer = True
        return [_Pipeline(p, (p.bound_s, math.inf, i)) for i, p in enumerate(got)]

    # -- shared steps -------------------------------------------------------------------------

    def _floors(self, js, layer_plans: bool = False, deadline: float | None = None) -> np.ndarray:
        """The bounds before pricing of outers `js` (unpriced.floor_bounds_s; with `layer_plans`,
        of all of each one's layer-plan combinations, lowered by FLOAT_SAFETY: at most the
        combinations' own bounds, class_partitions); those not reached by `deadline` (the floors'
        own by default) are 0, and their nodes late."""
        lb = floor_bounds_s(self.inst, [self.outers[j] for j in js], self.idx, self.agg, self.weights, self.uniform,
                            layer_plans=layer_plans, deadline=self.floor_by if deadline is None else deadline,
                            memo=self.floor_memo)
        return lb * (1 - one_class.FLOAT_SAFETY) if layer_plans else lb

    def _key_late(self) -> None:
        """Where the search stops: the late nodes at the heap's top keyed, a batch at a time (as
        a listing would have keyed them), for at most LATE_KEYS_S, until the top is keyed: the
        least key, which bounds what is left open, is then a bound read, not 0 (issue 33)."""
        until = time.perf_counter() + LATE_KEYS_S
        while self.heap and self.heap[0][2].late and time.perf_counter() < until:
            batch, n = [], 0
            while self.heap and self.heap[0][2].late and n < PARTIAL_OUTERS_AT_ONCE:
                batch.append(heapq.heappop(self.heap)[2])
                n += len(batch[-1].outers) if isinstance(batch[-1], (_Unpriced, _PlanNode)) else 1
            self._push(self._keyed(batch, until))

    def _keyed(self, nodes: list, until: float) -> list:
        """Late nodes `nodes` with their keys read: each unpriced node's the least of its
        outers' bounds before pricing, at least its key so far (the layout's or tp choice's it
        was raised to when listed), each family's its bound; a node of an outer not reached by
        `until` stays late."""
        for kind in (_Unpriced, _PlanNode):
            us = [x for x in nodes if isinstance(x, kind)]
            js = [j for x in us for j in x.outers]
            floors = dict(zip(js, self._floors(js, kind is _PlanNode, until).tolist())) if js else {}
            for x in us:
                lb = min(floors[j] for j in x.outers)
                x.key, x.late = (max(x.key[0], lb), -1, -1), lb == 0.0
        for x in nodes:
            if isinstance(x, _Family) and time.perf_counter() < until:
                x.key, x.late, x.rough = (x.tighten(self), -1, -1), False, False
        return nodes

    def can_win(self, key, lb: float | None = None) -> bool:
        """Whether a candidate keyed `key` (bound key[0], or a better bound `lb`) can still win."""
        return self.won.beats(key[0] if lb is None else lb, key)

    def _push(self, nodes) -> None:
        """Nodes onto the heap, by key; equal keys pop in the order pushed."""
        for node in nodes:
            heapq.heappush(self.heap, (node.key, next(self.order), node))

    def _heap_weight(self) -> int:
        """The candidates (or combinations, configurations) the heap's nodes stand for."""
        return sum(x.weight for _, _, x in self.heap)

    def price(self, js) -> list[_Candidate]:
        """Outers `js` priced (problems_for), keyed by their bounds (solver/bounds/batched.py:
        batched, the numbers of one at a time), in key order; memory-infeasible ones counted."""
        cands = []
        for j, p in zip(js, problems_for(self.inst, [self.outers[j] for j in js], self.objective, self.placements)):
            if p is None:
                self.res.pruned_by_memory += 1
            else:
                cands.append(_Candidate(self.outers[j], p, (0.0, self.rank[j], 0), self.uniform))
        if dualpipe_job(self.inst):  # formulations/dualpipe.DualPipeProblem.lower_bound_s
            bounds = [c.problem.lower_bound_s() for c in cands]
        else:
            bounds = lower_bounds_s([c.problem for c in cands], lambda j: cands[j].mvecs, self.uniform)
        for cand, lb in zip(cands, bounds):
            cand.key = (lb, cand.key[1], 0)
        return sorted(cands, key=lambda x: x.key)

    def probe(self, cands) -> None:
        """Quick incumbents, in bound order, only where they could still win: they prune the rest."""
        for cand in cands[:INCUMBENT_PROBES]:
            if cand.key[0] >= self.won.bar()[0] or _is_dualpipe(cand.problem):
                break
            inc = incumbent(cand.problem, cand.mvecs, self.uniform)
            if inc is not None:
                self.won.offer(inc[0], cand.key, (cand.outer, *inc[1:], cand.partitions))

    # -- the loop -----------------------------------------------------------------------------

    def run(self) -> None:
        """Pop nodes best first until none is left, none can win, or the time is up; each node
        is listed, priced, expanded or solved by its own step (_visit)."""
        if self.threads > 1:  # imported here: concurrent.futures loads logging and threading, 0.01 s of
            # every plan's start-up (issue 33), for --threads only
            from concurrent.futures import ThreadPoolExecutor
            self.pool = ThreadPoolExecutor(max_workers=self.threads)
        self.first_plan_by = max(self.t0 + self.time_limit_s, time.perf_counter()) + FIRST_PLAN_ALLOWANCE_S
        try:
            while self.heap or self.held:
                if self.held and (not self.heap or not self.can_win(self.heap[0][0])):
                    self._release_options()
                key, _, cand = heapq.heappop(self.heap)
                remaining = self._time_left(key, cand)
                if remaining is None:
                    break
                self._visit(key, cand, remaining)
            self.flush()
        finally:
            if self.pool:
                self.pool.shutdown()

    def _time_left(self, key, cand) -> float | None:
        """The time left to visit `cand` (popped with `key`), or None where the search stops
        here: nothing left can win (the rest pruned by bound), or the limit is reached (the rest
        left open, their keys the bound)."""
        if self.progress:
            self.progress(search_status(self.res, self.won.bar()[0], [key[0], *self.open_bounds]))
        if not isinstance(cand, _Candidate) or self.uniform or not self.can_win(key):
            self.flush()  # what follows reads the incumbent: settle the batch first
        if not self.can_win(key):
            self.res.pruned_by_bound += self._heap_weight() + cand.weight
            return None
        now = time.perf_counter()
        remaining = self.time_limit_s - (now - self.t0)
        if remaining <= 0 and not self._first_plan_pending(cand, now):
            self.flush()
            self._release_options()  # left open as the rest
            self._push([cand])
            self._key_late()
            self.open_bounds.extend(k[0] for k, _, _ in self.heap)
            self.res.unresolved += self._heap_weight()
            # a family not set up stands for configurations not counted (weight 0): left open,
            # it still leaves the space unproved
            self.families_open = any(isinstance(x, (_Family, _Choice)) for _, _, x in self.heap)
            return None
        return remaining

    def _first_plan_pending(self, cand, now: float) -> bool:
        """Without an incumbent, pricing goes on past the limit (or past the setup, where that
        took longer) for FIRST_PLAN_ALLOWANCE_S at most, until one is found (probe)."""
        return not self.won.in_hand and not isinstance(cand, (_Candidate, _LayerPlans)) and now < self.first_plan_by

    def _visit(self, key, cand, remaining: float) -> None:
        """One node's step, by its kind."""
        if isinstance(cand, _Pipeline):
            self._solve_pipeline(cand)
        elif isinstance(cand, (_Family, _Choice)):
            self._push(self._open_family(cand))
        elif isinstance(cand, _Partial):
            self.list_partials(cand)
        elif isinstance(cand, _PlanNode):
            self._push_layer_plans(cand)
        elif isinstance(cand, _Unpriced):
            self._price_chunk(cand)
        elif isinstance(cand, _LayerPlans):
            new, kids = cand.expand(self.won.bar()[0], self.res, self.t0 + self.time_limit_s)
            self.probe(new)
            self._push(new + kids)
        elif self.uniform:
            self._settle_uniform(cand)
        else:
            self._solve(key, cand, remaining)

    def _push_layer_plans(self, cand: _PlanNode) -> None:
        """Each outer's layer-plan combinations as one node keyed by their optimistic bound
        (_layer_plans), so that none is listed before it can win; first, where the node's
        least sync raises its key (_PlanNode.tighten), each of its outers pushed again as a
        node of its own keyed by that raised bound, or counted pruned where it cannot win."""
        if not cand.synced:
            keys = cand.tighten(self)
            if any(lb > cand.key[0] for lb in keys):
                for i, lb in zip(cand.outers, keys):
                    kept = self._kept([_PlanNode([i], (lb, -1, -1), self._plan_count(i), synced=True)])
                    self._push(kept)
                    if kept:
                        heapq.heappush(self.waiting, (kept[0].key, i))
                return
        self._read_ahead(cand.outers)
        for i in cand.outers:
            lp = _layer_plans(self.inst, self.outers[i], self.rank[i], self.objective, self.placements, self.uniform,
                              self.res, self.plan_memo, self.ahead[i])
            self.ahead[i] = None  # read: a node of it again sets it up afresh
            if lp is not None:
                self._push([lp])

    def _read_ahead(self, outers: list[int]) -> None:
        """The layer-plan choices of `outers` (expanded now) and of the next READ_AHEAD nodes
        split by their syncs (in the order of their keys, as they come up, while they can win)
        set up with their optimistic builds, and their classes' optimistic terms read in one
        batch (class_partitions.read_optimistic_terms; one at a time, about 3,000 reads of one
        row each on the three-type, two-site row), kept in `ahead` for _layer_plans: the heap
        and every key are as without them. A node pruned before it comes up leaves its builds
        unread (the bar fell in between)."""
        from paraplan.solver import class_partitions  # a search over layer plans only
        new = [i for i in outers if i not in self.ahead]
        while new and self.waiting and len(new) < READ_AHEAD:
            key, j = heapq.heappop(self.waiting)
            if self.can_win(key) and j not in self.ahead and j not in new:
                new.append(j)
        for i in new:
            self.ahead[i] = _optimistic_choices(self.inst, self.outers[i], self.objective, self.placements,
                                                self.uniform, self.plan_memo)
        class_partitions.read_optimistic_terms([self.ahead[i][0] for i in new if self.ahead[i][1]])
        for i in outers:  # (one set up before and read since: afresh)
            self.ahead[i] = self.ahead[i] or _optimistic_choices(self.inst, self.outers[i], self.objective,
                                                                 self.placements, self.uniform, self.plan_memo)

    # -- listing partial layouts (lazy) ------------------------------------------------------

    def list_partials(self, first: _Partial) -> None:
        """List `first` and the partial layouts next in the heap (PARTIAL_OUTERS_AT_ONCE
        configurations or a little more, while they can still win), bound their outers before
        pricing and push each, keyed by that bound (gather prices them in chunks)."""
        got, n = [first], first.weight
        while (self.heap and n < PARTIAL_OUTERS_AT_ONCE and isinstance(self.heap[0][2], _Partial)
               and self.can_win(self.heap[0][0])):
            got.append(heapq.heappop(self.heap)[2])
            n += got[-1].weight
        # less those their syncs prove unable to win (_Partial.tighten), never listed (the bar
        # only falls); the keys stay, so the search's order is unchanged
        got = self._kept(got, [(lb, -1, -1) for lb in _Partial.tighten(self, got)])
        if got:
            self._list_layouts(got)

    def _open_family(self, first: _Family | _Choice) -> list:
        """A stage family opened into its choices, or `first` and the choices next in the heap
        (CHOICES_AT_ONCE, while they can win) set up into partial layouts: the nodes to push."""
        lazy, bound_wins = self.lazy, (lambda lb: self.can_win((lb, -1, -1)))
        if isinstance(first, _Family):
            if first.rough:  # keyed below its bound (_Partials.first_key): pushed back where that raises it
                was, first.rough = first.key[0], False
                first.key = (max(was, first.tighten(self)), -1, -1)
                if first.key[0] > was:
                    return self._kept([first])
            return lazy.open_family(first.index, bound_wins)
        got = [first]
        while (self.heap and len(got) < CHOICES_AT_ONCE and isinstance(self.heap[0][2], _Choice)
               and self.can_win(self.heap[0][0])):
            got.append(heapq.heappop(self.heap)[2])
        # a stage family's tp choice popped against a bar is keyed by its pipeline and sync read
        # together (stage_families.FamilyBounds.joint_keys, ~2 ms a choice: read as it comes up,
        # not for every choice of an opened family), and pushed back where that raises its key
        barred = not self.can_win((math.inf, -1, -1))  # without a bar it prunes nothing
        fresh = [ch for ch in got if not ch.synced and lazy.joint_reads(ch)] if barred else []
        raised = []
        for ch, lb in zip(fresh, lazy.joint_keys(fresh, bound_wins)):
            ch.synced = True
            if lb > ch.key[0]:
                ch.key = (lb, -1, -1)
                raised.append(ch)
        back = {id(ch) for ch in raised}
        got = [ch for ch in got if id(ch) not in back]
        return self._dive(self._kept(raised)) + (lazy.set_up(got, bound_wins, self.won.bar()[0] * (1 + REL_TOL))
                                                 if got else [])

    def _dive(self, raised: list[_Choice]) -> list[_Choice]:
        """Of tp choices `raised`, whose joint keys pushed them back (_open_family), the one
        of least key set up now, its partial layouts listed and their DIVE_CHOICE_OUTERS
        configurations of least own bound priced and probed (_list_layouts' dive), for an
        incumbent; the others, to push back. The joint key is the tightest a choice reads
        before pricing, so a choice it raises least is where a good plan is likely; best
        first reaches it only after every node of a looser key below it: on the four-type
        growth row the choice holding the optimum (7.190 s at p90) was keyed 6.868 s, raised
        to 7.071 s, and set up after 390 pops, the incumbent 9.188 s until then (126
        configurations priced; 106 before the joint keys; 84 with the dive, which finds the
        optimum at once). On 8 types x 8 nodes the choice of the best plan known (2.21 s) was
        raised from 2.03 to 2.15 s, past the least key 30 s of CPU reach (2.10 s); dived, it
        gave 2.208 s after 16 s of CPU. The order of the search changes, not its answer nor
        its proof: every node, the choice's layouts and configurations included, keeps its own
        key and is pruned only by it (the bar only falls), and each plan offered is priced and
        valued as the search's own (probe)."""
        if not raised:
            return raised
        first = min(raised, key=lambda ch: ch.key)
        nodes = self.lazy.set_up([first], lambda lb: self.can_win((lb, -1, -1)), self.won.bar()[0] * (1 + REL_TOL))
        got = self._kept(nodes, [(lb, -1, -1) for lb in _Partial.tighten(self, nodes)])
        if got:
            self._list_layouts(got, dive=True)
        return [ch for ch in raised if ch is not first]

    def _list_layouts(self, got: list[_Partial], dive: bool = False) -> None:
        """The outers of partial layouts `got` appended (with their ranks), bounded before
        pricing, each pushed as one unpriced node keyed by that bound. Those that cannot beat
        the bar with any key now never will (the bar only falls) and are counted pruned, not
        pushed: a stage-wise block whose representative's bound (or, read with its syncs, whose
        bound for an outer's ZeRO stage and v) lies past the bar's tie band is not listed at all,
        an outer whose own key cannot win not pushed (as _price_chunk would prune it when
        popped); each listed outer keeps the rank of its place in its layout. With layer
        plans, and for a dived tp choice (`dive`, _dive), a few are priced now instead (below)."""
        lazy, outers = self.lazy, self.outers
        self.listed_partials += len(got)
        start = len(outers)
        raised: list[float] = []  # per outer, its representative's bound (-inf: none read)
        carried: list[float] = []  # per outer, its tp choice's key (_Partials.carried; -inf: none)
        # past this a bound cannot win by any key (Winners.beats); with layer plans every outer
        # is pushed (its combinations are nodes of their own, _plan_nodes)
        never = math.inf if self.partitions else self.won.bar()[0] * (1 + REL_TOL)
        for part, blks in zip(got, self._read_order_free(got, never)):
            partial = lazy.partials[part.index]
            at = lazy.ranks[part.index] * RANK_STRIDE  # the rank of the layout's next outer
            for blk in blks:
                if partial.dp is None:
                    listed = blk.outers()
                    outers.extend(listed)
                    raised += [-math.inf] * len(listed)
                    carried += [-math.inf] * len(listed)
                    self.rank.extend(range(at, at + len(listed)))
                    at += len(listed)
                    continue
                key = representative_key(part.index, blk)
                lb = max(lazy.block_bounds.get(key, -math.inf), lazy.carried.get(part.index, -math.inf))
                if lb > never:
                    self.unlisted += blk.tally.outers
                    self.res.pruned_by_bound += blk.tally.outers
                    at += blk.tally.outers
                    continue
                synced = part.index in lazy.synced
                # and the bound of every order of its middle groups (bounds/order_free.py), kept
                # with the syncs' to prune by when priced (the bar falls meanwhile)
                free = self.order_free.of_block(key, blk, never)
                for spec in blk.specs():
                    sb = lazy.sync_bounds.get((*key, spec[1], spec[2]), -math.inf) if synced else -math.inf
                    if free:
                        sb = max(sb, free.get(spec, -math.inf))
                    if sb > never:
                        self.unlisted += 1
                        self.res.pruned_by_bound += 1
                    else:
                        if sb > -math.inf:
                            self.sync_bound[len(outers)] = sb
                        outers.append(blk.outer(*spec))
                        raised.append(lb)
                        carried.append(lazy.carried.get(part.index, -math.inf))
                        self.rank.append(at)
                    at += 1
        js = list(range(start, len(outers)))
        # each outer's bound before pricing, raised to its representative's (stage_bound_rows:
        # its pipeline's slowest stage and sum read together, at most its value lowered by
        # fill_drain.TIE_MARGIN, so a plan that ties the incumbent is still priced)
        floors = self._floors(js)
        late = (floors == 0.0).tolist()  # not reached by the floors' deadline
        self.floor.extend(np.maximum(floors, np.asarray(raised, float)).tolist())
        order = []
        for k in np.argsort(np.asarray(self.floor[start:]), kind="stable").tolist():
            j = js[k]
            if self.floor[j] > never or self.sync_bound.get(j, -math.inf) > never:
                self.res.pruned_by_bound += 1
            else:
                order.append(j)
        # With layer plans, the DIVE_OUTERS all-Megatron configurations of least bound that can
        # still win are priced and probed now (the dive), for an incumbent (issue 33), not
        # pushed: each outer's layer-plan node (_plan_nodes) is keyed at or below its own, and
        # thousands of them (32 A100 + 32 H100: some 6,500 in 60 s of CPU) come before the
        # configurations' own plans, so the incumbent stayed at a quick one of 16.19 s (17.23 s
        # at p90) while the layout that holds the no-partition optimum (11.84 s at p90, its
        # quick incumbent its optimum) sat listed, unpriced. Each is priced as its own chunk
        # would price it; the order of the search changes, not its answer: every node is still
        # pruned only by its own bound.
        # A dived tp choice (_dive): its configurations' keys are all raised to the choice's
        # key, which does not tell them apart, so they are taken by their own bounds before
        # pricing, and priced as a chunk would price them (_price_outers)
        if self.partitions:
            pick = order
        else:
            pick = sorted(order, key=lambda j: (float(floors[j - start]), self.floor[j])) if dive else []
        dived = [j for j in pick[:DIVE_CHOICE_OUTERS if dive else DIVE_OUTERS]
                 if self.can_win((float(self.floor[j]), self.rank[j], 0))]
        self._push(_Unpriced([j], (float(self.floor[j]), -1, -1), late=late[j - start])
                   for j in order if j not in dived)
        if self.partitions:
            self._push(self._plan_nodes(js, carried))
            if dived:
                self._price_and_probe(dived)
        elif dived:
            self._price_outers(dived)

    def _read_order_free(self, got: list[_Partial], never: float) -> list[list]:
        """The blocks of each partial layout of `got`, with B (bounds/order_free.py) of the
        stage-wise ones that _list_layouts lists (those its representative's bound leaves at
        most `never`) read in one call (OrderFree.read) before they are listed one by one."""
        lazy, wanted = self.lazy, []
        blocks = [list(lazy.partials[part.index].blocks()) for part in got]
        for part, blks in zip(got, blocks):
            if lazy.partials[part.index].dp is None:
                continue
            carried = lazy.carried.get(part.index, -math.inf)
            for blk in blks:
                key = representative_key(part.index, blk)
                if max(lazy.block_bounds.get(key, -math.inf), carried) <= never:
                    wanted.append((key, blk))
        self.order_free.read(wanted, never)
        return blocks

    def _plan_nodes(self, js: list[int], carried: list[float]) -> list[_PlanNode]:
        """Outers `js`' layer-plan combinations, one node per outer keyed by the bound of all of
        them read before pricing (floor_bounds_s with layer_plans, as _plan_groups), raised to
        `carried` (per outer, its tp choice's key, _Partials.carried), expanded
        (_push_layer_plans) only when it comes up and can still win."""
        floors = self._floors(js, layer_plans=True)
        keys = np.maximum(floors, carried).tolist()
        return [_PlanNode([j], (lb, -1, -1), n, late=f == 0.0)
                for j, lb, f in zip(js, keys, floors.tolist()) if (n := self._plan_count(j))]

    def _plan_count(self, j: int) -> int:
        """Outer j's layer-plan combinations beyond all-Megatron (class_partitions.partition_count)."""
        from paraplan.solver import class_partitions  # a search over layer plans only
        return class_partitions.partition_count(self.inst, self.outers[j]) - 1

    def synced(self, js, keys) -> list[float]:
        """`keys` of outers `js` raised by their least sync under any layer plan
        (solver/bounds/plan_sync.raised_keys: each key at most every combination's bound of its
        outer, all-Megatron's included), read with the search's scenarios and sync memo."""
        return plan_sync.raised_keys(self.inst, [self.outers[j] for j in js], keys, self.idx, self.agg, self.weights,
                                     self.sync_memo).tolist()

    def _kept(self, nodes: list, keys: list | None = None) -> list:
        """`nodes` whose key (or the key of `keys`: the node's bound tightened, as a key) can
        still win; the others counted pruned by bound (the bar only falls)."""
        out = [x for x, key in zip(nodes, keys or [x.key for x in nodes]) if self.can_win(key)]
        self.res.pruned_by_bound += sum(x.weight for x in nodes) - sum(x.weight for x in out)
        return out

    def gather(self, first: _Unpriced) -> _Unpriced:
        """`first` (one listed outer) and the listed outers next in the heap, in the order of
        their bounds before pricing, up to the chunk size, which grows from FIRST_PRICE_CHUNK
        to PRICE_CHUNK as the full listing's chunks do: the outers of every partial layout
        listed so far are priced in one order, as if listed together."""
        js = list(first.outers)
        while self.heap and len(js) < self.chunk_size and isinstance(self.heap[0][2], _Unpriced):
            js += heapq.heappop(self.heap)[2].outers
        self.chunk_size = min(2 * self.chunk_size, PRICE_CHUNK)
        return _Unpriced(js, first.key)

    # -- pricing a chunk -----------------------------------------------------------------------

    def _price_chunk(self, cand: _Unpriced) -> None:
        """Price the chunk's outers that can still win, probe them for incumbents, and push
        those a lone class's bound does not settle (_settle_alone)."""
        self._price_outers(self.gather(cand).outers if self.lazy is not None else cand.outers)

    def _price_outers(self, outers: list[int]) -> None:
        """Outers `outers` priced and probed, less those that cannot win or fit (below)."""
        # the chunk is keyed by the least of its bounds before pricing; an outer whose
        # own bound can no longer beat the bar never will (the bar only falls), and is
        # not priced: its key once priced, (lb, j, 0) with lb >= floor[j], is at least
        # (floor[j], j, 0), and Winners.beats fails for a larger value and key when it
        # fails for a smaller (the last chunk priced whole up to 511 such outers); nor is
        # one whose layout's syncs (sync_bound) prove it cannot win, nor a twin its one-class
        # configuration settles (_twins_may_win)
        js = [j for j in outers if self.can_win((float(self.floor[j]), self.rank[j], 0),
                                                max(self.floor[j], self.sync_bound.get(j, -math.inf)))
              and self._twins_may_win(j)]
        if self.partitions:  # all-Megatron's least sync (bounds/plan_sync.py: at most its own)
            raised = self.synced(js, [self.floor[j] for j in js])
            js = [j for j, lb in zip(js, raised) if self.can_win((float(self.floor[j]), self.rank[j], 0), lb)]
        self.res.pruned_by_bound += len(outers) - len(js)
        if not self.partitions and not dualpipe_job(self.inst):
            js = self._may_fit(js)
        self._price_and_probe(js)

    def _price_and_probe(self, js: list[int]) -> None:
        """Outers `js` priced and probed for incumbents, and pushed but for those a lone class's
        bound settles (_settle_alone)."""
        new = self.price(js)
        self.res.priced += len(js)
        self.probe(new)
        if not self.uniform:  # (uniform: each is settled by its incumbent, no bound read)
            kept = _settle_alone(new, self.won)
            self.res.pruned_by_bound += len(new) - len(kept)
            new = kept
        self._push(new)

    def _twins_may_win(self, j: int) -> bool:
        """Whether outer j may still win where it is twin classes (bounds/twins.py: its optimum
        at least its one-class configuration's): that configuration is priced once per
        twin_key, and where the larger of its priced and tight bounds lies past the bar's tie
        margin, j cannot beat the bar with any key (Winners.beats) and is not priced. On
        Llama 3 8B / 256 H100 with classes_per_group 2 the twins' bound before pricing is
        1.81-1.91 s and their priced bound their one-class configuration's, 1.93-4.27 s
        (issue 33)."""
        key = (None if self.partitions or self.uniform or dualpipe_job(self.inst)
               else twins.twin_key(self.outers[j]))
        M = self.inst.job.global_batch // key.micro_batch if key is not None else 0
        if key is None or M < key.replicas:
            return True  # (the claim reads a lone class of count M / X, or ceil(M / X) >= 1)
        if key not in self.lone_before:
            lone = dataclasses.replace(key, family=self.outers[j].family)
            p = problems_for(self.inst, [lone], self.objective, self.placements)[0]
            lb = -math.inf
            if p is not None and M % key.replicas:  # O_c, c = ceil(M / X) (twins.at_count)
                p = twins.at_count(p, -(-M // key.replicas))
            if p is not None:
                cand = _Candidate(lone, p, (0.0, 0, 0), self.uniform)
                lb = float(lower_bounds_s([p], lambda i: cand.mvecs, self.uniform)[0])
                tight = one_class.tight_lower_bounds_s([cs[0] for cs in p.coeffs], p.allow_full_recompute)
                lb = max(lb, float(np.dot(p.weights, tight)) if p.objective == "weighted" else float(tight.max()))
            self.lone_before[key] = lb
        return not self.lone_before[key] > self.won.bar()[0] * (1 + REL_TOL)

    def _may_fit(self, js: list[int]) -> list[int]:
        """Outers `js` less those the space's memory bound proves infeasible, which are not
        priced (solver/bounds/memory.py: no plan of theirs fits, as build would find), and,
        but for the uniform baseline, those unpriced_memory drops."""
        no_fit = memory_bound.proved_infeasible(self.inst, [self.outers[j] for j in js])
        self.res.pruned_by_memory += int(no_fit.sum())
        js = [j for j, out in zip(js, no_fit) if not out]
        if not self.uniform:
            js = self.unpriced_memory(js)
        return js

    def unpriced_memory(self, js: list[int]) -> list[int]:
        """Outers `js` less those the bound before pricing that reads memory proves unable to
        win (solver/bounds/unpriced_memory.py), counted: no split fits (memory), or the bound
        cannot beat the bar. Tested with the outer's key before pricing, (floor, rank, 0), at
        most its key once priced (as the floors' own test in _price_chunk)."""
        lbs = memory_floor_bounds_s(self.inst, [self.outers[j] for j in js], self.idx, self.agg, self.weights,
                                    self.floor_memo, self.layer_memo, self.won.bar()[0])
        kept = []
        for j, lb in zip(js, lbs.tolist()):
            if math.isinf(lb):
                self.res.pruned_by_memory += 1
            elif not self.can_win((float(self.floor[j]), self.rank[j], 0), lb):
                self.res.pruned_by_bound += 1
            else:
                kept.append(j)
        return kept

    # -- solving a candidate -------------------------------------------------------------------

    def _solve_pipeline(self, node: _Pipeline) -> None:
        """An asymmetric pipeline's split searched below the bar, under the tie rule (its
        pricing step, solver/asymmetric_search.best_plan, as the split DP is a configuration's),
        and its plan offered."""
        from paraplan.solver import asymmetric_search  # loaded by _pipelines
        bar_val, bar_key = self.won.bar()
        cutoff = bar_val * (1 + REL_TOL) if node.rank < bar_key else bar_val * (1 - REL_TOL)
        self.res.priced += 1
        self.res.solved += 1
        got = asymmetric_search.best_plan(self.inst, node.pipeline, cutoff)
        if got is None:
            if math.isinf(cutoff):  # no bar to be below: no split fits memory
                self.res.inner_infeasible += 1
            return
        val, plan = got
        found = _PipelinePlan(asymmetric_search.twin_outer(plan) or plan.outer, plan)
        if self.won.offer(val, node.rank, found) and self.progress:
            self.progress(f"incumbent {self.won.best_s:.6g} s after {self.res.solved} inner solves")

    def _settle_uniform(self, cand: _Candidate) -> None:
        """Uniform baseline: split and batch fixed, the incumbent is this configuration's optimum."""
        self.res.solved += 1
        inc = incumbent(cand.problem, cand.mvecs, self.uniform)
        if inc is None:
            self.res.inner_infeasible += 1
        else:
            self.won.offer(inc[0], cand.key, (cand.outer, *inc[1:], cand.partitions))

    def _solve(self, key, cand: _Candidate, remaining: float) -> None:
        """A priced candidate: pruned by its tighter bounds, left open where too large for the
        exact model, else queued for the inner solver with the incumbent as cutoff and hint."""
        p = cand.problem
        bar_val, bar_key = self.won.bar()
        cutoff = bar_val * (1 + REL_TOL) if key < bar_key else bar_val * (1 - REL_TOL)
        if _is_dualpipe(p):  # solved exactly by its own model (_solve_inner)
            self._queue(cand, None, cutoff)
            return
        if _lone_dp(p, self.backend):  # as the homogeneous planner: the tight bound, then the DP's cutoff
            if not self._lone_dp_open(key, cand, (bar_val, bar_key), cutoff):
                return
        elif _cannot_win_alone(p, bar_val, key < bar_key, remaining, cand.tight_s,
                               cand.settled_bar == (bar_val, bar_key)):
            self.res.pruned_by_bound += 1
            return
        elif self.backend in ("cpsat", "dp") and _dp_cells(p) > DP_MAX_CELLS:  # CP-SAT's model: the same
            self._leave_open_for_cpsat(key, p)
            return
        hint = None
        inc = incumbent(p, cand.mvecs, self.uniform)
        if inc is not None:
            hint = (inc[1], [x.astype(int).tolist() for x in inc[2]], [x.astype(int).tolist() for x in inc[3]])
        self._queue(cand, hint, cutoff)

    def _lone_dp_open(self, key, cand: _Candidate, bar: tuple, cutoff: float) -> bool:
        """Whether a lone class for the exact DP goes on to be solved: not where its tight or
        coupled bound cannot win (pruned), nor where its DP is too large (left open: the
        incumbent stands, its bound stays)."""
        p = cand.problem
        c0 = p.coeffs[0][0]
        tight = (cand.tight_s[0] if cand.tight_s is not None
                 else one_class.tight_lower_bound_s(c0, p.allow_full_recompute))
        if cand.settled_bar != bar and (  # else both failed already
                not self.can_win(key, tight)
                or math.isfinite(cutoff) and one_class.coupled_bound_above(c0, p.allow_full_recompute, cutoff)):
            self.res.pruned_by_bound += 1
            return False
        if _dp_cells(p) > DP_MAX_CELLS:
            self.res.unresolved += 1
            self.open_bounds.append(max(key[0], tight))
            self.res.reason = (f"a split of {_dp_cells(p):,} stage x chunk cells is beyond the exact"
                               f" DP's {DP_MAX_CELLS:,} (its tables' memory): that configuration"
                               " was bounded, not solved; --backend milp solves it")
            return False
        return True

    def _leave_open_for_cpsat(self, key, p: MultiClassProblem) -> None:
        """A split beyond CP-SAT's exact memory points: bounded (a lone class by its tight
        bound, as the DP's), left open, and said why."""
        self.res.unresolved += 1
        lone = p.classes == 1 and len(p.coeffs) == 1  # its tight bound, as the DP's
        self.open_bounds.append(max(key[0], one_class.tight_lower_bound_s(p.coeffs[0][0], p.allow_full_recompute))
                                if lone else key[0])
        self.res.reason = (f"a split of {_dp_cells(p):,} stage x chunk cells is beyond the"
                           f" {DP_MAX_CELLS:,} for which CP-SAT lists exact memory points: that"
                           " configuration was bounded, not solved; --backend milp solves it")

    def _queue(self, cand: _Candidate, hint, cutoff: float) -> None:
        """Batch a candidate for the inner solver; solve the batch once it has one per thread or
        the heap is empty."""
        self.batch.append((cand, hint, cutoff))
        if len(self.batch) >= self.threads or not self.heap:
            self.flush()

    def flush(self) -> None:
        """Solve the batch (at once with threads > 1) and take its results in key order."""
        if not self.batch:
            return
        remaining = self.time_limit_s - (time.perf_counter() - self.t0)
        if remaining <= 0:
            self.res.unresolved += len(self.batch)
            self.open_bounds.extend(c.key[0] for c, _, _ in self.batch)
            self.batch.clear()
            return
        jobs = [(c.problem, self.backend, remaining, hint, cutoff) for c, hint, cutoff in self.batch]
        results = (list(self.pool.map(lambda a: _solve_inner(*a), jobs)) if self.pool
                   else [_solve_inner(*jobs[0])])
        for (cand, _, _), sr in zip(self.batch, results):
            self._take(cand, sr)
        self.batch.clear()

    def _take(self, cand: _Candidate, sr) -> None:
        """One inner solve's result counted, its bound kept where not proved, its plan offered."""
        res = self.res
        if sr.status == CUTOFF:  # the exact DP proved that nothing here beats the incumbent
            res.pruned_by_bound += 1
            return
        res.solved += 1
        res.tolerance_s = max(res.tolerance_s, sr.tolerance_s if sr.status == OPTIMAL else 0.0)
        if sr.status == INFEASIBLE:
            res.inner_infeasible += 1
            return
        if sr.status != OPTIMAL:
            res.unresolved += 1
            # its own key bounds it too: a solve the limit cut short may report a bound of 0
            self.open_bounds.append(max(sr.bound_s, cand.key[0]) if sr.bound_s is not None else cand.key[0])
        if sr.objective_s is not None and self.won.offer(
                sr.objective_s, cand.key, (cand.outer, sr.micro_batches, sr.layers_per_stage,
                                           sr.full_recompute_layers, cand.partitions)):
            if self.progress:
                self.progress(f"incumbent {self.won.best_s:.6g} s after {res.solved} inner solves")

    # -- the result ----------------------------------------------------------------------------

    def finish(self, families: tuple[str, ...], resimulate: bool) -> SolveResult:
        """The result: its time and counts, then the winners' plan and bound, or why none."""
        res, won = self.res, self.won
        res.solve_time_s = time.perf_counter() - self.t0
        if self.lazy is not None:
            _count_set_up(res, self.lazy, len(self.outers) + self.unlisted, self.listed_partials, self.pipelines)
        if self.families_open:
            res.log.append("families left open at the time limit: their configurations are not counted")
        if not won.found:
            self._no_plan()
            return res
        inst, objective = self.inst, self.objective
        res.ranked = tuple(within([(val, _found_plan(found)) for val, _, found in won.found], self.within_pct))
        best_val = won.best_s
        res.plan = fewest_classes(inst, res.ranked[0][1], objective, families)
        res.quantile_s = best_val
        res.bound_s = min([best_val] + self.open_bounds)
        res.status = OPTIMAL if res.unresolved == 0 and not self.families_open else FEASIBLE
        # the plan's time: the minimised value over its configuration's factor (1 for `mean`);
        # re-simulated, the time as cost prices it (the check matched it to that ratio)
        res.objective_s = best_val / objective_factor_of(inst, res.plan)
        if resimulate:
            res.per_scenario_s, res.breakdown = check_resimulation(inst, res.plan, objective, best_val,
                                                                   res.tolerance_s)
            if objective_factor_of(inst, res.plan) != 1.0:
                res.objective_s = aggregate_s(inst, objective, res.per_scenario_s)
        return res

    def _no_plan(self) -> None:
        """Status and reason where no plan was found: out of time, nothing at or below the plan
        in hand, or nothing fits (an empty space said as such)."""
        res, won = self.res, self.won
        if res.unresolved or self.families_open:
            res.status, res.reason = TIMEOUT, (f"time limit reached before any plan was found (pricing"
                                               f" went on {FIRST_PLAN_ALLOWANCE_S:g} s past it for one)")
            if won.in_hand:
                res.reason = "time limit reached before any plan at or below the plan in hand was found"
            res.bound_s = min(self.open_bounds) if self.open_bounds else None
        elif won.in_hand:
            res.status = INFEASIBLE  # settled: nothing here is at or below the plan in hand
            res.reason = f"no plan at or below the plan in hand ({won.ceiling_s:.6g}) in this search"
        else:
            res.status = INFEASIBLE
            res.reason = ("the declared space is empty: " + empty_space_reason(self.inst)
                          if not self.summary.outer_configs else
                          "no plan fits memory (every configuration is infeasible"
                          " even with every layer fully recomputed, or its split problem is)")


def _growing_chunks(order: list[int], first: int, most: int) -> list[list[int]]:
    """`order` cut into consecutive chunks of min(first, most), then twice the previous, up
    to `most` items each."""
    out, a, size = [], 0, min(first, most)
    while a < len(order):
        out.append(order[a:a + size])
        a += size
        size = min(2 * size, most)
    return out


@dataclass
class _Unpriced(_Node):
    """Outer configurations (indices) not yet priced, keyed by the least of their bounds before
    pricing (solver/bounds/unpriced.py), which is at most each one's key once priced: index -1
    pops the chunk before any candidate of an equal bound. Its bound is tightened per outer as
    the chunk comes up (_Search._price_chunk: its layout's syncs, its twins, its least sync with
    layer plans, memory)."""

    outers: list[int]
    key: tuple[float, int, int]
    # some outer's bound not read by the floors' deadline (FLOOR_AT_LEAST_S): keyed by 0, or by
    # its layout's or tp choice's key, until the search keys it where it stops (_Search._key_late)
    late: bool = False

    @property
    def weight(self) -> int:  # candidates it stands for
        return len(self.outers)


@dataclass
class _PlanNode(_Node):
    """Outers' (one, or a chunk of the full listing's) layer-plan combinations beyond
    all-Megatron, not yet set up: keyed by a bound of all of them read before pricing
    (unpriced.floor_bounds_s with layer_plans), expanded into one _LayerPlans per outer only
    when it comes up and can still win (_Search._push_layer_plans)."""

    outers: list[int]
    key: tuple[float, int, int]
    weight: int  # the combinations it stands for
    synced: bool = False  # its key raised by its least sync (tighten)
    late: bool = False

    def tighten(self, s: _Search) -> list[float]:
        """Its outers' keys raised by their least sync under any layer plan
        (solver/bounds/plan_sync.py): read as the node comes up, not when it is listed, as most
        listed nodes never come up (the sync of one outer reads a few of cost/'s pricings)."""
        return s.synced(self.outers, [self.key[0]] * len(self.outers))


@dataclass
class _LayerPlans(_Node):
    """An outer configuration's combinations of layer plans beyond all-Megatron, not yet
    listed: keyed by their optimistic bound (solver/class_partitions.py, step 1), which is at
    most every combination's key (bound, i, j >= 1)."""

    choices: class_partitions.OuterChoices
    key: tuple[float, int, int]
    inst: Instance
    objective: str
    uniform: bool
    node: class_partitions.Subset | None = None  # None: every combination, not yet listed
    priced_s: float = -math.inf  # its priced floor (_priced_out), read as it is listed

    def __post_init__(self) -> None:
        if self.node is None and not self.choices.split_read:  # a root set up: its floor read ahead
            from paraplan.solver import class_partitions  # a search over layer plans only
            class_partitions.list_root(self.choices, self.key)

    @property
    def weight(self) -> int:  # combinations it stands for
        return self.choices.total - 1 if self.node is None else self.node.weight

    def expand(self, upper_s: float, res: SolveResult,
               deadline: float | None = None) -> tuple[list[_Candidate], list[_LayerPlans]]:
        """Its candidates that can still win, in key order, and its children (Subsets of its
        combinations, each keyed by a bound at most theirs, the key's combination index 1 at
        most theirs: listed only when they come up and can still win); past `deadline`, itself
        as its child (class_partitions.OuterChoices.expand), which the search leaves open."""
        if self._priced_out(upper_s):
            res.pruned_by_bound += self.weight
            return [], []
        if self.node is None and not self.choices.split_read:
            # the root keyed again first (class_partitions.OuterChoices.root_key_again): dropped
            # above the bar, else back on the heap at that key when it rises
            lb = self.choices.root_key_again(upper_s)
            if lb > upper_s * (1 + REL_TOL):
                res.pruned_by_bound += self.weight
                return [], []
            if lb > self.key[0]:
                return [], [dataclasses.replace(self, key=(lb, self.key[1], 1))]
        lst = self.choices.expand(upper_s, self.node, deadline)
        res.pruned_by_bound += lst.pruned_by_bound
        res.pruned_by_memory += lst.pruned_by_memory
        res.pruned_by_dominance += lst.pruned_by_dominance
        o, i = self.choices.o, self.key[1]
        kids = self._children(lst.nodes, upper_s, res)
        cands = [_Candidate(o, problem_of(self.inst, o, self.objective, coeffs, prescaled=True), (lb, i, j),
                            self.uniform, parts) for lb, j, coeffs, parts in lst.candidates]
        kept = _priced_may_win(cands, upper_s)
        res.pruned_by_bound += len(cands) - len(kept)
        return sorted(kept, key=lambda c: c.key), kids

    def _priced_out(self, upper_s: float) -> bool:
        """Whether the root before its re-key, or a node (priced_s), is proved unable to win by
        its priced floor (class_partitions.OuterChoices.priced_floors: at most each of its
        combinations' optimum, so above upper_s past the tie margin none of them can beat the
        bar, which only falls)."""
        if self.node is None and not self.choices.split_read:
            from paraplan.solver import class_partitions  # a search over layer plans only
            # (read with the floors of the next roots that can still win: class_partitions.root_floor)
            self.priced_s = class_partitions.root_floor(self.choices, upper_s * (1 + REL_TOL))
        if self.priced_s <= upper_s * (1 + REL_TOL):
            return False
        if self.node is not None:
            self.choices.forget(self.node)
        return True

    def _children(self, nodes: list, upper_s: float, res: SolveResult) -> list[_LayerPlans]:
        """Its children of `nodes` ((bound, Subset) from class_partitions.OuterChoices.expand),
        each with its priced floor read in one batch, less those it proves unable to win now
        (counted pruned: _priced_out). A child that is this node keyed again (by its linked key,
        or past the deadline: the same plans, the same coefficients) keeps the floor read for it
        (133 of the 2,833 rows read on the three-type, two-site row)."""
        i = self.key[1]
        again = self.node.sets if self.node is not None and self.priced_s > -math.inf else None
        read = iter(self.choices.priced_floors([sub for _, sub in nodes if sub.sets != again]).tolist())
        floors = [self.priced_s if sub.sets == again else next(read) for _, sub in nodes]
        kids = [dataclasses.replace(self, key=(max(lb, self.key[0]), i, 1), node=sub, priced_s=f)
                for (lb, sub), f in zip(nodes, floors)]
        out = [kid for kid in kids if not kid._priced_out(upper_s)]
        res.pruned_by_bound += sum(kid.weight for kid in kids) - sum(kid.weight for kid in out)
        return out


def _priced_may_win(cands: list[_Candidate], upper_s: float) -> list[_Candidate]:
    """`cands` (one layer-plan listing's) less the lone classes of the worst-case objective whose
    bound that reads their slowest stage and sum together (fill_drain.priced_bounds_s, per
    network, the worst taken) is above `upper_s` past the tie margin: each would be pruned by
    that test of _cannot_win_alone when it comes up (the bar only falls, so its cutoff then is
    at most upper_s * (1 + REL_TOL)), and is counted pruned now, all in one read (on the
    three-type, two-site row, 885 layer-plan candidates were each priced so one at a time,
    every one pruned)."""
    lone = [c for c in cands if c.problem.classes == 1 and c.problem.objective != "weighted"
            and not _is_dualpipe(c.problem)]
    if not lone or not math.isfinite(upper_s):
        return cands
    lbs = priced_bounds_s([cs[0] for c in lone for cs in c.problem.coeffs], lone[0].problem.allow_full_recompute)
    cut, out, at = upper_s * (1 + REL_TOL), set(), 0
    for c in lone:
        if lbs[at:at + len(c.problem.coeffs)].max() > cut:
            out.add(id(c))
        at += len(c.problem.coeffs)
    return [c for c in cands if id(c) not in out]


def _layer_plans(inst: Instance, o: ClassOuter, i: int, objective: str, placements: dict,
                 uniform: bool, res: SolveResult, memo: dict | None = None,
                 ahead: tuple | None = None) -> _LayerPlans | None:
    """The layer-plan combinations of outer `o` (index i) as one branch-and-bound node, or None
    when there are none beyond all-Megatron or none fits memory (counted in `res`). `memo`: the
    search's, shared by the outers' classes (class_partitions.OuterChoices). `ahead`: its
    _optimistic_choices, set up before (_Search._read_ahead)."""
    ch, fits = ahead or _optimistic_choices(inst, o, objective, placements, uniform, memo)
    if ch.total == 1:
        return None
    if not fits:  # a class fits no split: no combination does
        res.pruned_by_memory += ch.total - 1
        return None
    return _LayerPlans(ch, (ch.optimistic_bound(), i, 1), inst, objective, uniform)


def _optimistic_choices(inst: Instance, o: ClassOuter, objective: str, placements: dict, uniform: bool,
                        memo: dict | None) -> tuple:
    """(the layer-plan choices of outer `o`, whether every class fits some split at their
    optimistic builds (OuterChoices.optimistic with stop_unfit; not read where there is no
    choice beyond all-Megatron))."""
    from paraplan.solver import class_partitions  # a search over layer plans only
    idx, _, _ = scenario_weights(inst, objective)
    ch = class_partitions.OuterChoices(inst, o, idx, placer(inst, o, placements),
                                       class_outers(inst.job, o),
                                       lambda coeffs: problem_of(inst, o, objective, coeffs, prescaled=True),
                                       uniform, memo=memo)
    return ch, ch.total > 1 and ch.optimistic(stop_unfit=True) is not None


def fewest_classes(inst: Instance, plan: Plan, objective: str,
                   families: tuple[str, ...] = FAMILIES) -> Plan:
    """`plan` with its twin classes merged where that ties: classes on one group alike in all
    but their replicas (search.classes_per_group lists them apart, as they may run different
    micro-batch counts) become one, e.g. 1 + 7 replicas of one stage running 1 micro-batch each
    are 8. A tie between such plans is otherwise broken by the configurations' bounds, not by
    what reads simpler. The merged plan is kept only where it re-simulates no slower and fits:
    its replicas' stages lie further apart, which can cross a node (class_placement). Plans of
    one class per group (the default space) have no twins and come back unchanged; a merge
    into a family outside `families` (the planner's restriction) is not made."""
    merged: dict[tuple, ReplicaClass] = {}
    for k, c in enumerate(plan.classes):
        key = ((c.stage_groups, c.num_micro_batches, c.layers_per_stage, c.full_recompute_layers,
                c.partitions) if len(set(c.stage_groups)) == 1 else k)
        prev = merged.get(key)
        merged[key] = c if prev is None else dataclasses.replace(prev, replicas=prev.replicas + c.replicas)
    if len(merged) == len(plan.classes):
        return plan
    # the space's order: a class across groups first, then by group, depth and replicas
    classes = sorted(merged.values(), key=lambda c: (len(set(c.stage_groups)) == 1, c.stage_groups[0],
                                                     len(c.stage_groups), c.replicas))
    spans = any(len(set(c.stage_groups)) > 1 for c in classes)
    family = "stage" if len(classes) == 1 else "mixed" if spans else "replica"
    if family not in families:
        return plan
    twin = dataclasses.replace(plan, family=family, classes=tuple(classes))
    before, _ = _simulated(inst, plan, objective)
    after, bds = _simulated(inst, twin, objective)
    return twin if all(bd.fits for bd in bds) and after <= before else plan


def _simulated(inst: Instance, plan: Plan, objective: str) -> tuple[float, list[Breakdown]]:
    """The plan's objective as `cost` prices it (simulate on each scenario the objective
    reads, aggregated as it does, times the quantile objective's factor), with the breakdowns."""
    idx, _, _ = scenario_weights(inst, objective)
    bds = [simulate(inst, plan, cluster=inst.scenarios[i].cluster) for i in idx]
    return objective_factor_of(inst, plan) * aggregate_s(inst, objective, [bd.iter_time_s for bd in bds]), bds


def aggregate_s(inst: Instance, objective: str, per_scenario_s) -> float:
    """Times on the scenarios the objective reads, aggregated as it does (nominal, worst or
    expected), without the quantile objective's factor."""
    _, agg, weights = scenario_weights(inst, objective)
    per = list(per_scenario_s)
    return max(per) if agg == "max" else float(sum(w * x for w, x in zip(weights, per)))


def plan_time_s(inst: Instance, plan: Plan, objective: str) -> float:
    """The plan's time (aggregate_s of its simulated scenarios), without the factor."""
    idx, _, _ = scenario_weights(inst, objective)
    return aggregate_s(inst, objective, [simulate(inst, plan, cluster=inst.scenarios[i].cluster).iter_time_s
                                         for i in idx])


def check_resimulation(inst: Instance, plan: Plan, objective: str, objective_s: float,
                       tolerance_s: float) -> tuple[tuple[float, ...], Breakdown]:
    value, bds = _simulated(inst, plan, objective)
    per = [bd.iter_time_s for bd in bds]
    tol = tolerance_s + REL_TOL * max(1.0, objective_s)
    if abs(value - objective_s) > tol:
        raise ResimulationMismatch(f"the plan re-simulates to {value!r} s but the solver's"
                                   f" objective is {objective_s!r} s (tolerance {tol:.3g} s)")
    if not all(bd.fits for bd in bds):
        raise ResimulationMismatch("the solver's plan does not fit memory when re-simulated")
    return tuple(per), bds[0]
