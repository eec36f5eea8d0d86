"""Joint search over per-operator tensor partitions and everything else (search.tensor_partitions).

Exactness argument. Every layer uses the same per-operator plan (declared-space rule, see
cost/partition.py). For a fixed outer configuration, a layer plan enters the pipeline problem
only through the per-layer coefficients of cost/coefficients.py, which are functions of the
plan's LayerTerms vector (fwd_s, bwd_s, act_bytes, workspace_bytes; rc_fwd_s = fwd_s minus a
plan-independent constant, ckpt_bytes and state bytes are plan-independent):
    layer_time      = max(fwd, ag) + max(bwd, ag + rs)   (ag = rs = 0 unless ZeRO-3)
    recompute_time  non-decreasing in fwd and bwd
    layer_sync      = max(0, g - bwd) + const            (g: grad_sync_threshold_s)
    grad_tail       = min(g, bwd)
    act, workspace  the plan's own
and the iteration time is non-decreasing in each coefficient while memory feasibility is
monotone in act and workspace. So if plan A has fwd, bwd, act, workspace <= plan B's and
min(bwd_A, g) >= min(bwd_B, g), every (split, recompute) feasible for B is feasible for A and
no slower. Keeping the plans that no other plan dominates in the vector
(fwd, bwd, act, workspace, -min(bwd, g)) therefore loses no optimum. The candidates of an outer
configuration are those plans, computed from all per-operator plans (at most 6^4 x 5 = 6,480 per
group of 32), and the branch-and-bound of solver/planner.py treats every (outer, layer plan)
pair as one outer candidate: bounds, memory proofs and inner solves are unchanged, so
"optimal" is proved over outer x per-operator plans x splits x recompute. (The monotonicity
holds in real arithmetic; in floating point ZeRO-3's recompute term, a difference of maxima,
can round to +-1e-19 s, far below the planner's REL_TOL.)

A pre-pass (`partition_coefficients`) keeps the number of coefficient builds small: an outer
configuration whose optimistic coefficients (elementwise no larger than any candidate's) are
memory-infeasible, or whose lower bound exceeds an incumbent, cannot contribute, so only its
Megatron plan is listed; its other candidates are counted as pruned by memory or bound.

The per-layer problem alone (fastest layer under a memory cap) is also solved by the MILP of
formulations/partition.py and by the segmented DP of formulations/partition_dp.py; tests
cross-check both against the enumeration here.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from cost import partition as P
from cost.coefficients import StageCoefficients, build, homogeneous_placement
from cost.comm import NetEfficiency
from cost.specs import Instance, Outer
from formulations.partition import PartitionProblem

SPATIAL_TEMPORAL = "spatial_temporal"  # the search.tensor_partitions value that opts in


def enabled(inst: Instance) -> bool:
    return SPATIAL_TEMPORAL in inst.search.tensor_partitions


def problem_from_table(table: P.LayerTable) -> PartitionProblem:
    """The formulations' arrays of one LayerTable (time = forward + backward)."""
    return PartitionProblem(
        ops=P.OPS, edges=P.EDGES,
        labels={o: tuple(P.spec_of(c) for c in table.candidates[o]) for o in P.OPS},
        time_s={o: table.unary[o][:, 0] + table.unary[o][:, 1] for o in P.OPS},
        act_bytes={o: table.unary[o][:, 2] for o in P.OPS},
        buffer_bytes={o: table.unary[o][:, 3] for o in P.OPS},
        edge_time_s={e: table.pair[e][..., 0] + table.pair[e][..., 1] for e in P.EDGES},
        base_time_s=table.base.fwd_s + table.base.bwd_s, base_act_bytes=table.base.act_bytes,
        base_ws_bytes=table.base.workspace_bytes)


def pareto_mask(v: np.ndarray) -> np.ndarray:
    """Rows of v (to minimise) that no other row dominates; of equal rows, the first.

    A dominating row precedes the row it dominates in lexicographic order, so one pass over
    the rows in that order, comparing each with the rows kept so far, is exact."""
    order = np.lexsort(v.T[::-1])  # stable: equal rows keep their index order
    keep = np.zeros(len(v), bool)
    kept = np.empty((0, v.shape[1]))
    for i in order:
        if not len(kept) or not (kept <= v[i]).all(1).any():
            keep[i] = True
            kept = np.vstack([kept, v[i]])
    return keep


# candidate plans per (layer table, sync threshold); tables are cached in cost/partition.py
_FRONTS: dict = {}
_FRONTS_MAX = 4096


def candidate_plans(inst: Instance, o: Outer, site, dp_ranks: int,
                    net: NetEfficiency) -> list[dict[str, str]]:
    """The non-dominated per-operator plans of one outer configuration (module docstring);
    Megatron's plan first when it is among them, then enumeration order."""
    return _candidates(inst, o, site, dp_ranks, net)[0]


def _candidates(inst, o, site, dp_ranks, net) -> tuple[list[dict[str, str]], np.ndarray]:
    """candidate_plans and their (fwd_s, bwd_s, act_bytes, workspace_bytes) rows."""
    if not P.spatial_temporal_allowed(o):
        return [dict(P.MEGATRON_DEFAULT)], np.zeros((0, 4))
    table = P.table_for(inst, o, site, net)
    idx, vec = P.all_plans(table)
    g = P.grad_sync_threshold_s(inst, o, site, dp_ranks, net)
    # with g at or below every plan's backward, -min(bwd, g) is the same for all plans and the
    # 4-dimensional front (cached per table) is the exact one
    key = (id(table), None if g <= vec[:, 1].min() else g)
    if key not in _FRONTS or _FRONTS[key][0] is not table:
        if len(_FRONTS) >= _FRONTS_MAX:  # bounded memory across many instances (sweeps)
            _FRONTS.clear()
        dims = vec if key[1] is None else np.column_stack([vec, -np.minimum(vec[:, 1], g)])
        keep = pareto_mask(dims)
        plans = [P.plan_from_indices(table, row) for row in idx[keep]]
        first = sorted(range(len(plans)), key=lambda k: not P.is_megatron(plans[k]))
        _FRONTS[key] = (table, [plans[k] for k in first], vec[keep][first])
    _, plans, rows = _FRONTS[key]
    return [dict(p) for p in plans], rows


class CandidateTable(list):
    """The planner's candidate list plus the (outer, plan) pairs the pre-pass already settled."""

    pruned_by_bound: int = 0
    pruned_by_memory: int = 0
    pruned_by_dominance: int = 0  # layer plans dominated by a candidate (module docstring)


_ARRAYS = ("layer_time_s", "recompute_time_s", "stage_time_s", "layer_sync_time_s",
           "stage_sync_time_s", "layer_state_bytes", "layer_act_bytes", "layer_ckpt_bytes",
           "stage_mem_bytes")


def _plan_coefficients(inst, o, pl, plan, reserve_bytes, net) -> StageCoefficients:
    if P.is_megatron(plan):
        return build(inst, o, net, reserve_bytes, placement=pl)
    c = build(inst, o, net, reserve_bytes, placement=pl, layer_fn=P.partition_layer_fn(plan))
    return dataclasses.replace(c, partitions=tuple((op, plan[op]) for op in P.OPS))


def optimistic_coefficients(inst, o, pl, rows: np.ndarray, reserve_bytes, net) -> StageCoefficients:
    """Coefficients no larger than those of any plan whose (fwd_s, bwd_s, act_bytes,
    workspace_bytes) is a row of `rows`: every coefficient is monotone in the LayerTerms
    (module docstring), all increasing except layer_sync, which falls with bwd_s; so the
    elementwise minimum of two builds, one with every term at its minimum over the plans and
    one with bwd_s at its maximum, bounds every plan's from below. rc_fwd_s = fwd_s minus the
    plan-independent selective-recompute term (cost/partition.layer_terms)."""
    table = P.table_for(inst, o, pl.sites[0], net)
    lo_v = rows.min(axis=0)
    rc_gap = table.base.fwd_s - table.base.rc_fwd_s

    def lt(bwd_s):
        return P.LayerTerms(fwd_s=lo_v[0], bwd_s=bwd_s, rc_fwd_s=lo_v[0] - rc_gap, parts={},
                            overlapped={}, act_bytes=lo_v[2], ckpt_bytes=table.base.ckpt_bytes,
                            workspace_bytes=lo_v[3])
    lo = build(inst, o, net, reserve_bytes, placement=pl, layer_fn=lambda *_: lt(lo_v[1]))
    hi = build(inst, o, net, reserve_bytes, placement=pl, layer_fn=lambda *_: lt(rows[:, 1].max()))
    return dataclasses.replace(lo, **{f: np.minimum(getattr(lo, f), getattr(hi, f)) for f in _ARRAYS})


def partition_coefficients(inst: Instance, outers: list[Outer], reserve_bytes: float,
                           net: NetEfficiency = NetEfficiency(), rel_tol: float = 1e-9) -> CandidateTable:
    """Planner candidates: (outer, layer plan) pairs in (outer, plan) order.

    A pre-pass keeps the number of full builds small without losing exactness: U = the best
    incumbent (solver/bounds.py) over every outer's Megatron plan and fastest-layer plan; an
    outer whose optimistic coefficients are memory-infeasible or bound above U cannot hold a
    plan that beats U, so only its Megatron plan is listed (the planner then prunes or solves
    it) and its other plans are counted as pruned. The others list every candidate plan."""
    from solver import bounds

    allow_rc = inst.search.full_recompute
    prepared, best_u = [], float("inf")
    for o in outers:
        pl = homogeneous_placement(inst.cluster, o)
        plans, rows = _candidates(inst, o, pl.sites[0], pl.dp_ranks, net)
        meg = _plan_coefficients(inst, o, pl, dict(P.MEGATRON_DEFAULT), reserve_bytes, net)
        probes = [meg]
        if len(plans) > 1:
            fastest = plans[int(np.argmin(rows[:, 0] + rows[:, 1]))]
            probes.append(_plan_coefficients(inst, o, pl, fastest, reserve_bytes, net))
        for c in probes:
            inc = None if bounds.memory_infeasible(c) else bounds.incumbent(c, allow_rc)
            if inc is not None:
                best_u = min(best_u, inc[0])
        prepared.append((o, pl, plans, rows, meg))

    out = CandidateTable()
    for o, pl, plans, rows, meg in prepared:
        others = [p for p in plans if not P.is_megatron(p)]
        out.append(meg)
        out.pruned_by_dominance += plans_per_outer(inst, o) - 1 - len(others)
        if not others:
            continue
        opt = optimistic_coefficients(inst, o, pl, rows, reserve_bytes, net)
        if bounds.memory_infeasible(opt):
            out.pruned_by_memory += len(others)
        elif bounds.lower_bound_s(opt) > best_u * (1 + rel_tol):
            out.pruned_by_bound += len(others)
        else:
            out.extend(_plan_coefficients(inst, o, pl, p, reserve_bytes, net) for p in others)
    return out


def plans_per_outer(inst: Instance, o: Outer) -> int:
    """Number of per-operator plans of the declared space for one outer configuration."""
    if not enabled(inst) or not P.spatial_temporal_allowed(o):
        return 1
    n_lin = len(P.op_candidates(o.tp, True))
    return n_lin ** len(P.LINEAR_OPS) * len(P.core_candidates(o.tp, True))


def all_plan_coefficients(inst: Instance, o: Outer, net: NetEfficiency = NetEfficiency()):
    """Coefficients of every per-operator plan of `o` (no dominance, no pruning: for exhaustive
    search), Megatron's first; just Megatron's when per-operator partitions are off."""
    reserve = inst.search.memory_reserve_bytes
    pl = homogeneous_placement(inst.cluster, o)
    yield _plan_coefficients(inst, o, pl, dict(P.MEGATRON_DEFAULT), reserve, net)
    if plans_per_outer(inst, o) == 1:
        return
    table = P.table_for(inst, o, pl.sites[0], net)
    idx, _ = P.all_plans(table)
    for row in idx:
        plan = P.plan_from_indices(table, row)
        if not P.is_megatron(plan):
            yield _plan_coefficients(inst, o, pl, plan, reserve, net)
