"""Joint search over per-operator tensor partitions and everything else (search.tensor_partitions).

Exactness argument. Every layer uses the same per-operator plan (declared-space rule, see
cost/partition.py); a layer plan is one candidate per operator plus the residual stream's
layout (cost/partition.PLAN_OPS: with sequence parallelism Megatron's sequence split or a
block layout; whether the stream is split between layers at all is the outer configuration's
sequence_parallel flag, so stage boundaries, checkpoints and the final norm stay outer terms).
The stream choice changes only the plan's fwd_s, bwd_s (its reshards and norm statistics,
replayed by a full recompute like the rest of the forward) and nothing else, so it adds no
column to the vector below. For a fixed outer configuration, a layer plan enters the pipeline problem
only through the per-layer coefficients of cost/coefficients.py, which are functions of the
plan's vector (cost/partition.VECTOR: fwd_s, bwd_s, act_bytes, workspace_bytes per
micro-batch; replicated_params, grad_sync_s per iteration; rc_fwd_s = fwd_s minus a
plan-independent constant, ckpt_bytes is plan-independent). With p = replicated_params
(weights of token-split ops held beyond a 1/tp share) and g = the layer's hideable gradient
sync (grad_sync_threshold_s: the group's weight-gradient all-reduce grad_sync_s, then the
data-parallel sync of the layer's 1/tp share plus p):
    layer_time      = max(fwd, ag) + max(bwd, ag + rs)   (ag = rs = 0 unless ZeRO-3)
    recompute_time  non-decreasing in fwd and bwd
    layer_sync      = max(0, g - bwd) + c(p)             (c: parameter all-gather and optimizer
                                                          step of the 1/tp share plus p, non-decreasing)
    grad_tail       = min(g, bwd)
    state bytes     = (1/tp share + p) * bytes per parameter
    act, workspace  the plan's own
(token splits are not offered with ZeRO-3, so ag and rs are plan-independent), and the
iteration time is non-decreasing in each coefficient while memory feasibility is monotone in
act, workspace and state. So if plan A has fwd, bwd, act, workspace, p, g <= plan B's and
max(0, g_A - bwd_A) <= max(0, g_B - bwd_B), every (split, recompute) feasible for B is feasible
for A and no slower. Keeping the plans that no other plan dominates in the vector
(fwd, bwd, act, workspace, p, g, max(0, g - bwd)) therefore loses no optimum. When g <= bwd for
every plan the last entry is 0 for all of them, and since g is non-decreasing in
(p, grad_sync_s), the plan-only vector (fwd, bwd, act, workspace, p, grad_sync_s) is a
(weaker, still exact) dominance that can be cached per layer table. The candidates of an outer
configuration are those plans, computed from all per-operator plans (at most 7^4 x 5 x 3 =
36,015 per group of 32: three stream layouts with sequence parallelism), and the class
planner's branch and bound (solver/class_partitions.py) treats every (outer, layer plan) pair as
one outer candidate: bounds, memory proofs and inner solves are unchanged, so
"optimal" is proved over outer x per-operator plans x splits x recompute. (The monotonicity
holds in real arithmetic; in floating point ZeRO-3's recompute term, a difference of maxima,
can round to +-1e-19 s, far below the planner's REL_TOL.)

A pre-pass (`partition_coefficients`) keeps the number of coefficient builds small: an outer
configuration whose optimistic coefficients (elementwise no larger than any candidate's) are
memory-infeasible, or whose lower bound exceeds an incumbent, cannot contribute, so only its
Megatron plan is listed in the one-group coefficient table (solver/planner.coefficient_table:
the report's frontier, the reason an instance fits nowhere).

The per-layer problem alone (fastest layer under a memory cap) is also solved by the MILP of
formulations/partition.py and by the segmented DP of formulations/partition_dp.py; tests
cross-check both against the enumeration here.
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING

import numpy as np

from paraplan.cost.coefficients import StageCoefficients, build_plans, homogeneous_placement, megatron_layer
from paraplan.cost.comm import NetEfficiency
from paraplan.cost.identity_cache import IdentityCache
from paraplan.cost.specs import Instance, Outer

# The per-operator partition tables (cost/partition.py) and the partition problem are imported
# in the functions that read them: a search without per-operator partitions (every search by
# default) reads only `enabled` of this module and need not create their records (issue 33,
# start-up).
if TYPE_CHECKING:
    from paraplan.cost import partition as P
    from paraplan.formulations.partition import PartitionProblem

SPATIAL_TEMPORAL = "spatial_temporal"  # the search.tensor_partitions value that opts in


def enabled(inst: Instance) -> bool:
    return SPATIAL_TEMPORAL in inst.search.tensor_partitions


def problem_from_table(table: P.LayerTable) -> PartitionProblem:
    """The formulations' arrays of one LayerTable (time = forward + backward)."""
    # here: only a search over tensor partitions reads it (issue 33's start-up)
    from paraplan.cost import partition as P
    from paraplan.formulations.partition import PartitionProblem
    return PartitionProblem(
        ops=P.PLAN_OPS, edges=P.EDGES,
        labels={o: tuple(P.spec_of(c) for c in table.candidates[o]) for o in P.PLAN_OPS},
        time_s={o: table.unary[o][:, 0] + table.unary[o][:, 1] for o in P.PLAN_OPS},
        act_bytes={o: table.unary[o][:, 2] for o in P.PLAN_OPS},
        buffer_bytes={o: table.unary[o][:, 3] for o in P.PLAN_OPS},
        edge_time_s={e: table.pair[e][..., 0] + table.pair[e][..., 1] for e in P.EDGES},
        base_time_s=table.base.fwd_s + table.base.bwd_s, base_act_bytes=table.base.act_bytes,
        base_ws_bytes=table.base.workspace_bytes,
        replicated_params={o: table.replicated_params[o] for o in P.PLAN_OPS},
        grad_sync_s={o: table.grad_sync_s[o] for o in P.PLAN_OPS})


PARETO_BLOCK = 128  # rows pareto_mask compares at once


def pareto_mask(v: np.ndarray) -> np.ndarray:
    """Rows of v (to minimise) that no other row dominates; of equal rows, the first.

    A dominating row precedes the row it dominates in lexicographic order, and of equal rows
    the first in that (stable) order comes first; so a row is kept exactly when no row before
    it in that order is at most it in every column. Comparing it with the kept rows before it
    and with the rows before it in its own block is enough: a removed row's dominator precedes
    it and is itself kept or removed by an earlier one, at most it too. One vectorised pass per
    block of PARETO_BLOCK rows, column by column (contiguous 2-D comparisons)."""
    order = np.lexsort(v.T[::-1])  # stable: equal rows keep their index order
    w = v[order]
    kept_sorted = np.zeros(len(w), bool)
    kept = [w[:0, k] for k in range(w.shape[1])]  # the kept rows so far, column by column
    for b in range(0, len(w), PARETO_BLOCK):
        blk = w[b:b + PARETO_BLOCK]
        before = np.ones((len(blk), len(blk)), bool)  # [i, j]: row i is at most row j
        behind = np.ones((len(kept[0]), len(blk)), bool)  # [i, j]: kept row i is at most row j
        for k in range(w.shape[1]):
            before &= blk[:, k][:, None] <= blk[:, k][None, :]
            behind &= kept[k][:, None] <= blk[:, k][None, :]
        out = np.triu(before, 1).any(0) | behind.any(0)
        kept_sorted[b:b + len(blk)] = ~out
        kept = [np.concatenate([kept[k], blk[~out, k]]) for k in range(w.shape[1])]
    keep = np.zeros(len(v), bool)
    keep[order[kept_sorted]] = True
    return keep


# candidate plans per (layer table, sync threshold); tables are cached in cost/partition.py
_FRONTS_MAX = 4096
_FRONTS = IdentityCache(_FRONTS_MAX)  # bounded memory across many instances (sweeps)
# pareto_mask by the content of its input: outers whose sites differ only where the layer
# table does not look (another node, another stage) get equal tables that are not one object
_MASKS: dict = {}
_MASKS_MAX = 1024


def _front(dims: np.ndarray) -> np.ndarray:
    """pareto_mask(dims), cached by the bytes of `dims`."""
    import hashlib  # here: only per-operator partitions read it (a plain plan's start-up, issue 33)
    key = (dims.shape, hashlib.blake2b(np.ascontiguousarray(dims).tobytes(), digest_size=16).digest())
    if key not in _MASKS:
        if len(_MASKS) >= _MASKS_MAX:
            _MASKS.clear()
        _MASKS[key] = pareto_mask(dims)
    return _MASKS[key]


_PLANS_MAX = 256
_PLANS = IdentityCache(_PLANS_MAX)  # each holds up to 36,015 x 6 floats


def _plans_of(table: P.LayerTable, allowed: bool) -> tuple[np.ndarray, np.ndarray]:
    """P.all_plans of a table (cached), without the token-split plans unless `allowed`."""
    return _PLANS.read((id(table), allowed), table, _read_plans, table, allowed)


def _read_plans(table: P.LayerTable, allowed: bool) -> tuple[np.ndarray, np.ndarray]:
    from paraplan.cost import partition as P
    idx, vec = P.all_plans(table)
    if not allowed:  # ZeRO-3: drop the plans with a token split
        mask = np.ones(len(idx), bool)
        for k, op in enumerate(P.PLAN_OPS):
            if op in P.LINEAR_OPS:
                mask &= ~np.isin(idx[:, k], [i for i, c in enumerate(table.candidates[op])
                                             if P.is_token_split(P.spec_of(c))])
        idx, vec = idx[mask], vec[mask]
    return idx, vec


def plan_rows(table: P.LayerTable, token_splits: bool) -> np.ndarray:
    """The vectors (cost/partition.VECTOR) of every plan of the table (cached; without the
    token-split plans unless `token_splits`)."""
    return _plans_of(table, token_splits)[1]


def _dims(inst, o, site, dp_ranks, net):
    """(table, plan indices, plan vectors, dominance dims, cache key) of one site: the vectors
    (cost/partition.VECTOR) of every allowed plan and the columns dominance compares them on
    (module docstring)."""
    from paraplan.cost import partition as P
    table = P.table_for(inst, o, site, net)
    allowed = P.token_split_allowed(o)
    idx, vec = _plans_of(table, allowed)
    rep, sync = P.VECTOR.index("replicated_params"), P.VECTOR.index("grad_sync_s")

    def g_of(r, y):
        return P.grad_sync_threshold_s(inst, o, site, dp_ranks, net, float(r), float(y))
    # g is non-decreasing in (p, grad_sync_s): the plan with both largest has the largest g;
    # at or below every plan's backward, max(0, g - bwd) = 0 for all plans and the plan-only
    # front (cached per table) is exact (module docstring)
    top = np.argmax(vec[:, rep] + vec[:, sync])
    assert (vec[:, rep] <= vec[top, rep]).all() and (vec[:, sync] <= vec[top, sync]).all()
    if g_of(vec[top, rep], vec[top, sync]) <= vec[:, 1].min():
        return table, idx, vec, vec, (id(table), allowed, None)
    # g per distinct (p, grad_sync_s), i.e. per set of token-split ops (at most 16)
    combos, inv = _sync_combos(table, allowed, vec[:, [rep, sync]])
    g_combo = np.array([g_of(r, y) for r, y in combos])
    g = g_combo[inv.reshape(-1)]
    dims = np.column_stack([vec[:, :4], vec[:, rep], g, np.maximum(0.0, g - vec[:, 1])])
    return table, idx, vec, dims, (id(table), allowed, tuple(g_combo))


def _sync_combos(table, allowed: bool, cols: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """np.unique(cols, axis=0, return_inverse=True) of a table's (replicated_params,
    grad_sync_s) columns (_dims), kept per table as _plans_of keeps its plans (every outer of
    the table reads it: the unique was about half of _dims on the three-type, two-site row)."""
    return _COMBOS.read((id(table), allowed), table, np.unique, cols, axis=0, return_inverse=True)


_COMBOS = IdentityCache(_PLANS_MAX)


def _megatron_first(table, idx, keep) -> tuple[list[dict[str, str]], list[int]]:
    from paraplan.cost import partition as P
    plans = [P.plan_from_indices(table, row) for row in idx[keep]]
    first = sorted(range(len(plans)), key=lambda k: not P.is_megatron(plans[k]))
    return [plans[k] for k in first], first


def _candidates(inst, o, site, dp_ranks, net) -> tuple[list[dict[str, str]], np.ndarray]:
    """The non-dominated per-operator plans of one outer configuration (module docstring),
    Megatron's plan first when it is among them, then enumeration order; and their rows
    (cost/partition.VECTOR)."""
    from paraplan.cost import partition as P
    if not P.spatial_temporal_allowed(o):
        return [dict(P.MEGATRON_DEFAULT)], np.zeros((0, len(P.VECTOR)))
    _, plans, rows = _front_of(*_dims(inst, o, site, dp_ranks, net))
    return [dict(p) for p in plans], rows


def _front_of(table, idx, vec, dims, key) -> tuple:
    """(table, plans, rows) of one site's _dims, kept in _FRONTS: the plans are shared, not to
    be changed."""
    return _FRONTS.read(key, table, _read_front, table, idx, vec, dims)


def _read_front(table, idx, vec, dims) -> tuple:
    keep = _front(dims)
    plans, first = _megatron_first(table, idx, keep)
    return table, plans, vec[keep][first]


def joint_front(o, where, net) -> tuple[tuple, list[dict[str, str]], list[np.ndarray]]:
    """The non-dominated plans of one layer-plan choice with plans beyond Megatron's
    (cost/partition.spatial_temporal_allowed) priced on several sites at once (one replica
    class's stages on one group, seen in every network scenario the objective reads): `where`
    lists (instance priced with, site, gradient-ring ranks) triples; a plan is dropped only when
    one other plan dominates it on every site (the concatenated dominance vectors), so the
    argument of the module docstring holds scenario by scenario. Returns a key, the plans
    (Megatron's first when among them) and, per triple of `where`, their rows
    (cost/partition.VECTOR). Equal keys give the same (shared, not to be changed) plans list,
    kept while its tables live (_JOINT; the class planner keeps what it derives from a front by
    this key, class_partitions._kept_plans)."""
    uniq = list(dict.fromkeys(where))
    parts = [_dims(inst, o, site, dp, net) for inst, site, dp in uniq]
    at = [uniq.index(w) for w in where]
    if len(uniq) == 1:
        table, plans, rows = _front_of(*parts[0])
        return (parts[0][4], tuple(at)), plans, [rows] * len(where)
    # the front of the concatenated dims is a function of each site's (table, sync threshold),
    # its _dims key
    key = (tuple(x[4] for x in parts), tuple(at))
    hit = _JOINT.get(key)
    if hit is None or any(t is not x[0] for t, x in zip(hit[0], parts)):
        table, idx = parts[0][0], parts[0][1]
        # the candidates of a table depend on tp, sp and the stream flag only: one plan per row
        assert all(np.array_equal(x[1], idx) for x in parts)
        keep = _front(np.hstack([x[3] for x in parts]))
        plans, first = _megatron_first(table, idx, keep)
        rows = [x[2][keep][first] for x in parts]
        if len(_JOINT) >= _FRONTS_MAX:
            _JOINT.clear()
        hit = _JOINT[key] = (tuple(x[0] for x in parts), plans, [rows[a] for a in at])
    return key, hit[1], hit[2]


# joint_front's of several sites, by their _dims keys, each holding its tables (their ids in the key)
_JOINT: dict = {}


STAGE_ARRAYS = ("layer_time_s", "recompute_time_s", "stage_time_s", "layer_sync_time_s",
           "stage_sync_time_s", "layer_state_bytes", "layer_act_bytes", "layer_ckpt_bytes",
           "stage_mem_bytes")


def stage_arrays(c: StageCoefficients) -> tuple[str, ...]:
    """The per-stage arrays of `c` a layer plan sets: STAGE_ARRAYS, and under torch's
    zero-bubble schedules each layer's drain saving k w t_s (cost/zero_bubble.py), which follows
    the plan's layer time (empty, and not one of them, otherwise). Its elementwise minimum
    k w min(t) stays below every plan's, and every bound reads a pass T_s - k W_s, which grows
    with t as k w <= 1: optimistic coefficients still bound every plan."""
    return STAGE_ARRAYS + (("layer_drain_saving_s",) if c.layer_drain_saving_s.size else ())


def _plans_coefficients(inst, o, pl, plans, reserve_bytes, net) -> list[StageCoefficients]:
    """The coefficients of `o` under each layer plan of `plans`, in one pass (build_plans)."""
    from paraplan.cost import partition as P
    fns = [megatron_layer if P.is_megatron(p) else P.partition_layer_fn(p) for p in plans]
    out = build_plans(inst, o, fns, net, reserve_bytes, placement=pl)
    return [c if P.is_megatron(p) else
            dataclasses.replace(c, partitions=tuple((op, p[op]) for op in P.PLAN_OPS if op in p))
            for p, c in zip(plans, out)]


def optimistic_terms(table: P.LayerTable, rows: np.ndarray) -> tuple[P.LayerTerms, P.LayerTerms]:
    """Two LayerTerms below every plan whose vector (cost/partition.VECTOR) is a row of `rows`:
    every term at its minimum over the rows, and the same with bwd_s at its maximum (the layer's
    exposed gradient sync falls with bwd_s, optimistic_coefficients). rc_fwd_s = fwd_s minus the
    plan-independent selective-recompute term (cost/partition.layer_terms)."""
    from paraplan.cost import partition as P
    lo_v = rows.min(axis=0)
    rc_gap = table.base.fwd_s - table.base.rc_fwd_s

    def lt(bwd_s):
        return P.LayerTerms(fwd_s=lo_v[0], bwd_s=bwd_s, rc_fwd_s=lo_v[0] - rc_gap, parts={},
                            overlapped={}, act_bytes=lo_v[2], ckpt_bytes=table.base.ckpt_bytes,
                            workspace_bytes=lo_v[3], replicated_params=lo_v[4], grad_sync_s=lo_v[5])
    return lt(lo_v[1]), lt(rows[:, 1].max())


def table_terms(table: P.LayerTable, token_splits: bool) -> tuple[P.LayerTerms, P.LayerTerms]:
    """optimistic_terms of every plan of the table (plan_rows), kept per table as _plans_of
    keeps its plans: every outer's optimistic build reads them of each of its groups' tables
    (the least over up to 36,015 rows: 15% of those builds in a profile of the 32 A100 + 32
    H100 row with partitions and the three layout options)."""
    return _TABLE_TERMS.read((id(table), token_splits), table, _read_table_terms, table, token_splits)


def _read_table_terms(table: P.LayerTable, token_splits: bool) -> tuple[P.LayerTerms, P.LayerTerms]:
    return optimistic_terms(table, plan_rows(table, token_splits))


_TABLE_TERMS = IdentityCache(_PLANS_MAX)  # table_terms' by (table id, token splits), each holding its table


def elementwise_min(lo: StageCoefficients, hi: StageCoefficients) -> StageCoefficients:
    """`lo` with every per-stage array the elementwise minimum of the two."""
    return dataclasses.replace(lo, **{f: np.minimum(getattr(lo, f), getattr(hi, f)) for f in stage_arrays(lo)})


def optimistic_coefficients(inst, o, pl, rows: np.ndarray, reserve_bytes, net) -> StageCoefficients:
    """Coefficients no larger than those of any plan whose vector (cost/partition.VECTOR) is a
    row of `rows`: every coefficient is monotone in the LayerTerms (module docstring), all
    non-decreasing except layer_sync, which falls with bwd_s; so the elementwise minimum of two
    builds, one with every term at its minimum over the plans and one with bwd_s at its
    maximum, bounds every plan's from below (optimistic_terms)."""
    from paraplan.cost import partition as P
    lo_t, hi_t = optimistic_terms(P.table_for(inst, o, pl.sites[0], net), rows)
    lo, hi = build_plans(inst, o, (lambda *_: lo_t, lambda *_: hi_t), net, reserve_bytes, placement=pl)
    return elementwise_min(lo, hi)


def partition_coefficients(inst: Instance, outers: list[Outer], reserve_bytes: float,
                           net: NetEfficiency = NetEfficiency(), rel_tol: float = 1e-9,
                           deadline: float | None = None) -> tuple[list[StageCoefficients], bool]:
    """The coefficients of (outer, layer plan) pairs in (outer, plan) order, and whether the
    list is whole.

    A pre-pass keeps the number of full builds small without losing exactness: U = the best
    incumbent (solver/bounds/one_class.py) over every outer's Megatron plan and fastest-layer plan; an
    outer whose optimistic coefficients are memory-infeasible or bound above U cannot hold a
    plan that beats U, so only its Megatron plan is listed (the planner then prunes or solves
    it). The others list every candidate plan.

    deadline (a time.perf_counter() value): past it the list stops growing, and is not whole."""
    import time

    from paraplan.cost import partition as P
    from paraplan.cost.framework_rules import recompute_pattern
    from paraplan.solver.bounds import one_class

    def late(i: int) -> bool:
        return deadline is not None and i % 64 == 0 and time.perf_counter() > deadline

    allow_rc = inst.search.full_recompute
    prepared, best_u = [], float("inf")
    for i, o in enumerate(outers):
        if late(i):
            return [], False
        pl = homogeneous_placement(inst.cluster.one_group, o)
        plans, rows = _candidates(inst, o, pl.sites[0], pl.dp_ranks, net)
        probe_plans = [dict(P.MEGATRON_DEFAULT)]
        if len(plans) > 1:
            probe_plans.append(plans[int(np.argmin(rows[:, 0] + rows[:, 1]))])
        probes = _plans_coefficients(inst, o, pl, probe_plans, reserve_bytes, net)
        meg = probes[0]
        for c in probes:
            inc = (None if one_class.memory_infeasible(c) else
                   one_class.incumbent(c, allow_rc, recompute_pattern(inst.job.framework, o.recompute,
                                                                       inst.search.partial_recompute)))
            if inc is not None:
                best_u = min(best_u, inc[0])
        prepared.append((o, pl, plans, rows, meg))

    out = []
    for i, (o, pl, plans, rows, meg) in enumerate(prepared):
        if late(i):
            return out, False
        others = [p for p in plans if not P.is_megatron(p)]
        out.append(meg)
        if not others:
            continue
        opt = optimistic_coefficients(inst, o, pl, rows, reserve_bytes, net)
        if not one_class.memory_infeasible(opt) and one_class.lower_bound_s(opt) <= best_u * (1 + rel_tol):
            out.extend(_plans_coefficients(inst, o, pl, others, reserve_bytes, net))
    return out, True


def plans_per_outer(inst: Instance, o: Outer) -> int:
    """Number of per-operator plans of the declared space for one outer configuration."""
    from paraplan.cost import partition as P
    if not enabled(inst) or not P.spatial_temporal_allowed(o):
        return 1
    n_lin = len(P.op_candidates(o.tp, True)) - (0 if P.token_split_allowed(o) else 1)
    return (n_lin ** len(P.LINEAR_OPS) * len(P.core_candidates(o.tp, True))
            * len(P.stream_candidates(o.tp, o.sequence_parallel, True)))
