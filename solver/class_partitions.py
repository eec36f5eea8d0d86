"""Per-operator tensor partitions per replica class and group, inside the class planner
(search.tensor_partitions on any cluster, issue 12).

Every (replica class k, group g hosting some of k's stages) chooses one layer plan
(cost/partition.py) for k's stages on g, recorded as `ReplicaClass.partitions`. A candidate of
the class planner (solver/hetero_planner.py) is an outer configuration plus one plan per
(k, g); its inner problem (micro-batches, split, recompute) is unchanged.

Exactness. cost/coefficients.build prices each stage from its own site's layer terms, and
class_placement gives each group its own site, so a stage's coefficients depend on the layer
plan of its own (k, g) only, monotonically in the plan's vector as solver/partition_plans.py's
docstring shows. So per (k, g) only the plans no other plan dominates on the site of every
scenario the objective reads are kept (partition_plans.joint_candidates; Megatron's plan is
always listed, as on one group), and no combination is built before it is bounded. Bounds
are solver/bounds/one_class.tight_class_terms (memory caps, forced recompute; many rows at once), per
class, then combined over classes and scenarios as batched.lower_bounds_s does
(_combination_bounds):

1. optimistic: every (k, g) at partition_plans.optimistic_terms of all its plans gives
   coefficients below those of every combination; memory-infeasible: none fits. Otherwise
   their bound keys the outer's combinations as one node of the planner's branch and bound,
   expanded (steps 2 and 3) only when it can still beat the incumbent U found by then;
2. per (k, g): its kept plans sorted by layer time and bounded in buckets (a bucket's
   optimistic terms, every other choice optimistic), then each plan of a surviving bucket
   priced once (cost/coefficients.build) and bounded alone; above U or memory-infeasible:
   dropped;
3. every combination of the remaining plans bounded at once (numpy): the per-stage arrays of
   a class come row by row from its groups' plan builds (stage s's rows from its own group's
   plan); only those that can still win get assembled coefficients (nothing is priced again)
   and become candidates, keyed by that bound.

Keys are (bound, outer index, combination index), the index counting in mixed radix over the
(k, g) choices in (class, group) order, each numbered Megatron first and then its kept plans:
one class on one group lists the homogeneous planner's (outer, layer plan) pairs in the same
order (partition_plans.partition_coefficients). In the planner, a lone class is then tried
against the incumbent by the exact DP with a cutoff before it is solved.
"""

from __future__ import annotations

import dataclasses
import itertools
import math
from dataclasses import dataclass, field

import numpy as np

from paraplan.cost import partition as P
from paraplan.cost.coefficients import StageCoefficients, build
from paraplan.cost.comm import NetEfficiency
from paraplan.cost.hetero_coefficients import class_layer_fn, class_outer, group_pricing_instance, on_group
from paraplan.solver.bounds.one_class import FLOAT_SAFETY, tight_class_terms
from paraplan.solver.bounds.batched import relaxed_s
from paraplan.solver.partition_plans import (STAGE_ARRAYS, elementwise_min, enabled, joint_candidates,
                                             optimistic_terms, plan_rows, plans_per_outer)

REL_TOL = 1e-9  # as solver/planner.REL_TOL: a bound equal to U within it is not pruned
BUCKET = 16  # plans per bucket of step 2
MEGATRON = ()  # a (class, group) choice that ReplicaClass.partitions leaves out


@dataclass
class Listing:
    """What expanding one outer configuration gave: candidates (lower bound, combination index,
    coefficients [scenario][class], partitions per class in ReplicaClass.partitions form) and
    the combinations pruned."""

    candidates: list = field(default_factory=list)
    pruned_by_bound: int = 0
    pruned_by_memory: int = 0
    pruned_by_dominance: int = 0


def _recorded(plan: dict[str, str]) -> tuple[tuple[str, str], ...]:
    return tuple((op, plan[op]) for op in P.PLAN_OPS if op in plan)


def _const(terms):
    return lambda *_: terms


def _assemble(base: StageCoefficients, parts) -> StageCoefficients:
    """`base` with the stage rows of each (mask, coefficients) in `parts` taken from those."""
    if not parts:
        return base
    arrays = {f: getattr(base, f).copy() for f in STAGE_ARRAYS}
    for mask, c in parts:
        for f in STAGE_ARRAYS:
            arrays[f][mask] = getattr(c, f)[mask]
    return dataclasses.replace(base, **arrays)


def _choices(o):
    """(k, g) pairs in (class, ascending group) order."""
    return [(k, g) for k, c in enumerate(o.classes) for g in sorted(set(c.stage_groups))]


def _on_group(co, o, g: int):
    """`co` (an outer of `o`) with group g's tensor-parallel degree (HeteroOuter.tp_of): the
    layer plans of a (class, group) choice are those of its own tp group."""
    t = o.tp_of(g)
    return co if t == co.tp else dataclasses.replace(co, tp=t)


def partition_count(inst, o) -> int:
    """Number of layer-plan combinations of outer `o` in the declared space (1 without
    per-operator partitions): every (class, group) takes any plan of its tp group."""
    if not enabled(inst):
        return 1
    return math.prod(plans_per_outer(inst, _on_group(o, o, g)) for _, g in _choices(o))


class OuterChoices:
    """The layer-plan choices of one outer configuration: its optimistic coefficients (step 1
    of the module docstring) and, on demand, the combinations that can still win (`expand`).

    `placed(i, k)`: class k's Placement on scenario i; `lone`: the micro-batch count a lone
    class is priced at (None with several classes); `problem_of(coeffs)`: the inner problem
    (formulations/multiclass.MultiClassProblem) of coefficients [scenario position][class]."""

    def __init__(self, inst, o, scenarios: list[int], placed, lone: int | None, problem_of,
                 uniform: bool = False, net: NetEfficiency = NetEfficiency()):
        self.inst, self.o, self.scenarios, self.placed, self.net = inst, o, scenarios, placed, net
        self.problem_of, self.uniform = problem_of, uniform
        K = len(o.classes)
        self.co = [class_outer(o, k, lone) for k in range(K)]
        self.keys = keys = _choices(o)
        self.cg = {(k, g): _on_group(self.co[k], o, g) for k, g in keys}  # per choice: its tp
        self.first_stage = {(k, g): o.classes[k].stage_groups.index(g) for k, g in keys}
        self.masks = {(k, g): np.array(o.classes[k].stage_groups) == g for k, g in keys}
        self.ginst = {(i, g): group_pricing_instance(inst, inst.scenarios[i].cluster, g)
                      for i in scenarios for _, g in keys}
        # (k, g) choices with more than Megatron's plan
        self.open = [(k, g) for k, g in keys if P.spatial_temporal_allowed(self.cg[k, g])]
        self.total = partition_count(inst, o)  # combinations, dominated ones included
        self.opt: dict = {}
        self.meg: dict = {}
        self.problem = None  # the MultiClassProblem of the optimistic coefficients
        self._opt_cache: dict = {}

    def _where(self, k: int, g: int) -> list:
        """(instance priced with, site, ring ranks) of choice (k, g) per scenario."""
        return [(self.ginst[i, g], self.placed(i, k).sites[self.first_stage[k, g]],
                 self.placed(i, k).dp_ranks) for i in self.scenarios]

    def _layer_fn(self, i: int, k: int, by_group: dict):
        return class_layer_fn(self.placed(i, k), self.o.classes[k].stage_groups, by_group)

    def optimistic(self) -> list[list[StageCoefficients]]:
        """Step 1: every open choice at the optimistic terms of all its plans (the minimum over
        all plans is the minimum over the non-dominated ones; the largest backward time can only
        be larger, which lowers the bound), coefficients [scenario position][class]."""
        inst, net, reserve = self.inst, self.net, self.inst.search.memory_reserve_bytes
        for si, i in enumerate(self.scenarios):
            for k in range(len(self.o.classes)):
                pl = self.placed(i, k)
                self.meg[si, k] = build(inst, self.co[k], net, reserve, placement=pl)
                lo_fns, hi_fns = {}, {}
                for kk, g in self.open:
                    if kk != k:
                        continue
                    ginst, site, _ = self._where(k, g)[si]
                    table = P.table_for(ginst, self.cg[k, g], site, net)
                    lo_t, hi_t = optimistic_terms(table, plan_rows(table, P.token_split_allowed(self.cg[k, g])))
                    lo_fns[g], hi_fns[g] = _const(lo_t), _const(hi_t)
                if not lo_fns:
                    self.opt[si, k] = self.meg[si, k]
                    continue
                lo = build(inst, self.co[k], net, reserve, placement=pl, layer_fn=self._layer_fn(i, k, lo_fns))
                hi = build(inst, self.co[k], net, reserve, placement=pl, layer_fn=self._layer_fn(i, k, hi_fns))
                self.opt[si, k] = elementwise_min(lo, hi)
        self.problem = self.problem_of(self._with({}))
        return self._with({})

    def optimistic_bound(self) -> float:
        """A lower bound of every combination (step 1), with memory caps and forced recompute
        (tight_class_terms); optimistic() first."""
        return float(self._combination_bounds([self._opt_terms(k) for k in range(len(self.o.classes))])[0])

    def _with(self, cls: dict[int, list[StageCoefficients]]) -> list[list[StageCoefficients]]:
        K, S = len(self.o.classes), len(self.scenarios)
        return [[cls[k][si] if k in cls else self.opt[si, k] for k in range(K)] for si in range(S)]

    def expand(self, upper_s: float) -> Listing:
        """Steps 2 and 3 (module docstring) against the incumbent `upper_s`; optimistic() first.
        Candidates are keyed by step 3's vectorised bound (a valid lower bound of each)."""
        out = Listing()
        inst, net, reserve = self.inst, self.net, self.inst.search.memory_reserve_bytes
        keys, masks, S, K = self.keys, self.masks, len(self.scenarios), len(self.o.classes)
        cut = upper_s * (1 + REL_TOL)
        plans = {x: [MEGATRON] for x in keys}
        rows = {}  # per open choice and scenario: the vectors of plans[k, g][1:]
        for k, g in self.open:
            front, front_rows = joint_candidates(self.cg[k, g], self._where(k, g), net)
            mine = [i for i, p in enumerate(front) if not P.is_megatron(p)]
            plans[k, g] += [_recorded(front[i]) for i in mine]
            rows[k, g] = [r[mine] for r in front_rows]
        listed = math.prod(len(plans[x]) for x in keys)
        out.pruned_by_dominance = self.total - listed

        def priced_with(k, g, fns) -> list[StageCoefficients]:
            """Class k built with group g's layers priced by fns[si] on scenario si."""
            return [build(inst, self.co[k], net, reserve, placement=self.placed(i, k),
                          layer_fn=self._layer_fn(i, k, {g: fns[si]})) for si, i in enumerate(self.scenarios)]

        # step 2: plans of one choice at a time, the others optimistic; plans are bounded by
        # buckets of similar layer time (a bucket's optimistic terms bound each of its plans)
        # before each surviving one is built; the builds are kept for step 3
        priced = {}
        kept = {x: [0] for x in keys}
        for k, g in self.open:
            js = range(1, len(plans[k, g]))
            order = sorted(js, key=lambda j: rows[k, g][0][j - 1, 0] + rows[k, g][0][j - 1, 1])
            buckets = [order[b:b + BUCKET] for b in range(0, len(order), BUCKET)]
            probes = {}
            for b, bucket in enumerate(buckets):
                if len(bucket) == 1:
                    continue
                lo_hi = [optimistic_terms(P.table_for(w[0], self.cg[k, g], w[1], net), rows[k, g][si][np.array(bucket) - 1])
                         for si, w in enumerate(self._where(k, g))]
                lo = priced_with(k, g, [_const(t[0]) for t in lo_hi])
                hi = priced_with(k, g, [_const(t[1]) for t in lo_hi])
                probes[b] = [elementwise_min(x, y) for x, y in zip(lo, hi)]
            if probes:
                ok = self._bounded(k, g, list(probes.values()), cut)
                open_buckets = [bk for b, bk in enumerate(buckets) if b not in probes or ok[list(probes).index(b)]]
            else:
                open_buckets = buckets
            js = sorted(j for bk in open_buckets for j in bk)
            for j in js:
                fn = P.partition_layer_fn(dict(plans[k, g][j]))
                priced[k, g, j] = priced_with(k, g, [on_group(fn, self.ginst[i, g]) for i in self.scenarios])
            if js:
                ok = self._bounded(k, g, [priced[k, g, j] for j in js], cut)
                kept[k, g] += [j for j, y in zip(js, ok) if y]
        radix = [len(plans[x]) for x in keys]
        strides = [math.prod(radix[i + 1:]) for i in range(len(keys))]
        survivors = math.prod(len(kept[x]) for x in keys) - 1
        out.pruned_by_bound += (listed - 1) - survivors

        # step 3: every remaining combination bounded at once; those that can still win are
        # assembled (class choices once each) and listed
        members = [[x for x in keys if x[0] == k] for k in range(K)]
        picks = [np.array(list(itertools.product(*(range(len(kept[x])) for x in members[k]))), int)
                 .reshape(-1, len(members[k])) for k in range(K)]
        terms = [self._class_terms(k, members[k], kept, picks[k], priced, self.meg) for k in range(K)]
        grid = np.stack(np.meshgrid(*[np.arange(len(x)) for x in picks], indexing="ij"), -1).reshape(-1, K)
        fits = np.all([terms[k][3][grid[:, k]] for k in range(K)], axis=0)
        quick = self._combination_bounds([tuple(x[grid[:, k]] for x in terms[k][:3]) for k in range(K)])
        megatron = np.all([(picks[k] == 0).all(1)[grid[:, k]] for k in range(K)], axis=0)
        out.pruned_by_memory += int((~fits & ~megatron).sum())
        out.pruned_by_bound += int((fits & ~megatron & (quick > cut)).sum())
        chosen = fits & ~megatron & (quick <= cut)
        class_cache: dict[tuple[int, int], list[StageCoefficients]] = {}
        for row, lb in zip(grid[chosen], quick[chosen]):
            combo, cls = [0] * len(keys), {}
            for k in range(K):
                js = [kept[x][c] for x, c in zip(members[k], picks[k][row[k]])]
                for x, j in zip(members[k], js):
                    combo[keys.index(x)] = j
                if (k, row[k]) not in class_cache:
                    parts = [(masks[x], priced[x[0], x[1], j]) for x, j in zip(members[k], js) if j]
                    class_cache[k, row[k]] = [_assemble(self.meg[si, k], [(mk, c[si]) for mk, c in parts])
                                              for si in range(S)]
                cls[k] = class_cache[k, row[k]]
            index = sum(j * st for j, st in zip(combo, strides))
            parts = tuple(tuple((g, plans[k, g][combo[i]]) for i, (kk, g) in enumerate(keys)
                                if kk == k and combo[i]) for k in range(K))
            out.candidates.append((float(lb), index, self._with(cls), parts))
        return out

    def _bounded(self, k: int, g: int, coeffs: list, cut: float) -> np.ndarray:
        """Which of `coeffs` (each per scenario, class k with group g's stages priced by one
        plan or bucket) may fit memory and bound at most `cut`, every other choice optimistic."""
        tmp = {(k, g, j + 1): c for j, c in enumerate(coeffs)}
        A, Sm, D, fits = self._class_terms(k, [(k, g)], {(k, g): list(range(len(coeffs) + 1))},
                                           np.arange(1, len(coeffs) + 1)[:, None], tmp, self.opt)
        per = [(A, Sm, D) if kk == k else tuple(np.broadcast_to(x, (len(coeffs),) + x.shape[1:])
                                                for x in self._opt_terms(kk))
               for kk in range(len(self.o.classes))]
        return fits & (self._combination_bounds(per) <= cut)

    def _opt_terms(self, k: int):
        """(A, S, D) of class k at its optimistic coefficients, arrays (1, scenarios)."""
        if k not in self._opt_cache:
            self._opt_cache[k] = self._class_terms(k, [], {}, np.zeros((1, 0), int), {}, self.opt)[:3]
        return self._opt_cache[k]

    def _class_terms(self, k: int, members: list, kept: dict, picks: np.ndarray, priced, base):
        """Per choice of class k's layer plans (row c of `picks`: for each (k, g) of `members`,
        a position in kept[k, g], which starts with Megatron's plan 0, the `base` coefficients;
        plan j > 0 is the build priced[k, g, j]; the stages of other groups from `base`): its (A, S, D) lower bounds per scenario, arrays (choices,
        scenarios): the slowest stage, the sum of the stages and the slowest sync of any split
        that fits memory (tight_class_terms), and whether one can, vectorised over the choices."""
        L, v = self.inst.model.layers, self.o.virtual_stages
        C = len(picks)

        def rows(attr: str, si: int) -> np.ndarray:
            out = np.repeat(getattr(base[si, k], attr)[None, :], C, axis=0)
            for col, x in enumerate(members):
                stack = np.stack([getattr(base[si, k], attr)] +
                                 [getattr(priced[x[0], x[1], j][si], attr) for j in kept[x][1:]])
                chosen = stack[picks[:, col]]
                out[:, self.masks[x]] = chosen[:, self.masks[x]]
            return out
        memory = {f: rows(f, 0) for f in ("layer_state_bytes", "layer_act_bytes", "layer_ckpt_bytes",
                                          "stage_mem_bytes")}
        memory["capacity_bytes"] = np.broadcast_to(base[0, k].capacity_bytes, (C, base[0, k].pp))
        A, Sm, D = [], [], []
        for si in range(len(self.scenarios)):
            times = {f: rows(f, si) for f in ("stage_time_s", "layer_time_s", "recompute_time_s",
                                              "stage_sync_time_s", "layer_sync_time_s")}
            tau, sigma, delta, fits = tight_class_terms({**memory, **times}, L, v,
                                                        self.inst.search.full_recompute)
            A.append(tau), Sm.append(sigma), D.append(delta)
        return np.array(A).T, np.array(Sm).T, np.array(D).T, fits

    def _combination_bounds(self, per_class) -> np.ndarray:
        """A lower bound of batched.lower_bounds_s for every combination at once:
        `per_class[k]` = (A, S, D) of class k's choice in each combination, arrays
        (combinations, scenarios). The same relaxation (batched.relaxed_s) per scenario; a
        weighted objective takes the weighted sum of the per-scenario bounds (the minimum of a
        sum is at least the sum of the minima)."""
        p = self.problem
        x = np.array(p.replicas, float)
        lo = np.array([p.min_micro_batches(k) for k in range(p.classes)], float)
        A = np.stack([c[0] for c in per_class], -1)  # (combinations, scenarios, classes)
        Sm = np.stack([c[1] for c in per_class], -1)
        D = np.max(np.stack([c[2] for c in per_class], -1), -1)[..., None]
        hopeless = ~np.isfinite(A).all(-1) | ~np.isfinite(Sm).all(-1) | ~np.isfinite(D[..., 0])
        A, Sm, D = (np.where(np.isfinite(y), y, 1.0) for y in (A, Sm, D))  # no fitting split: inf below
        per = relaxed_s(A, Sm, D, x, lo, p.total_micro_batches, p.virtual_stages, self.uniform)
        per = np.where(hopeless, np.inf, per)
        if p.objective == "max":
            return per.max(-1) * (1 - FLOAT_SAFETY)
        return per @ np.asarray(p.weights) * (1 - FLOAT_SAFETY)


def all_partitions(inst, o, placed, lone: int | None, net: NetEfficiency = NetEfficiency()):
    """Every layer-plan combination of `o` (no dominance, no pruning: exhaustive search), as
    partitions per class (ReplicaClass.partitions form), all-Megatron first."""
    K = len(o.classes)
    co = [class_outer(o, k, lone) for k in range(K)]
    keys = _choices(o)
    options = []
    for k, g in keys:
        opts = [MEGATRON]
        cg = _on_group(co[k], o, g)
        if enabled(inst) and P.spatial_temporal_allowed(cg):
            site = placed(0, k).sites[o.classes[k].stage_groups.index(g)]
            table = P.table_for(group_pricing_instance(inst, inst.cluster, g), cg, site, net)
            idx, _ = P.all_plans(table)
            for row in idx:
                plan = P.plan_from_indices(table, row)
                if not P.is_megatron(plan) and P.plan_allowed(plan, cg):
                    opts.append(_recorded(plan))
        options.append(opts)
    for combo in itertools.product(*options):
        yield tuple(tuple((g, combo[i]) for i, (kk, g) in enumerate(keys) if kk == k and combo[i])
                    for k in range(K))
